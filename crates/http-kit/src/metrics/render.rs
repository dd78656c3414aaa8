//! Rendering gathered families: the Prometheus text format (version 0.0.4, encoded by the
//! `prometheus-client` crate, never by hand) and the JSON summary Vault, Consul and Nomad
//! answer without `format=prometheus` (go-metrics' `MetricsSummary` shape).
//!
//! Where it sits: called by each service's metrics endpoint with what
//! [`Metrics::gather`](crate::metrics::Metrics::gather) returned.
//!
//! Invariants: the text is what `prometheus_client::encoding::prometheus_text` writes, served
//! as [`PROMETHEUS_CONTENT_TYPE`]; in the JSON summary counters and histograms are totals since
//! the process started, and `Rate` is per second of that time.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde::Serialize;

use crate::metrics::family::{Family, Histogram, Labels, Samples};

/// The content type of the Prometheus text format, version 0.0.4 (what Vault, Consul and Nomad
/// serve for `format=prometheus`).
pub const PROMETHEUS_CONTENT_TYPE: &str =
    prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The content type of the JSON summary.
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// How a scrape is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format.
    Prometheus,
    /// go-metrics' JSON summary.
    Json,
}

impl Format {
    /// Consul's and Nomad's rule for the `format` query parameter: `prometheus` selects the
    /// text format, anything else (or nothing) the JSON summary.
    pub fn from_query(format: Option<&str>) -> Format {
        match format {
            Some("prometheus") => Format::Prometheus,
            _ => Format::Json,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => PROMETHEUS_CONTENT_TYPE,
            Format::Json => JSON_CONTENT_TYPE,
        }
    }
}

/// The body of a scrape in `format`; `uptime` is the time the totals cover (for JSON rates).
pub fn render(
    format: Format,
    families: Vec<Family>,
    uptime: Duration,
    now_unix_secs: i64,
) -> String {
    match format {
        Format::Prometheus => prometheus_text(families),
        Format::Json => json_summary(&families, uptime, now_unix_secs),
    }
}

/// A 200 answer of `families` in `format`, with its content type.
pub fn response(format: Format, families: Vec<Family>, uptime: Duration) -> Response {
    let body = render(format, families, uptime, stdx::time::unix_now_ms() / 1000);
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    response
}

/// `families` in the Prometheus text format.
pub fn prometheus_text(families: Vec<Family>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(families)));
    let mut text = String::new();
    // Writing into a String cannot fail; the encoder reports no error of its own for our data.
    if let Err(err) = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry) {
        tracing::error!(message = "Encoding metrics failed.", error = %err);
    }
    text
}

