//! Process-wide logging setup: [`init_tracing`] with a [`LogFormat`] and an `EnvFilter` string.
//!
//! Called once by `cairn` at start (from its `--log-format` and `--log-level`/`RUST_LOG`
//! settings); services and this crate only emit events.
//!
//! Invariants: logs go to stderr, never stdout; calling [`init_tracing`] again (as tests may) is
//! harmless and keeps the first subscriber; an invalid filter falls back to `info` with a
//! warning rather than failing start-up. A line logged while a request is handled names the
//! request (method, path, request id) the same way in every format: as the `request` span
//! when the filter or the colours need a real span, else through `request_scope.rs`.

use std::fmt;
use std::str::FromStr;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::time::SystemTime;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::request_scope::{ScopedJson, ScopedText};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One JSON object per line, with the event's fields at the top level and the current
    /// span's fields (method, path, request_id) under `span`.
    Json,
    /// Human-readable lines.
    #[default]
    Text,
}

/// The error for a log format other than `json` or `text`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown log format {0:?}: expected \"json\" or \"text\"")]
pub struct ParseLogFormatError(pub String);

impl FromStr for LogFormat {
    type Err = ParseLogFormatError;

    /// `json` or `text`, in any case.
    fn from_str(input: &str) -> Result<LogFormat, ParseLogFormatError> {
        if input.eq_ignore_ascii_case("json") {
            Ok(LogFormat::Json)
        } else if input.eq_ignore_ascii_case("text") {
            Ok(LogFormat::Text)
        } else {
            Err(ParseLogFormatError(input.to_owned()))
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Json => "json",
            LogFormat::Text => "text",
        })
    }
}

/// Installs the global subscriber: `filter` is an `EnvFilter` directive string such as
/// `"info"` or `"info,registry=debug"`.
///
/// A filter of plain `target=level` directives (nearly all of them) is applied as a static
/// [`Targets`] filter; only one that needs `EnvFilter`'s span and field matching gets an
/// `EnvFilter`, whose per-span bookkeeping (a locked map consulted on every enter and exit of
/// every request's span) showed in request profiles.
pub fn init_tracing(format: LogFormat, filter: &str) {
    let (filter_layer, filter_error) = match parse_filter(filter) {
        Ok(layer) => (layer, None),
        Err(err) => (
            ParsedFilter::Static(Targets::new().with_default(LevelFilter::INFO)),
            Some(err),
        ),
    };
    let (static_filter, env_filter) = match filter_layer {
        ParsedFilter::Static(targets) => (Some(targets), None),
        ParsedFilter::Env(env) => (None, Some(env)),
    };
    // A span filter matches the request span itself, so that filter needs real spans; so do
    // coloured lines, which only tracing-subscriber's own format writes. Otherwise the
    // request is a task-local the event formats write (`request_scope.rs`).
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let needs_spans = env_filter.is_some() || (format == LogFormat::Text && terminal);
    let fmt_layer = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .map_event_format(|inner| ScopedJson { inner })
            .with_writer(std::io::stderr)
            .boxed(),
        // Colors only for a person at a terminal, never in files or CI logs; without them,
        // fields are written by [`PlainFields`], which formats a span's fields for a
        // fraction of what the colour-aware default costs.
        LogFormat::Text if terminal => tracing_subscriber::fmt::layer()
            .with_ansi(true)
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .fmt_fields(PlainFields)
            .map_event_format(|inner| ScopedText {
                timer: SystemTime,
                inner: inner.without_time().with_level(false),
            })
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let installed = tracing_subscriber::registry()
        .with(static_filter)
        .with(env_filter)
        .with(fmt_layer)
        .try_init();
    if installed.is_ok() && needs_spans {
        crate::request_scope::use_spans();
    }
    if installed.is_ok()
        && let Some(err) = filter_error
    {
        tracing::warn!(message = "Invalid log filter; using \"info\".", filter, error = %err);
    }
}

/// The text format's fields without colour: the same text as tracing-subscriber's
/// `DefaultFields` with ANSI off (`name=value` separated by spaces, the message bare, `r#`
/// dropped from names, `log.` fields skipped, an error followed by `name.sources=[...]`), but
/// written straight to the line. The default styles every field name through `nu_ansi_term`
/// even when colours are off, which made formatting the request span (method, path,
/// request id) a visible share of every request's CPU.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PlainFields;

impl<'writer> tracing_subscriber::fmt::FormatFields<'writer> for PlainFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: tracing_subscriber::fmt::format::Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut visitor = PlainVisitor {
            writer,
            empty: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct PlainVisitor<'writer> {
    writer: tracing_subscriber::fmt::format::Writer<'writer>,
    empty: bool,
    result: fmt::Result,
}

impl tracing::field::Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_error(
        &mut self,
        field: &tracing::field::Field,
        value: &(dyn std::error::Error + 'static),
    ) {
        match value.source() {
            Some(source) => self.record_debug(
                field,
                &format_args!("{value} {}.sources={}", field.name(), SourceList(source)),
            ),
            None => self.record_debug(field, &format_args!("{value}")),
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        if name.starts_with("log.") {
            return;
        }
        if !self.empty {
            self.result = self.writer.write_char(' ');
        }
        self.empty = false;
        let writer = &mut self.writer;
        self.result = self.result.and_then(|()| {
            if name == "message" {
                return write!(writer, "{value:?}");
            }
            writer.write_str(name.strip_prefix("r#").unwrap_or(name))?;
            writer.write_char('=')?;
            write!(writer, "{value:?}")
        });
    }
}

/// An error's chain of sources as `[first, second]`, as the default fields write it.
struct SourceList<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for SourceList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        let mut current = Some(self.0);
        while let Some(err) = current {
            list.entry(&format_args!("{err}"));
            current = err.source();
        }
        list.finish()
    }
}

