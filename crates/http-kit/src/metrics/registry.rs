//! The shared registry handle ([`Metrics`]) and what the request layer records into it
//! ([`RequestMetrics`]).
//!
//! Where it sits: `cairn` creates one [`Metrics`] per process and hands it to every service's
//! `Config` and, as [`RequestMetrics`] through [`HttpOptions`](crate::HttpOptions), to
//! [`layers`](crate::layers), which records each request once it is answered. A service's
//! metrics endpoint calls [`Metrics::gather`] with its own scrape-time families.
//!
//! Invariants:
//! - Label cardinality is bounded: the route is the matched route pattern (never the raw URI;
//!   [`UNMATCHED_ROUTE`] when no route matched), the method one of a fixed set or `other`, the
//!   status a status code.
//! - Recording takes a shared lock and one per-series lock, never a lock held across an await,
//!   and allocates nothing once its series exists.
//! - A scrape of one service reports the process-wide sources and that service's request
//!   figures, never another service's.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};
use stdx::hash::FastMap;

use http::{Method, StatusCode};

use crate::metrics::family::{Family, Histogram, LATENCY_BUCKETS, Labels};

/// The route label of a request no route matched (a 404 or a fallback).
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// A source of process-wide families, read at every scrape.
type Source = Arc<dyn Fn() -> Vec<Family> + Send + Sync>;

/// The process's metrics registry; cheap to clone (clones share everything). `Default` gives
/// a fresh, empty registry (what a service gets in tests).
#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    started: Instant,
    services: RwLock<FastMap<&'static str, Arc<ServiceRequests>>>,
    sources: RwLock<Vec<Source>>,
}

impl Default for Inner {
    fn default() -> Inner {
        Inner {
            started: Instant::now(),
            services: RwLock::default(),
            sources: RwLock::default(),
        }
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let services = read(&self.inner.services);
        let mut names: Vec<&str> = services.keys().copied().collect();
        names.sort_unstable();
        f.debug_struct("Metrics")
            .field("services", &names)
            .field("sources", &read(&self.inner.sources).len())
            .finish()
    }
}