/// Families gathered for one scrape, encoded through `prometheus-client`'s collector API.
#[derive(Debug)]
struct Scrape(Vec<Family>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for family in &self.0 {
            let metric_type = match family.samples {
                Samples::Counter(_) => MetricType::Counter,
                Samples::Gauge(_) => MetricType::Gauge,
                Samples::Histogram(_) => MetricType::Histogram,
            };
            let mut metric =
                encoder.encode_descriptor(family.name, family.help, None, metric_type)?;
            match &family.samples {
                Samples::Counter(samples) => {
                    for (labels, value) in samples {
                        metric
                            .encode_family(labels)?
                            .encode_counter::<NoLabelSet, _, u64>(value, None)?;
                    }
                }
                Samples::Gauge(samples) => {
                    for (labels, value) in samples {
                        metric.encode_family(labels)?.encode_gauge(value)?;
                    }
                }
                Samples::Histogram(samples) => {
                    for (labels, histogram) in samples {
                        let buckets: Vec<(f64, u64)> = histogram
                            .bounds
                            .iter()
                            .copied()
                            .chain(std::iter::once(f64::INFINITY))
                            .zip(histogram.counts.iter().copied())
                            .collect();
                        metric
                            .encode_family(labels)?
                            .encode_histogram::<NoLabelSet>(
                                histogram.sum,
                                histogram.count,
                                &buckets,
                                None,
                            )?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// go-metrics' `MetricsSummary`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct Summary<'a> {
    timestamp: String,
    gauges: Vec<GaugeValue<'a>>,
    points: Vec<()>,
    counters: Vec<SampledValue<'a>>,
    samples: Vec<SampledValue<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct GaugeValue<'a> {
    name: &'a str,
    value: f64,
    labels: BTreeMap<&'a str, &'a str>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct SampledValue<'a> {
    name: &'a str,
    count: u64,
    rate: f64,
    sum: f64,
    min: f64,
    max: f64,
    mean: f64,
    stddev: f64,
    labels: BTreeMap<&'a str, &'a str>,
}

/// `families` as go-metrics' JSON summary (what `/v1/metrics`, `/v1/agent/metrics` and
/// `/v1/sys/metrics` answer without `format=prometheus`).
pub fn json_summary(families: &[Family], uptime: Duration, now_unix_secs: i64) -> String {
    let seconds = uptime.as_secs_f64().max(1.0);
    let mut summary = Summary {
        timestamp: go_time_string(now_unix_secs),
        gauges: Vec::new(),
        points: Vec::new(),
        counters: Vec::new(),
        samples: Vec::new(),
    };
    for family in families {
        match &family.samples {
            Samples::Gauge(samples) => {
                summary
                    .gauges
                    .extend(samples.iter().map(|(labels, value)| GaugeValue {
                        name: family.name,
                        value: *value as f64,
                        labels: label_map(labels),
                    }));
            }
            Samples::Counter(samples) => {
                // A counter is a run of increments of one.
                summary
                    .counters
                    .extend(samples.iter().map(|(labels, value)| {
                        let total = *value as f64;
                        let unit = if *value == 0 { 0.0 } else { 1.0 };
                        SampledValue {
                            name: family.name,
                            count: *value,
                            rate: total / seconds,
                            sum: total,
                            min: unit,
                            max: unit,
                            mean: unit,
                            stddev: 0.0,
                            labels: label_map(labels),
                        }
                    }));
            }
            Samples::Histogram(samples) => {
                summary
                    .samples
                    .extend(samples.iter().map(|(labels, histogram)| {
                        sampled(family.name, histogram, seconds, label_map(labels))
                    }));
            }
        }
    }
    // Serializing these plain structs cannot fail.
    serde_json::to_string(&summary).unwrap_or_default()
}

fn label_map(labels: &Labels) -> BTreeMap<&'static str, &str> {
    labels
        .iter()
        .map(|(key, value)| (*key, value.as_str()))
        .collect()
}

fn sampled<'a>(
    name: &'a str,
    histogram: &Histogram,
    seconds: f64,
    labels: BTreeMap<&'a str, &'a str>,
) -> SampledValue<'a> {
    SampledValue {
        name,
        count: histogram.count,
        rate: histogram.sum / seconds,
        sum: histogram.sum,
        min: histogram.min,
        max: histogram.max,
        mean: histogram.mean(),
        stddev: histogram.stddev(),
        labels,
    }
}

/// Go's `time.Time.String()` of a UTC instant in whole seconds: `2024-05-01 12:00:00 +0000 UTC`.
fn go_time_string(unix_secs: i64) -> String {
    let rfc3339 = stdx::time::format_rfc3339_secs(unix_secs);
    let (date, time) = rfc3339.split_once('T').unwrap_or((&rfc3339, ""));
    format!("{date} {} +0000 UTC", time.trim_end_matches('Z'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: &[f64] = &[0.1, 1.0];

    fn families() -> Vec<Family> {
        let mut latency = Histogram::new(BOUNDS);
        latency.observe(0.05);
        latency.observe(0.5);
        latency.observe(2.0);
        vec![
            Family::counter(
                "cairn_things",
                "Things done.",
                vec![(vec![("kind", "a\"b".to_owned())], 3)],
            ),
            Family::single_gauge("cairn_sealed", "Whether sealed.", 0),
            Family::histogram(
                "cairn_latency_seconds",
                "Latency.",
                vec![(vec![("route", "/v1/x".to_owned())], latency)],
            ),
        ]
    }

    #[test]
    fn prometheus_text_is_the_version_0_0_4_exposition() {
        let text = prometheus_text(families());
        let expected = r#"# HELP cairn_things_total Things done.
# TYPE cairn_things_total counter
cairn_things_total{kind="a\"b"} 3
# HELP cairn_sealed Whether sealed.
# TYPE cairn_sealed gauge
cairn_sealed 0
# HELP cairn_latency_seconds Latency.
# TYPE cairn_latency_seconds histogram
cairn_latency_seconds_bucket{route="/v1/x",le="0.1"} 1
cairn_latency_seconds_bucket{route="/v1/x",le="1"} 2
cairn_latency_seconds_bucket{route="/v1/x",le="+Inf"} 3
cairn_latency_seconds_sum{route="/v1/x"} 2.55
cairn_latency_seconds_count{route="/v1/x"} 3
"#;
        assert_eq!(text, expected);
        assert_eq!(
            PROMETHEUS_CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8"
        );
    }

    #[test]
    fn json_summary_has_go_metrics_shape() {
        let json: serde_json::Value = serde_json::from_str(&json_summary(
            &families(),
            Duration::from_secs(3),
            1_714_564_800,
        ))
        .unwrap();
        assert_eq!(json["Timestamp"], "2024-05-01 12:00:00 +0000 UTC");
        assert_eq!(json["Points"], serde_json::json!([]));
        assert_eq!(
            json["Gauges"],
            serde_json::json!([{"Name": "cairn_sealed", "Value": 0.0, "Labels": {}}])
        );
        assert_eq!(
            json["Counters"],
            serde_json::json!([{
                "Name": "cairn_things", "Count": 3, "Rate": 1.0, "Sum": 3.0, "Min": 1.0,
                "Max": 1.0, "Mean": 1.0, "Stddev": 0.0, "Labels": {"kind": "a\"b"}
            }])
        );
        let sample = &json["Samples"][0];
        assert_eq!(sample["Name"], "cairn_latency_seconds");
        assert_eq!(sample["Count"], 3);
        assert_eq!(sample["Min"], 0.05);
        assert_eq!(sample["Max"], 2.0);
        assert_eq!(sample["Labels"], serde_json::json!({"route": "/v1/x"}));
    }

    #[test]
    fn format_from_query_selects_prometheus_only_by_name() {
        assert_eq!(Format::from_query(Some("prometheus")), Format::Prometheus);
        assert_eq!(Format::from_query(None), Format::Json);
        assert_eq!(Format::from_query(Some("xml")), Format::Json);
    }
}
