//! PEM armour, as Go's `encoding/pem` writes and reads it: 64-column base64 between
//! `-----BEGIN <label>-----` and `-----END <label>-----` lines.
//!
//! Invariant: `decode_all(&encode(l, d))` gives back `(l, d)`; text outside blocks is skipped,
//! a malformed block ends the scan (as Go's `pem.Decode` loop does).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// One PEM block: its label and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) label: String,
    pub(crate) der: Vec<u8>,
}

/// Armours `der` under `label`, ending with a newline.
pub(crate) fn encode(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Every block in `text`, in order.
pub(crate) fn decode_all(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + 11..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = after[..label_end].to_owned();
        let body_start = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = body_start.find(&end_marker) else {
            break;
        };
        let body: String = body_start[..end]
            .lines()
            .filter(|line| !line.contains(':'))
            .collect::<String>()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        match STANDARD.decode(body.as_bytes()) {
            Ok(der) => blocks.push(Block { label, der }),
            Err(_) => break,
        }
        rest = &body_start[end + end_marker.len()..];
    }
    blocks
}

/// Standard base64 (no armour), as `der` formats answer.
pub(crate) fn base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Decodes standard base64, ignoring whitespace.
pub(crate) fn from_base64(text: &str) -> Option<Vec<u8>> {
    let clean: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    STANDARD.decode(clean.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_and_surrounding_text_is_skipped() {
        let der: Vec<u8> = (0..=200).collect();
        let text = format!(
            "junk\n{}between\n{}",
            encode("CERTIFICATE", &der),
            encode("PRIVATE KEY", &[1, 2, 3])
        );
        let blocks = decode_all(&text);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].label, "CERTIFICATE");
        assert_eq!(blocks[0].der, der);
        assert_eq!(blocks[1].der, vec![1, 2, 3]);
        assert!(encode("X", &der).lines().all(|l| l.len() <= 64));
    }

    #[test]
    fn a_broken_block_ends_the_scan() {
        assert!(decode_all("-----BEGIN X-----\n!!!\n-----END X-----\n").is_empty());
        assert!(decode_all("no pem here").is_empty());
    }
}
