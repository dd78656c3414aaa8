//! Paging as TFE clients read it: `page[number]` and `page[size]` in, `meta.pagination` and
//! `links` (`self`, `first`, `prev`, `next`, `last`) out.
//!
//! Where it sits: the platform parses the two query values with [`Page::parse`], slices its
//! sorted list with [`Page::range`], and adds [`Page::meta`] and [`Page::links`] to the
//! document.
//!
//! Invariants:
//! - `page[number]` defaults to 1 and `page[size]` to the endpoint's default (20 unless
//!   stated); a size above [`MAX_PAGE_SIZE`] is clamped to it, a size or number of 0 is read
//!   as 1, and a value that is not a non-negative integer is a [`PageError`].
//! - A page past the end is not an error: its range is empty (so `data: []`), `current-page`
//!   is the page asked for and `total-count` the true total (go-tfe's tests check both).
//! - `total-pages` is at least 1; `prev-page`/`next-page` are `null` at the ends (pytfe walks
//!   `next-page`, so a wrong one would loop), and `prev-page` of a page past the end is the
//!   last page.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::typed::PageLinks;

/// The default `page[size]` of every list in the spec.
pub const DEFAULT_PAGE_SIZE: u64 = 20;
/// The largest `page[size]` honoured; larger values are clamped.
pub const MAX_PAGE_SIZE: u64 = 100;

/// A requested page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// 1-based page number.
    pub number: u64,
    pub size: u64,
}

/// A `page[...]` query value that is not a number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageError {
    /// `page[number]` or `page[size]`.
    pub parameter: &'static str,
    pub value: String,
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid {} {:?}: must be a positive integer",
            self.parameter, self.value
        )
    }
}

impl std::error::Error for PageError {}

/// `meta.pagination`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Pagination {
    pub current_page: u64,
    pub page_size: u64,
    pub prev_page: Option<u64>,
    pub next_page: Option<u64>,
    pub total_pages: u64,
    pub total_count: u64,
}

impl Default for Page {
    fn default() -> Page {
        Page {
            number: 1,
            size: DEFAULT_PAGE_SIZE,
        }
    }
}

impl Page {
    /// Reads the raw `page[number]` and `page[size]` query values (`None` when absent).
    pub fn parse(
        number: Option<&str>,
        size: Option<&str>,
        default_size: u64,
    ) -> Result<Page, PageError> {
        let read = |parameter: &'static str, raw: Option<&str>, default: u64| match raw {
            None => Ok(default),
            Some(raw) if raw.trim().is_empty() => Ok(default),
            Some(raw) => raw.trim().parse::<u64>().map_err(|_| PageError {
                parameter,
                value: raw.to_owned(),
            }),
        };
        let number = read("page[number]", number, 1)?.max(1);
        let size = read("page[size]", size, default_size)?.clamp(1, MAX_PAGE_SIZE);
        Ok(Page { number, size })
    }

    /// The index range of this page in a list of `total` items (empty past the end).
    pub fn range(&self, total: usize) -> Range<usize> {
        let size = usize::try_from(self.size).unwrap_or(usize::MAX);
        let start = usize::try_from(self.number - 1)
            .ok()
            .and_then(|n| n.checked_mul(size))
            .unwrap_or(usize::MAX)
            .min(total);
        let end = start.saturating_add(size).min(total);
        start..end
    }

    pub fn total_pages(&self, total: u64) -> u64 {
        total.div_ceil(self.size).max(1)
    }

    /// `meta.pagination` for a list of `total` items.
    pub fn meta(&self, total: u64) -> Pagination {
        let total_pages = self.total_pages(total);
        Pagination {
            current_page: self.number,
            page_size: self.size,
            prev_page: (self.number > 1).then(|| (self.number - 1).min(total_pages)),
            next_page: (self.number < total_pages).then_some(self.number + 1),
            total_pages,
            total_count: total,
        }
    }

    /// `links` for a list of `total` items at `base` (an absolute or relative URL without a
    /// query), keeping the other query parameters `extra` (already decoded `(key, value)`s).
    pub fn links(
        &self,
        base: &str,
        extra: &[(String, String)],
        total: u64,
    ) -> BTreeMap<String, Value> {
        let links = self.page_links(base, extra, total);
        let optional = |link: Option<String>| link.map_or(Value::Null, Value::String);
        BTreeMap::from([
            ("self".to_owned(), Value::String(links.this)),
            ("first".to_owned(), Value::String(links.first)),
            ("prev".to_owned(), optional(links.prev)),
            ("next".to_owned(), optional(links.next)),
            ("last".to_owned(), Value::String(links.last)),
        ])
    }

    /// [`Page::links`] as a typed [`PageLinks`] (for [`ListDocument`](crate::ListDocument)).
    pub fn page_links(&self, base: &str, extra: &[(String, String)], total: u64) -> PageLinks {
        let meta = self.meta(total);
        // The query without the page: encoded once, shared by the five links.
        let mut kept = String::new();
        for (key, value) in extra
            .iter()
            .filter(|(key, _)| key != "page[number]" && key != "page[size]")
        {
            encode_into(&mut kept, key);
            kept.push('=');
            encode_into(&mut kept, value);
            kept.push('&');
        }
        let link = |number: u64| {
            format!(
                "{base}?{kept}page%5Bnumber%5D={number}&page%5Bsize%5D={}",
                self.size
            )
        };
        PageLinks {
            this: link(self.number),
            first: link(1),
            prev: meta.prev_page.map(link),
            next: meta.next_page.map(link),
            last: link(meta.total_pages),
        }
    }
}

