//! Process-wide logging setup: [`init_tracing`] with a [`LogFormat`] and an `EnvFilter` string.
//!
//! Called once by `cairn` at start (from its `--log-format` and `--log-level`/`RUST_LOG`
//! settings); services and this crate only emit events.
//!
//! Invariants: logs go to stderr, never stdout; calling [`init_tracing`] again (as tests may) is
//! harmless and keeps the first subscriber; an invalid filter falls back to `info` with a
//! warning rather than failing start-up.

use std::fmt;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

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
pub fn init_tracing(format: LogFormat, filter: &str) {
    let (env_filter, filter_error) = match EnvFilter::try_new(filter) {
        Ok(env_filter) => (env_filter, None),
        Err(err) => (EnvFilter::new("info"), Some(err)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        // Colors only for a person at a terminal, never in files or CI logs.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
    };
    if installed.is_ok()
        && let Some(err) = filter_error
    {
        tracing::warn!(message = "Invalid log filter; using \"info\".", filter, error = %err);
    }
}

#[cfg(test)]
mod tests {
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
    fn init_tracing_twice_with_bad_filter_does_not_panic() {
        // "off" first, so that the rest of this test binary stays quiet.
        init_tracing(LogFormat::Text, "off");
        init_tracing(LogFormat::Json, "not a [valid filter");
    }
}
