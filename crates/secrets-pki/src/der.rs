//! A minimal DER reader and writer for the few structures rcgen and x509-parser do not build or
//! take apart for us: private-key containers (PKCS#8, PKCS#1, SEC 1), otherName values and the
//! extensions written by hand (authority information access, subject key identifier,
//! certificate policies).
//!
//! Invariants: the reader never panics on malformed input (every accessor answers `None`); the
//! writer emits definite lengths in their shortest form, as DER requires.

/// One TLV: its tag byte, its content, and the whole encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tlv<'a> {
    pub(crate) tag: u8,
    pub(crate) content: &'a [u8],
    pub(crate) raw: &'a [u8],
}

pub(crate) const SEQUENCE: u8 = 0x30;
pub(crate) const OCTET_STRING: u8 = 0x04;
pub(crate) const OID: u8 = 0x06;
pub(crate) const UTF8_STRING: u8 = 0x0c;
pub(crate) const IA5_STRING: u8 = 0x16;

/// Reads one TLV from the front of `input`; returns it and the rest.
pub(crate) fn read(input: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // high tag numbers never occur in what we read
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[count..])
    };
    if rest.len() < len {
        return None;
    }
    let header = input.len() - rest.len();
    let (content, after) = rest.split_at(len);
    Some((
        Tlv {
            tag,
            content,
            raw: &input[..header + len],
        },
        after,
    ))
}

/// Every TLV inside `content`, in order; `None` when any is malformed.
pub(crate) fn children(mut content: &[u8]) -> Option<Vec<Tlv<'_>>> {
    let mut out = Vec::new();
    while !content.is_empty() {
        let (tlv, rest) = read(content)?;
        out.push(tlv);
        content = rest;
    }
    Some(out)
}

/// The content of a single TLV of tag `tag` that fills `input` exactly.
pub(crate) fn expect(input: &[u8], tag: u8) -> Option<Tlv<'_>> {
    let (tlv, rest) = read(input)?;
    (tlv.tag == tag && rest.is_empty()).then_some(tlv)
}

/// Encodes one TLV.
pub(crate) fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    out.push(tag);
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// A SEQUENCE of already encoded elements.
pub(crate) fn sequence(parts: &[Vec<u8>]) -> Vec<u8> {
    tlv(SEQUENCE, &parts.concat())
}

/// Encodes a dotted OID (`1.3.6.1.5.5.7.1.1`); `None` when it is not one.
pub(crate) fn oid(dotted: &str) -> Option<Vec<u8>> {
    Some(tlv(OID, &oid_content(&parse_oid(dotted)?)?))
}

/// The arcs of a dotted OID: at least two, the first 0–2, the second below 40 unless the first
/// is 2.
pub(crate) fn parse_oid(dotted: &str) -> Option<Vec<u64>> {
    let arcs = dotted
        .split('.')
        .map(|arc| {
            if arc.is_empty() || !arc.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            arc.parse::<u64>().ok()
        })
        .collect::<Option<Vec<u64>>>()?;
    if arcs.len() < 2 || arcs[0] > 2 || (arcs[0] < 2 && arcs[1] >= 40) {
        return None;
    }
    Some(arcs)
}

fn oid_content(arcs: &[u64]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let first = arcs[0].checked_mul(40)?.checked_add(arcs[1])?;
    for arc in std::iter::once(first).chain(arcs[2..].iter().copied()) {
        let mut chunk = vec![(arc & 0x7f) as u8];
        let mut rest = arc >> 7;
        while rest > 0 {
            chunk.push(0x80 | (rest & 0x7f) as u8);
            rest >>= 7;
        }
        chunk.reverse();
        out.extend(chunk);
    }
    Some(out)
}

/// The dotted form of an OID's content bytes.
pub(crate) fn oid_to_string(content: &[u8]) -> Option<String> {
    let mut arcs: Vec<u64> = Vec::new();
    let mut value: u64 = 0;
    for (i, &byte) in content.iter().enumerate() {
        value = value.checked_mul(128)? | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            if arcs.is_empty() {
                let (a, b) = match value {
                    0..40 => (0, value),
                    40..80 => (1, value - 40),
                    _ => (2, value - 80),
                };
                arcs.push(a);
                arcs.push(b);
            } else {
                arcs.push(value);
            }
            value = 0;
        } else if i + 1 == content.len() {
            return None;
        }
    }
    if arcs.is_empty() {
        return None;
    }
    Some(
        arcs.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oids_round_trip_through_their_encoding() {
        let encoded = oid("1.3.6.1.5.5.7.1.1").unwrap();
        assert_eq!(encoded, vec![6, 8, 0x2b, 6, 1, 5, 5, 7, 1, 1]);
        let tlv = expect(&encoded, OID).unwrap();
        assert_eq!(oid_to_string(tlv.content).unwrap(), "1.3.6.1.5.5.7.1.1");
        assert_eq!(
            oid_to_string(&oid_content(&parse_oid("2.999.3").unwrap()).unwrap()).unwrap(),
            "2.999.3"
        );
        assert!(oid("1").is_none());
        assert!(oid("1.x").is_none());
        assert!(oid("3.1").is_none());
    }

    #[test]
    fn long_lengths_are_written_and_read_back() {
        let content = vec![7u8; 300];
        let encoded = tlv(OCTET_STRING, &content);
        assert_eq!(&encoded[..4], &[4, 0x82, 1, 44]);
        let (tlv, rest) = read(&encoded).unwrap();
        assert_eq!(tlv.content, &content[..]);
        assert!(rest.is_empty());
        assert!(read(&encoded[..10]).is_none());
    }
}