/// Appends `raw` percent-encoded: everything but unreserved characters (so `[` is `%5B`).
fn encode_into(out: &mut String, raw: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn page(number: u64, size: u64) -> Page {
        Page { number, size }
    }

    #[test]
    fn parse_defaults_and_clamps() {
        assert_eq!(Page::parse(None, None, 20).unwrap(), page(1, 20));
        assert_eq!(
            Page::parse(Some("3"), Some("500"), 20).unwrap(),
            page(3, 100)
        );
        assert_eq!(Page::parse(Some("0"), Some("0"), 20).unwrap(), page(1, 1));
        assert_eq!(Page::parse(Some(""), Some(" 7 "), 20).unwrap(), page(1, 7));
    }

    #[test]
    fn parse_rejects_non_numbers() {
        let err = Page::parse(Some("two"), None, 20).unwrap_err();
        assert_eq!(err.parameter, "page[number]");
        assert!(Page::parse(None, Some("-1"), 20).is_err());
    }

    #[test]
    fn range_slices_and_is_empty_past_the_end() {
        assert_eq!(page(1, 20).range(45), 0..20);
        assert_eq!(page(3, 20).range(45), 40..45);
        assert_eq!(page(4, 20).range(45), 45..45);
        assert_eq!(page(u64::MAX, 100).range(45), 45..45);
    }

    #[test]
    fn meta_first_middle_last_and_past_the_end() {
        let first = page(1, 20).meta(45);
        assert_eq!(
            (first.prev_page, first.next_page, first.total_pages),
            (None, Some(2), 3)
        );
        let last = page(3, 20).meta(45);
        assert_eq!((last.prev_page, last.next_page), (Some(2), None));
        let beyond = page(999, 20).meta(45);
        assert_eq!(
            (
                beyond.current_page,
                beyond.prev_page,
                beyond.next_page,
                beyond.total_count
            ),
            (999, Some(3), None, 45)
        );
    }

    #[test]
    fn meta_of_an_empty_list_has_one_page() {
        let meta = page(1, 20).meta(0);
        assert_eq!(
            (meta.total_pages, meta.prev_page, meta.next_page),
            (1, None, None)
        );
    }

    #[test]
    fn meta_serializes_kebab_case_with_nulls() {
        assert_eq!(
            serde_json::to_value(page(1, 2).meta(3)).unwrap(),
            json!({"current-page": 1, "page-size": 2, "prev-page": null, "next-page": 2,
                   "total-pages": 2, "total-count": 3})
        );
    }

    #[test]
    fn links_encode_brackets_and_keep_other_parameters() {
        let extra = vec![
            ("filter[status]".to_owned(), "active".to_owned()),
            ("page[number]".to_owned(), "1".to_owned()),
        ];
        let links = page(1, 2).links("/api/v2/x", &extra, 3);
        assert_eq!(
            links["self"],
            "/api/v2/x?filter%5Bstatus%5D=active&page%5Bnumber%5D=1&page%5Bsize%5D=2"
        );
        assert_eq!(links["prev"], Value::Null);
        assert_eq!(
            links["last"],
            "/api/v2/x?filter%5Bstatus%5D=active&page%5Bnumber%5D=2&page%5Bsize%5D=2"
        );
    }
}