/// The two kinds of filter [`init_tracing`] installs (built once, at start: the size of the
/// variants does not matter).
#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "one value, once, at start")]
enum ParsedFilter {
    Static(Targets),
    Env(EnvFilter),
}

/// `filter` as a static [`Targets`] filter when it is one, else as an `EnvFilter`; the
/// `EnvFilter` parse error when it is neither.
fn parse_filter(filter: &str) -> Result<ParsedFilter, tracing_subscriber::filter::ParseError> {
    // `Targets` reads `target=level` lists only; anything with span or field matching
    // (`[`, `{`) is `EnvFilter`'s. Both read an empty string as "nothing enabled" differently,
    // so that goes to `EnvFilter` too, as before.
    let plain = !filter.trim().is_empty() && !filter.contains(['[', '{']);
    if plain && let Ok(targets) = filter.parse::<Targets>() {
        return Ok(ParsedFilter::Static(targets));
    }
    EnvFilter::try_new(filter).map(ParsedFilter::Env)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn log_format_parses_json_and_text_in_any_case() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("JSON".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert_eq!("Text".parse::<LogFormat>(), Ok(LogFormat::Text));
    }

    #[test]
    fn log_format_rejects_unknown_names() {
        let err = "yaml".parse::<LogFormat>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown log format \"yaml\": expected \"json\" or \"text\""
        );
    }

    #[test]
    fn log_format_display_round_trips() {
        for format in [LogFormat::Json, LogFormat::Text] {
            assert_eq!(format.to_string().parse::<LogFormat>(), Ok(format));
        }
    }

    #[test]
    fn plain_filters_are_static_and_span_filters_are_env_filters() {
        for plain in [
            "info",
            "warn,registry=debug",
            "off",
            "scheduler::state=trace,info",
        ] {
            assert!(
                matches!(parse_filter(plain), Ok(ParsedFilter::Static(_))),
                "{plain}"
            );
        }
        assert!(matches!(
            parse_filter("info,registry[request{path=/v1/kv}]=debug"),
            Ok(ParsedFilter::Env(_))
        ));
        assert!(parse_filter("not a [valid filter").is_err());
    }

    #[test]
    fn a_static_filter_enables_what_the_env_filter_would() {
        let Ok(ParsedFilter::Static(targets)) = parse_filter("warn,registry=debug") else {
            panic!("not static");
        };
        assert!(targets.would_enable("registry::kv", &tracing::Level::DEBUG));
        assert!(!targets.would_enable("registry::kv", &tracing::Level::TRACE));
        assert!(targets.would_enable("scheduler", &tracing::Level::WARN));
        assert!(!targets.would_enable("scheduler", &tracing::Level::INFO));
    }

    /// Log lines written through `fields`, without time or colour, of events and spans of
    /// every kind of field.
    fn lines_with<N>(fields: N) -> String
    where
        N: for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static,
    {
        #[derive(Debug, thiserror::Error)]
        #[error("outer failure")]
        struct Outer(#[source] Inner);
        #[derive(Debug, thiserror::Error)]
        #[error("inner cause")]
        struct Inner;

        let buffer = Sink::default();
        let sink = buffer.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .without_time()
            .fmt_fields(fields)
            .with_writer(move || sink.clone());
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::error_span!(
                "request",
                method = %"GET",
                path = %"/v1/secret/a b",
                request_id = "quoted id",
                later = tracing::field::Empty,
            );
            span.record("later", 7);
            span.in_scope(|| {
                tracing::info!(
                    message = "Request finished.",
                    status = 200_u16,
                    latency_ms = 1.5
                );
                tracing::warn!(r#type = "kv", ok = true, list = ?["a", "b"], "with {} args", 2);
                let err = Outer(Inner);
                tracing::error!(error = &err as &(dyn std::error::Error + 'static), "failed");
                tracing::error!(error = %Inner, "no sources");
            });
            tracing::info!(message = "outside", text = "a \"quote\"");
        });
        buffer.text()
    }

    /// Where a test's subscriber writes its lines (`with_writer(move || sink.clone())`).
    #[derive(Clone, Default)]
    pub(crate) struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Sink {
        /// Everything written so far.
        pub(crate) fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn plain_fields_write_what_the_default_fields_write_without_colour() {
        let plain = lines_with(PlainFields);
        let default = lines_with(tracing_subscriber::fmt::format::DefaultFields::new());
        assert_eq!(plain, default);
        // And the lines carry what they should (the comparison alone would pass if both
        // wrote nothing).
        assert!(
            plain.contains(
                r#"request{method=GET path=/v1/secret/a b request_id="quoted id" later=7}"#
            ),
            "{plain}"
        );
        assert!(
            plain.contains("Request finished. status=200 latency_ms=1.5"),
            "{plain}"
        );
        assert!(plain.contains("type=\"kv\""), "{plain}");
        assert!(
            plain.contains(r#"failed error=outer failure error.sources=[inner cause]"#),
            "{plain}"
        );
        assert_eq!(plain.lines().count(), 5, "{plain}");
    }

    #[test]
    fn init_tracing_twice_with_bad_filter_does_not_panic() {
        // "off" first, so that the rest of this test binary stays quiet.
        init_tracing(LogFormat::Text, "off");
        init_tracing(LogFormat::Json, "not a [valid filter");
    }
}
