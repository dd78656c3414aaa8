//! The request a log line was written for, without a tracing span: [`RequestScope`], set by
//! the shared layer (`layers.rs`) around each request's handling as a task-local, and
//! [`ScopedText`] / [`ScopedJson`], the event formats that write it as tracing-subscriber
//! writes the `request` span the layer would otherwise create.
//!
//! Why: a tracing span per request (created, its three fields formatted, entered and left on
//! every poll, closed) cost ~5,000 instructions a request in profiles (a tenth of a kv read),
//! whether or not anything was logged. A task-local costs a swap per poll, and the request's
//! fields are formatted only when a line is written inside it (an error, or `debug` logging).
//!
//! Where the span stays: an `EnvFilter` with span directives (`registry[request{path=..}]=..`)
//! matches the span itself, and a terminal's coloured lines are tracing-subscriber's own;
//! `init_tracing` (`logging.rs`) calls [`use_spans`] for those, and the layer then creates
//! the span as before ([`spans_in_use`]).
//!
//! Invariants:
//! - Inside a request, a text line reads exactly as with the span: `TIME LEVEL
//!   request{method=M path=P request_id=I}: target: fields` (what the plain field format
//!   writes for the span's display fields); a JSON line gets the member
//!   `"span":{"method":M,"path":P,"request_id":I,"name":"request"}` last, as
//!   `with_current_span` writes it, unless a span of its own is current (then, as before,
//!   that span is the one shown).
//! - Outside a request (start-up, the storage thread, spawned tasks), lines are exactly
//!   tracing-subscriber's own.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use http::{Method, Uri};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

tokio::task_local! {
    static SCOPE: RequestScope;
}

/// Whether requests get a real tracing span (see the module docs); off until
/// `init_tracing` says otherwise.
static SPANS: AtomicBool = AtomicBool::new(false);

/// Makes the shared layer create a real `request` span for every request from now on.
pub(crate) fn use_spans() {
    SPANS.store(true, Ordering::Relaxed);
}

/// Whether the shared layer creates a real `request` span (else it sets a [`RequestScope`]).
pub(crate) fn spans_in_use() -> bool {
    SPANS.load(Ordering::Relaxed)
}

/// What a log line says about the request it was written for.
#[derive(Debug, Clone)]
pub(crate) struct RequestScope {
    pub(crate) method: Method,
    /// The request target; only its path is written (never the query: Consul takes `?token=`).
    pub(crate) uri: Uri,
    pub(crate) request_id: String,
}

impl RequestScope {
    /// Runs `future` with this scope as the request of every line it logs.
    pub(crate) fn run<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        SCOPE.scope(self, future)
    }

    /// The span as the full text format writes it with the plain field format: a space
    /// follows unless more spans do.
    fn write_text(&self, writer: &mut Writer<'_>, more_spans: bool) -> fmt::Result {
        write!(
            writer,
            "request{{method={} path={} request_id={}}}:{}",
            self.method,
            self.uri.path(),
            self.request_id,
            if more_spans { "" } else { " " }
        )
    }

    /// The span as the JSON format's `span` member, with its leading comma.
    fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(br#","span":{"method":"#);
        crate::json::write_str(out, self.method.as_str());
        out.extend_from_slice(br#","path":"#);
        crate::json::write_str(out, self.uri.path());
        out.extend_from_slice(br#","request_id":"#);
        crate::json::write_str(out, &self.request_id);
        out.extend_from_slice(br#","name":"request"}"#);
    }
}

/// The text event format: the time and level as tracing-subscriber's full format writes them
/// without colour, then the request (inside one), then `inner` (that format without time and
/// level: spans, target, fields).
#[derive(Debug, Clone)]
pub(crate) struct ScopedText<T, F> {
    pub(crate) timer: T,
    pub(crate) inner: F,
}

impl<S, N, T, F> FormatEvent<S, N> for ScopedText<T, F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
    T: FormatTime,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if self.timer.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        writer.write_char(' ')?;
        writer.write_str(level_text(event.metadata().level()))?;
        writer.write_char(' ')?;
        let more_spans = ctx.event_scope().is_some();
        match SCOPE.try_with(|scope| scope.write_text(&mut writer, more_spans)) {
            Ok(written) => written?,
            Err(_outside) => {}
        }
        self.inner.format_event(ctx, writer, event)
    }
}