/// One series per (route, method, status).
type SeriesKey = (String, &'static str, u16);

/// The series of one route, by (method, status).
type RouteSeries = FastMap<(&'static str, u16), Mutex<Histogram>>;

/// The request figures of one service: route → (method, status) → histogram. Keyed by route
/// first so that recording looks a series up with the borrowed route (no allocation once the
/// series exists).
#[derive(Debug, Default)]
struct ServiceRequests {
    series: RwLock<FastMap<String, RouteSeries>>,
}

/// Where [`layers`](crate::layers) records one service's requests; from
/// [`Metrics::requests`].
#[derive(Clone)]
pub struct RequestMetrics {
    service: &'static str,
    requests: Arc<ServiceRequests>,
}

impl fmt::Debug for RequestMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestMetrics")
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// The recorder for `service`'s requests (the same series for every call with one name).
    pub fn requests(&self, service: &'static str) -> RequestMetrics {
        let requests = {
            let mut services = write(&self.inner.services);
            Arc::clone(services.entry(service).or_default())
        };
        RequestMetrics { service, requests }
    }

    /// Adds process-wide figures (the store's), computed by `source` at every scrape of any
    /// service. `source` must be quick and must not block on I/O.
    pub fn add_source(&self, source: impl Fn() -> Vec<Family> + Send + Sync + 'static) {
        write(&self.inner.sources).push(Arc::new(source));
    }

    /// Everything a scrape of `service` reports: the process-wide sources, `service`'s request
    /// figures, then `own` (the service's scrape-time figures).
    pub fn gather(&self, service: &str, own: Vec<Family>) -> Vec<Family> {
        let sources: Vec<Source> = read(&self.inner.sources).clone();
        let mut families: Vec<Family> = sources.iter().flat_map(|source| source()).collect();
        let requests = read(&self.inner.services).get(service).cloned();
        families.extend(request_families(service, requests.as_deref()));
        families.extend(own);
        families
    }

    /// Time since this registry was created (the JSON summary's rates are per second of it).
    pub fn uptime(&self) -> Duration {
        self.inner.started.elapsed()
    }
}

impl RequestMetrics {
    /// Records one answered request. `route` is the matched route pattern, if any.
    pub(crate) fn record(
        &self,
        route: Option<&str>,
        method: &Method,
        status: StatusCode,
        elapsed: Duration,
    ) {
        let route = route.unwrap_or(UNMATCHED_ROUTE);
        let key = (method_label(method), status.as_u16());
        let seconds = elapsed.as_secs_f64();
        {
            let series = read(&self.requests.series);
            if let Some(histogram) = series.get(route).and_then(|route| route.get(&key)) {
                lock(histogram).observe(seconds);
                return;
            }
        }
        let mut series = write(&self.requests.series);
        let histogram = series
            .entry(route.to_owned())
            .or_default()
            .entry(key)
            .or_insert_with(|| Mutex::new(Histogram::new(LATENCY_BUCKETS)));
        lock(histogram).observe(seconds);
    }
}

/// The request count and latency families of one service, series in a stable order.
fn request_families(service: &str, requests: Option<&ServiceRequests>) -> [Family; 2] {
    let mut series: Vec<(SeriesKey, Histogram)> = match requests {
        None => Vec::new(),
        Some(requests) => read(&requests.series)
            .iter()
            .flat_map(|(route, by_status)| {
                by_status.iter().map(|(&(method, status), histogram)| {
                    ((route.clone(), method, status), lock(histogram).clone())
                })
            })
            .collect(),
    };
    series.sort_by(|(left, _), (right, _)| left.cmp(right));
    let labels = |(route, method, status): &SeriesKey| -> Labels {
        vec![
            ("service", service.to_owned()),
            ("route", route.clone()),
            ("method", (*method).to_owned()),
            ("status", status.to_string()),
        ]
    };
    let counts = series
        .iter()
        .map(|(key, histogram)| (labels(key), histogram.count))
        .collect();
    let latencies = series
        .into_iter()
        .map(|(key, histogram)| (labels(&key), histogram))
        .collect();
    [
        Family::counter(
            "cairn_http_requests",
            "HTTP requests answered, by service, matched route, method and status.",
            counts,
        ),
        Family::histogram(
            "cairn_http_request_duration_seconds",
            "Time from receiving an HTTP request to its response, in seconds.",
            latencies,
        ),
    ]
}

/// The method label: the standard methods and Vault's `LIST` by name, anything else `other`.
fn method_label(method: &Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        "LIST" => "LIST",
        _ => "other",
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::family::Samples;

    fn counts(families: &[Family]) -> Vec<(Labels, u64)> {
        match &families
            .iter()
            .find(|f| f.name == "cairn_http_requests")
            .unwrap()
            .samples
        {
            Samples::Counter(samples) => samples.clone(),
            other => panic!("not a counter: {other:?}"),
        }
    }

    fn labels(service: &str, route: &str, method: &str, status: &str) -> Labels {
        vec![
            ("service", service.to_owned()),
            ("route", route.to_owned()),
            ("method", method.to_owned()),
            ("status", status.to_owned()),
        ]
    }

    #[test]
    fn requests_are_counted_per_route_method_and_status() {
        let metrics = Metrics::new();
        let recorder = metrics.requests("registry");
        let ms = Duration::from_millis(1);
        recorder.record(Some("/v1/kv/{*key}"), &Method::GET, StatusCode::OK, ms);
        recorder.record(Some("/v1/kv/{*key}"), &Method::GET, StatusCode::OK, ms);
        recorder.record(Some("/v1/kv/{*key}"), &Method::PUT, StatusCode::OK, ms);
        recorder.record(None, &Method::GET, StatusCode::NOT_FOUND, ms);
        assert_eq!(
            counts(&metrics.gather("registry", Vec::new())),
            vec![
                (labels("registry", "/v1/kv/{*key}", "GET", "200"), 2),
                (labels("registry", "/v1/kv/{*key}", "PUT", "200"), 1),
                (labels("registry", "unmatched", "GET", "404"), 1),
            ]
        );
    }

    #[test]
    fn unknown_methods_share_one_label() {
        let metrics = Metrics::new();
        let recorder = metrics.requests("secrets");
        for name in ["FROB", "TWIDDLE"] {
            let method = Method::from_bytes(name.as_bytes()).unwrap();
            recorder.record(
                Some("/v1/{*path}"),
                &method,
                StatusCode::METHOD_NOT_ALLOWED,
                Duration::ZERO,
            );
        }
        assert_eq!(
            counts(&metrics.gather("secrets", Vec::new())),
            vec![(labels("secrets", "/v1/{*path}", "other", "405"), 2)]
        );
    }

    #[test]
    fn a_scrape_reports_sources_then_its_own_service_only() {
        let metrics = Metrics::new();
        metrics.add_source(|| vec![Family::single_gauge("store_thing", "A store figure.", 1)]);
        metrics.requests("platform").record(
            Some("/api/v2/ping"),
            &Method::GET,
            StatusCode::OK,
            Duration::ZERO,
        );
        let own = vec![Family::single_gauge("mine", "The service's figure.", 2)];
        let families = metrics.gather("registry", own);
        let names: Vec<&str> = families.iter().map(|family| family.name).collect();
        assert_eq!(
            names,
            [
                "store_thing",
                "cairn_http_requests",
                "cairn_http_request_duration_seconds",
                "mine"
            ]
        );
        assert_eq!(counts(&families), Vec::new());
    }
}
