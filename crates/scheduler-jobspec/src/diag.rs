//! Diagnostics: the errors the jobspec parser reports, worded like HashiCorp HCL's
//! (`<file>:<line>,<col>-<endcol>: <summary>; <detail>`), because clients match on them.
//!
//! Sits under every other jobspec module: the evaluator, the variable collector and the block
//! decoder all return [`Diag`]s, and `mod.rs` renders the list into one `JobspecError`.
//!
//! Invariants: a diagnostic's position is resolved to line and column when it is created (the
//! source it points into — job file, var-file or `-var` value — is known only then); lines and
//! columns are 1-based and columns count characters, as HCL's do. A diagnostic without a subject
//! renders as `<nil>: …`, which is what Go's HCL prints for a nil subject range.

use std::fmt;
use std::ops::Range;

/// A position range in one source, already resolved to lines and columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pos {
    pub(crate) file: String,
    pub(crate) start: (usize, usize),
    pub(crate) end: (usize, usize),
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start.0 == self.end.0 {
            write!(
                f,
                "{}:{},{}-{}",
                self.file, self.start.0, self.start.1, self.end.1
            )
        } else {
            write!(
                f,
                "{}:{},{}-{},{}",
                self.file, self.start.0, self.start.1, self.end.0, self.end.1
            )
        }
    }
}

/// One error diagnostic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Diag {
    pub(crate) summary: String,
    pub(crate) detail: String,
    pub(crate) subject: Option<Pos>,
}

impl Diag {
    pub(crate) fn new(summary: impl Into<String>, detail: impl Into<String>) -> Diag {
        Diag {
            summary: summary.into(),
            detail: detail.into(),
            subject: None,
        }
    }

    /// A plain error message, not shaped like an HCL diagnostic (`jobspec2` returns a few of
    /// these, e.g. "unable to parse var content: …").
    pub(crate) fn plain(message: impl Into<String>) -> Diag {
        Diag {
            summary: String::new(),
            detail: message.into(),
            subject: None,
        }
    }

    pub(crate) fn at(mut self, subject: Option<Pos>) -> Diag {
        self.subject = subject;
        self
    }
}

impl fmt::Display for Diag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.summary.is_empty() {
            return f.write_str(&self.detail);
        }
        match &self.subject {
            Some(pos) => write!(f, "{pos}: {}; {}", self.summary, self.detail),
            None => write!(f, "<nil>: {}; {}", self.summary, self.detail),
        }
    }
}

/// A source text with its file name, able to turn byte spans into [`Pos`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source<'a> {
    pub(crate) file: &'a str,
    pub(crate) text: &'a str,
}

impl<'a> Source<'a> {
    pub(crate) fn new(file: &'a str, text: &'a str) -> Source<'a> {
        Source { file, text }
    }

    /// The 1-based (line, column) of a byte offset; offsets past the end clamp to the end.
    pub(crate) fn line_col(&self, offset: usize) -> (usize, usize) {
        let bytes = self.text.as_bytes();
        let before = bytes.get(..offset).unwrap_or(bytes);
        let line = 1 + before.iter().filter(|b| **b == b'\n').count();
        let line_start = before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |newline| newline + 1);
        // Columns count characters: every byte that does not continue a UTF-8 sequence.
        let col = 1 + before
            .get(line_start..)
            .unwrap_or(&[])
            .iter()
            .filter(|b| (**b & 0xC0) != 0x80)
            .count();
        (line, col)
    }

    pub(crate) fn pos(&self, span: Option<Range<usize>>) -> Option<Pos> {
        let span = span?;
        Some(Pos {
            file: self.file.to_owned(),
            start: self.line_col(span.start),
            end: self.line_col(span.end),
        })
    }

    /// The source text of a span, if the span lies within the text on char boundaries.
    pub(crate) fn slice(&self, span: &Range<usize>) -> Option<&'a str> {
        self.text.get(span.clone())
    }
}

/// Renders diagnostics the way `jobspec2` joins them: one per line.
pub(crate) fn render(diags: &[Diag]) -> String {
    diags
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The closest candidate to `given` (Levenshtein distance below 3), as HCL suggests names.
pub(crate) fn suggest<'a>(
    given: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let mut best: Option<(&'a str, usize)> = None;
    for candidate in candidates {
        let distance = levenshtein(given, candidate);
        if distance < 3 && best.is_none_or(|(_, d)| distance < d) {
            best = Some((candidate, distance));
        }
    }
    best.map(|(name, _)| name)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = Vec::with_capacity(b.len() + 1);
        current.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous.get(j).copied().unwrap_or(0) + usize::from(ca != *cb);
            let insertion = current.get(j).copied().unwrap_or(0) + 1;
            let deletion = previous.get(j + 1).copied().unwrap_or(0) + 1;
            current.push(substitution.min(insertion).min(deletion));
        }
        previous = current;
    }
    previous.last().copied().unwrap_or(0)
}
