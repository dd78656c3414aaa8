//! JSON text primitives, byte-identical to what `serde_json` writes: a string literal with
//! its escapes ([`write_str`], sixteen then eight plain bytes a step, short runs through a
//! table), and integers in decimal ([`write_u64`], [`write_i64`], two digits a step).
//!
//! Where it sits: the bottom of `http_kit`'s JSON output, used by `json_ser` (the serde
//! serialiser under `Json`), by `json`'s `write_value`, and through `http_kit::json` by
//! writers elsewhere (the scheduler's records, the secrets envelope). It imports nothing of
//! the crate.
//!
//! Invariants: output equals `serde_json`'s for the same string or integer (tested here and
//! in `json.rs` against it: every escape class at every offset of each step kind, every
//! power-of-ten boundary); nothing here allocates beyond growing `out`; nothing panics.

/// The two digits of every number below 100, in order: "00", "01", ... "99".
const DIGIT_PAIRS: [u8; 200] = {
    let mut pairs = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        pairs[2 * i] = b'0' + (i / 10) as u8;
        pairs[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    pairs
};

/// Appends `value` in decimal, as serde_json writes it (two digits a step: records and answers
/// hold many integers, most timestamps of 19 digits).
pub fn write_u64(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while value >= 100 {
        let pair = (value % 100) as usize * 2;
        value /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if value >= 10 {
        let pair = value as usize * 2;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        digits[at] = b'0' + value as u8;
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends `value` in decimal, as serde_json writes it.
pub fn write_i64(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    write_u64(out, value.unsigned_abs());
}

/// Appends `text` as a JSON string literal, quoted and escaped as `serde_json` does: `\"`,
/// `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, other control characters as `\u00xx` (lower-case
/// hex); everything else, DEL and non-ASCII included, as is.
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Sixteen, then eight bytes a step while none of them needs an escape.
        if let Some(chunk) = bytes.get(i..i + 16) {
            let (low, high) = chunk.split_at(8);
            let low = u64::from_le_bytes(low.try_into().unwrap_or([0; 8]));
            let high = u64::from_le_bytes(high.try_into().unwrap_or([0; 8]));
            if !needs_escape(low) && !needs_escape(high) {
                i += 16;
                continue;
            }
        }
        if let Some(chunk) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            if !needs_escape(word) {
                i += 8;
                continue;
            }
        }
        // The next eight bytes (or the short tail, or a short string) one at a time through a
        // table, as serde_json does: no per-byte branch on the byte's class.
        let stop = bytes.len().min(i + 8);
        while i < stop {
            let byte = bytes[i];
            if ESCAPED[usize::from(byte)] {
                out.extend_from_slice(&bytes[start..i]);
                write_escape(out, byte);
                start = i + 1;
            }
            i += 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// The bytes a JSON string must escape: control characters, `"` and `\`.
static ESCAPED: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// The escape of one byte [`ESCAPED`] names, as serde_json writes it.
fn write_escape(out: &mut Vec<u8>, byte: u8) {
    let short: &[u8] = match byte {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        0x08 => b"\\b",
        0x0c => b"\\f",
        b'\n' => b"\\n",
        b'\r' => b"\\r",
        b'\t' => b"\\t",
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
            return;
        }
    };
    out.extend_from_slice(short);
}

/// Whether any of the eight bytes in `word` is a control character (< 0x20), `"` or `\`.
/// Exact: each test is the classic "has a zero byte" / "has a byte less than n" bit trick,
/// which has no false negatives and, as a yes/no, no false positives.
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Each mask has a lane's high bit set where that lane is the thing tested for (exact as a
    // yes/no); the three are tested at once, without a branch each.
    let zero_lanes = |v: u64| v.wrapping_sub(ONES) & !v;
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = zero_lanes(word ^ (ONES * u64::from(b'"')));
    let backslash = zero_lanes(word ^ (ONES * u64::from(b'\\')));
    (control | quote | backslash) & HIGHS != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chunk_test_finds_each_escape_class_in_every_lane() {
        for lane in 0..8 {
            for byte in [0u8, 0x1f, b'"', b'\\', b'\n'] {
                let mut chunk = *b"abcdefgh";
                chunk[lane] = byte;
                assert!(
                    needs_escape(u64::from_le_bytes(chunk)),
                    "{byte:#x} at {lane}"
                );
            }
            for byte in [b' ', b'!', b'#', b'[', b']', 0x7f, 0x80, 0xff] {
                let mut chunk = *b"abcdefgh";
                chunk[lane] = byte;
                assert!(
                    !needs_escape(u64::from_le_bytes(chunk)),
                    "{byte:#x} at {lane}"
                );
            }
        }
    }

    #[test]
    fn integers_are_their_decimal_text() {
        let mut samples: Vec<u64> = (0..1000).collect();
        let mut power = 1u64;
        while let Some(next) = power.checked_mul(10) {
            samples.extend([power - 1, power, power + 1, next - 1]);
            power = next;
        }
        samples.extend([u64::MAX, u64::MAX - 1, 1_795_874_641_540_756_952]);
        for value in samples {
            let mut out = Vec::new();
            write_u64(&mut out, value);
            assert_eq!(out, value.to_string().into_bytes());
            let signed = i64::try_from(value).map_or(i64::MIN, |value| -value);
            let mut out = Vec::new();
            write_i64(&mut out, signed);
            assert_eq!(out, signed.to_string().into_bytes());
        }
    }
}
