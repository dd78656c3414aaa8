//! The exec protocol's JSON frames (Nomad's `ExecStreamingInput` and
//! `ExecTaskStreamingResponseMsg` as its HTTP API encodes them: byte fields base64, one field
//! per frame), parsed and built without any I/O.
//!
//! Invariants: an input frame that is not one of the known shapes is ignored (`None`), never
//! an error that would end the session; terminal sizes outside `1..=u16::MAX` are clamped.

use base64::Engine as _;
use serde_json::{Value, json};

/// What an input frame asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    Data(Vec<u8>),
    Close,
    Resize { rows: u16, cols: u16 },
    Heartbeat,
}

impl Input {
    /// Parses one frame; `None` for anything unknown or malformed.
    pub(crate) fn parse(bytes: &[u8]) -> Option<Input> {
        let value: Value = serde_json::from_slice(bytes).ok()?;
        let object = value.as_object()?;
        if object.is_empty() {
            return Some(Input::Heartbeat);
        }
        if let Some(stdin) = object.get("stdin") {
            if stdin.get("close").and_then(Value::as_bool) == Some(true) {
                return Some(Input::Close);
            }
            let data = stdin.get("data").and_then(Value::as_str)?;
            return base64::engine::general_purpose::STANDARD
                .decode(data)
                .ok()
                .map(Input::Data);
        }
        if let Some(size) = object.get("tty_size") {
            let dimension = |name: &str| {
                let raw = size.get(name).and_then(Value::as_i64).unwrap_or(0);
                u16::try_from(raw.clamp(1, i64::from(u16::MAX))).unwrap_or(u16::MAX)
            };
            return Some(Input::Resize {
                rows: dimension("height"),
                cols: dimension("width"),
            });
        }
        None
    }
}

/// `{"<stream>":{"data":"<base64>"}}`.
pub(crate) fn output_data(stream: &str, bytes: &[u8]) -> String {
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    json!({ stream: { "data": data } }).to_string()
}

/// `{"<stream>":{"close":true}}`.
pub(crate) fn output_close(stream: &str) -> String {
    json!({ stream: { "close": true } }).to_string()
}

/// The last frame: `{"exited":true,"result":{"exit_code":n}}`.
pub(crate) fn exit_frame(code: i64) -> String {
    json!({ "exited": true, "result": { "exit_code": code } }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_frames_parse_as_upstream_sends_them() {
        assert_eq!(
            Input::parse(br#"{"stdin":{"data":"aGk="}}"#),
            Some(Input::Data(b"hi".to_vec()))
        );
        assert_eq!(
            Input::parse(br#"{"stdin":{"close":true}}"#),
            Some(Input::Close)
        );
        assert_eq!(
            Input::parse(br#"{"tty_size":{"height":40,"width":120}}"#),
            Some(Input::Resize {
                rows: 40,
                cols: 120
            })
        );
        assert_eq!(
            Input::parse(br#"{"tty_size":{"height":-3,"width":999999}}"#),
            Some(Input::Resize {
                rows: 1,
                cols: u16::MAX
            })
        );
        assert_eq!(Input::parse(b"{}"), Some(Input::Heartbeat));
        assert_eq!(Input::parse(b"[1]"), None);
        assert_eq!(Input::parse(br#"{"stdin":{"data":"%%%"}}"#), None);
        assert_eq!(Input::parse(b"not json"), None);
    }

    #[test]
    fn output_frames_are_base64_and_the_exit_frame_carries_the_code() {
        assert_eq!(
            output_data("stdout", b"hi"),
            r#"{"stdout":{"data":"aGk="}}"#
        );
        assert_eq!(output_close("stderr"), r#"{"stderr":{"close":true}}"#);
        assert_eq!(exit_frame(3), r#"{"exited":true,"result":{"exit_code":3}}"#);
    }
}