/// The level as the full format pads it.
fn level_text(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

/// The JSON event format: `inner`'s line, with the request's `span` member added inside one
/// (when no span of the line's own is current).
#[derive(Debug, Clone)]
pub(crate) struct ScopedJson<F> {
    pub(crate) inner: F,
}

impl<S, N, F> FormatEvent<S, N> for ScopedJson<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if ctx.event_scope().is_some() {
            return self.inner.format_event(ctx, writer, event);
        }
        let Ok(member) = SCOPE.try_with(|scope| {
            let mut member = Vec::new();
            scope.write_json(&mut member);
            member
        }) else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        // The line is one JSON object and a newline: the member goes before its last brace.
        let Some(end) = line.rfind('}') else {
            return writer.write_str(&line);
        };
        writer.write_str(&line[..end])?;
        writer.write_str(std::str::from_utf8(&member).map_err(|_| fmt::Error)?)?;
        writer.write_str(&line[end..])
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;
    use crate::logging::PlainFields;
    use crate::logging::tests::Sink;

    /// A clock that always says `T`, so lines compare.
    struct Fixed;

    impl FormatTime for Fixed {
        fn format_time(&self, writer: &mut Writer<'_>) -> fmt::Result {
            writer.write_str("T")
        }
    }

    fn scope() -> RequestScope {
        RequestScope {
            method: Method::PUT,
            uri: "/v1/kv/a%20b?token=secret&x=1".parse().unwrap(),
            request_id: "id-\"quoted\"".to_owned(),
        }
    }

    /// What is logged while a request is handled, and after it.
    fn emit() {
        tracing::error!(
            message = "Request finished.",
            status = 500_u16,
            latency_ms = 1.5
        );
        tracing::warn!(r#type = "kv", ok = true, "with {} args", 2);
        tracing::info!(text = "a \"quote\"", "plain");
        tracing::debug!("quiet");
        tracing::info_span!("inner", x = 1).in_scope(|| tracing::warn!("nested"));
    }

    /// Checks that the lines the scope gives are the lines the real `request` span gives, in
    /// one format.
    fn both<L1, L2>(span_layer: L1, scope_layer: L2, span_sink: &Sink, scope_sink: &Sink)
    where
        L1: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
        L2: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
    {
        let RequestScope {
            method,
            uri,
            request_id,
        } = scope();
        let subscriber = tracing_subscriber::registry().with(span_layer);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::error_span!(
                "request",
                method = %method,
                path = %uri.path(),
                request_id = %request_id,
            );
            span.in_scope(emit);
            tracing::info!("after");
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let subscriber = tracing_subscriber::registry().with(scope_layer);
        tracing::subscriber::with_default(subscriber, || {
            runtime.block_on(scope().run(async { emit() }));
            tracing::info!("after");
        });
        assert_eq!(span_sink.text().lines().count(), 6, "{}", span_sink.text());
        assert!(!span_sink.text().contains("token"), "{}", span_sink.text());
        assert_eq!(scope_sink.text(), span_sink.text());
    }

    #[test]
    fn text_lines_in_a_scope_read_as_in_the_request_span() {
        let (span_sink, scope_sink) = (Sink::default(), Sink::default());
        let (a, b) = (span_sink.clone(), scope_sink.clone());
        both(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_timer(Fixed)
                .fmt_fields(PlainFields)
                .with_writer(move || a.clone()),
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .fmt_fields(PlainFields)
                .map_event_format(|inner| ScopedText {
                    timer: Fixed,
                    inner: inner.without_time().with_level(false),
                })
                .with_writer(move || b.clone()),
            &span_sink,
            &scope_sink,
        );
        let text = scope_sink.text();
        assert!(
            text.starts_with(
                "T ERROR request{method=PUT path=/v1/kv/a%20b request_id=id-\"quoted\"}: \
                 http_kit::request_scope::tests: Request finished. status=500"
            ),
            "{text}"
        );
        assert!(text.contains("}:inner{x=1}: "), "{text}");
        assert!(
            text.ends_with(" INFO http_kit::request_scope::tests: after\n"),
            "{text}"
        );
    }

    #[test]
    fn json_lines_in_a_scope_read_as_in_the_request_span() {
        let (span_sink, scope_sink) = (Sink::default(), Sink::default());
        let (a, b) = (span_sink.clone(), scope_sink.clone());
        let json = || {
            tracing_subscriber::fmt::layer()
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .with_timer(Fixed)
        };
        both(
            json().with_writer(move || a.clone()),
            json()
                .map_event_format(|inner| ScopedJson { inner })
                .with_writer(move || b.clone()),
            &span_sink,
            &scope_sink,
        );
        let first: serde_json::Value =
            serde_json::from_str(scope_sink.text().lines().next().unwrap()).unwrap();
        assert_eq!(
            first["span"],
            serde_json::json!({
                "method": "PUT",
                "path": "/v1/kv/a%20b",
                "request_id": "id-\"quoted\"",
                "name": "request",
            })
        );
        assert_eq!(first["status"], 500);
    }
}
