//! Prometheus metrics shared by every service: one registry per process ([`Metrics`]), the
//! request figures [`layers`](crate::layers) records, and the renderers every metrics
//! endpoint answers with.
//!
//! - `registry.rs`: [`Metrics`] (created once by `cairn`, carried in each service's `Config`;
//!   process-wide sources such as the store's figures) and [`RequestMetrics`] (what the request
//!   layer records: a count and a latency histogram per service, matched route, method and
//!   status).
//! - `family.rs`: the figures as plain data ([`Family`], [`Histogram`]), so that both answers
//!   come from one snapshot and a service's scrape-time gauges need no metrics library.
//! - `render.rs`: the Prometheus text format (encoded by `prometheus-client`) and go-metrics'
//!   JSON summary, with [`Format`] choosing between them.
//!
//! Where it sits: in http-kit because the request layer lives here and every service already
//! depends on it; it knows no service and no storage backend (`cairn` turns the store's
//! statistics into families and registers them with [`Metrics::add_source`]).

mod family;
mod registry;
mod render;

pub use family::{Family, Histogram, LATENCY_BUCKETS, Labels, Samples};
pub use registry::{Metrics, RequestMetrics, UNMATCHED_ROUTE};
pub use render::{
    Format, JSON_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE, json_summary, prometheus_text, render,
    response,
};
