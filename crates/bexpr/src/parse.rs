//! Parser for go-bexpr filter expressions (Nomad's `?filter=`), producing the tree that
//! `eval.rs` walks.
//!
//! The parser mirrors go-bexpr's PEG (`grammar/grammar.peg`) rule by rule, as a scannerless
//! recursive descent with ordered choice and backtracking, so that what parses, what does not,
//! and the error texts match go-bexpr's pigeon-generated parser:
//! - a failure reports the farthest byte offset any rule reached and every terminal that was
//!   expected there (`1:16 (15): no match found, expected: "-", "0", …`), sorted, `EOF` last;
//! - the grammar's own errors carry the innermost rule's display name
//!   (`1:12 (11): rule "string": Unterminated string literal`), stay recorded even if another
//!   alternative later succeeds (as in pigeon), and win over the generic failure.
//!
//! Invariants:
//! - No panics and bounded recursion on any input: `not` and parentheses may nest at most
//!   [`MAX_DEPTH`] deep; `and`/`or` chains are parsed iteratively into n-ary nodes.
//! - Everything evaluation needs is precomputed here: selector parts (with their array index),
//!   the value text coerced to every kind it may be compared against, and compiled regexes.
//! - Unsupported: go-bexpr's `any`/`all` collection expressions and `is nil` (not in Nomad's
//!   documented language); they fail to parse.

use regex::Regex;

use super::goconv::{self, NumErr};

/// How deep `not` and parentheses may nest before the parser gives up.
const MAX_DEPTH: usize = 200;

/// Display text of the whitespace class, as pigeon reports it.
const WS: &str = "[ \\t\\r\\n]";
/// Sentinel for "end of input expected"; shown last, as pigeon does.
const EOF: &str = "EOF";

/// A boolean expression.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    /// All must hold; evaluated left to right, stopping at the first false.
    And(Vec<Node>),
    /// One must hold; evaluated left to right, stopping at the first true.
    Or(Vec<Node>),
    Not(Box<Node>),
    Match(Box<Match>),
}

/// One comparison of the value at a selector.
#[derive(Debug, Clone)]
pub(crate) struct Match {
    pub(crate) selector: Selector,
    pub(crate) test: Test,
    /// `!=`, `not in`/`not contains`, `is not empty`, `not matches`.
    pub(crate) negated: bool,
}

/// The positive form of a match operator, with its operand.
#[derive(Debug, Clone)]
pub(crate) enum Test {
    /// `==` (or `!=` when negated).
    Equal(MatchValue),
    /// `Value in Selector` / `Selector contains Value`.
    In(MatchValue),
    /// `is empty`.
    IsEmpty,
    /// `matches`, compiled once here.
    Matches(Regex),
}

/// The path to a value inside the datum.
#[derive(Debug, Clone)]
pub(crate) struct Selector {
    pub(crate) parts: Vec<Part>,
    /// Written as a quoted JSON pointer (`"/Meta/team"`) rather than `Meta.team`.
    pub(crate) json_pointer: bool,
}

/// One step of a selector: an object key, or (when the value there is an array) an index.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub(crate) key: String,
    /// The key read as an array index the way Go's weak decoding does (`""` is 0, base
    /// prefixes allowed); `None` if it is not an integer.
    pub(crate) index: Option<i64>,
}

/// A value's text with its coercions to every primitive kind, computed once at parse time.
#[derive(Debug, Clone)]
pub(crate) struct MatchValue {
    pub(crate) raw: String,
    pub(crate) as_bool: Option<bool>,
    pub(crate) as_int: Result<i64, NumErr>,
    pub(crate) as_uint: Result<u64, NumErr>,
    pub(crate) as_float: Result<f64, NumErr>,
    /// The text names a zero value (`""`, a false bool, a zero number): what a JSON `null`
    /// standing for a Go zero value equals.
    pub(crate) is_zero: bool,
}

impl Selector {
    /// The selector as go-bexpr prints it: `a.b.c`, or `a/b/c` for a JSON pointer.
    pub(crate) fn display(&self) -> String {
        let sep = if self.json_pointer { "/" } else { "." };
        let mut out = String::new();
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                out.push_str(sep);
            }
            out.push_str(&part.key);
        }
        out
    }

    /// The selector as a JSON pointer (`/a/b~1c`), as pointerstructure prints it in errors.
    pub(crate) fn pointer(&self) -> String {
        let mut out = String::new();
        for part in &self.parts {
            out.push('/');
            out.push_str(&part.key.replace('~', "~0").replace('/', "~1"));
        }
        out
    }
}

impl Part {
    fn new(key: String) -> Part {
        let index = if key.is_empty() {
            Some(0)
        } else {
            goconv::parse_int(&key).ok()
        };
        Part { key, index }
    }
}

impl MatchValue {
    fn new(raw: String) -> MatchValue {
        let as_bool = stdx::strconv::parse_bool(&raw);
        let as_int = goconv::parse_int(&raw);
        let as_uint = goconv::parse_uint(&raw);
        let as_float = goconv::parse_float(&raw);
        let is_zero = raw.is_empty()
            || as_bool == Some(false)
            || as_int == Ok(0)
            || as_uint == Ok(0)
            || as_float == Ok(0.0);
        MatchValue {
            raw,
            as_bool,
            as_int,
            as_uint,
            as_float,
            is_zero,
        }
    }
}

/// Parses a whole expression, or returns go-bexpr's error text.
pub(crate) fn parse(src: &str) -> Result<Node, String> {
    let mut parser = Parser {
        src,
        pos: 0,
        depth: 0,
        fail_pos: 0,
        expected: Vec::new(),
        errors: Vec::new(),
    };
    let node = parser.input();
    if !parser.errors.is_empty() {
        return Err(parser.errors.join("\n"));
    }
    node.ok_or_else(|| parser.no_match())
}

/// One terminal step of an operator sequence.
#[derive(Clone, Copy)]
enum Tok {
    /// `_`: one or more whitespace characters.
    Ws,
    /// `_?`.
    WsOpt,
    /// A keyword or symbol.
    Lit(&'static str, &'static str),
}

const fn lit(text: &'static str, shown: &'static str) -> Tok {
    Tok::Lit(text, shown)
}

const NOT: Tok = lit("not", "\"not\"");

/// Operators of `Selector Op Value`, in the grammar's order: (terminals, kind, negated).
const SELECTOR_VALUE_OPS: [(&[Tok], OpKind, bool); 6] = [
    (
        &[Tok::WsOpt, lit("==", "\"==\""), Tok::WsOpt],
        OpKind::Equal,
        false,
    ),
    (
        &[Tok::WsOpt, lit("!=", "\"!=\""), Tok::WsOpt],
        OpKind::Equal,
        true,
    ),
    (
        &[Tok::Ws, lit("contains", "\"contains\""), Tok::Ws],
        OpKind::In,
        false,
    ),
    (
        &[
            Tok::Ws,
            NOT,
            Tok::Ws,
            lit("contains", "\"contains\""),
            Tok::Ws,
        ],
        OpKind::In,
        true,
    ),
    (
        &[Tok::Ws, lit("matches", "\"matches\""), Tok::Ws],
        OpKind::Matches,
        false,
    ),
    (
        &[
            Tok::Ws,
            NOT,
            Tok::Ws,
            lit("matches", "\"matches\""),
            Tok::Ws,
        ],
        OpKind::Matches,
        true,
    ),
];

/// Operators of `Selector Op`: `is empty`, `is not empty`.
const SELECTOR_OPS: [(&[Tok], bool); 2] = [
    (
        &[
            Tok::Ws,
            lit("is", "\"is\""),
            Tok::Ws,
            lit("empty", "\"empty\""),
        ],
        false,
    ),
    (
        &[
            Tok::Ws,
            lit("is", "\"is\""),
            Tok::Ws,
            NOT,
            Tok::Ws,
            lit("empty", "\"empty\""),
        ],
        true,
    ),
];

/// Operators of `Value Op Selector`: `in`, `not in`.
const VALUE_SELECTOR_OPS: [(&[Tok], bool); 2] = [
    (&[Tok::Ws, lit("in", "\"in\""), Tok::Ws], false),
    (&[Tok::Ws, NOT, Tok::Ws, lit("in", "\"in\""), Tok::Ws], true),
];

#[derive(Clone, Copy)]
enum OpKind {
    Equal,
    In,
    Matches,
}

struct Parser<'a> {
    src: &'a str,
    /// Current byte offset; always on a char boundary and at most `src.len()` (it only moves
    /// past ASCII bytes or whole chars), which the `src[..]` slices below rely on.
    pos: usize,
    /// Current nesting of `not`/parentheses.
    depth: usize,
    /// Farthest offset at which a terminal failed to match.
    fail_pos: usize,
    /// What was expected at `fail_pos` (display texts, possibly repeated).
    expected: Vec<&'static str>,
    /// The grammar's own errors, formatted, without duplicates.
    errors: Vec<String>,
}

fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_pointer_char(c: char) -> bool {
    c.is_alphabetic() || c.is_numeric() || matches!(c, '-' | '_' | '.' | '~' | ':' | '|')
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.pos).copied()
    }

    /// Notes that `what` was expected at `at`, keeping only the farthest offset.
    fn expect(&mut self, at: usize, what: &'static str) {
        if at > self.fail_pos {
            self.fail_pos = at;
            self.expected.clear();
        }
        if at == self.fail_pos {
            self.expected.push(what);
        }
    }

    /// `line:col (offset)` as pigeon prints a position (1-based line and rune column).
    fn position(&self, at: usize) -> String {
        let before = self.src.get(..at).unwrap_or(self.src);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
        format!("{line}:{col} ({at})")
    }

    /// Records one of the grammar's own errors (kept even if parsing later succeeds).
    fn custom(&mut self, at: usize, rule: &str, message: &str) {
        let text = format!("{}: rule \"{rule}\": {message}", self.position(at));
        if !self.errors.contains(&text) {
            self.errors.push(text);
        }
    }

    /// The generic failure: everything expected at the farthest position reached.
    fn no_match(&self) -> String {
        let mut expected: Vec<&str> = self.expected.clone();
        let eof = expected.contains(&EOF);
        expected.retain(|e| *e != EOF);
        expected.sort_unstable();
        expected.dedup();
        if eof {
            expected.push(EOF);
        }
        let list = match expected.split_last() {
            None => String::new(),
            Some((only, [])) => (*only).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        };
        format!(
            "{}: no match found, expected: {list}",
            self.position(self.fail_pos)
        )
    }

    /// Matches a literal; on failure nothing is consumed.
    fn lit(&mut self, text: &str, shown: &'static str) -> bool {
        let rest = self.src.as_bytes().get(self.pos..).unwrap_or_default();
        if rest.starts_with(text.as_bytes()) {
            self.pos += text.len();
            true
        } else {
            self.expect(self.pos, shown);
            false
        }
    }

    /// Matches one ASCII byte of a class.
    fn class(&mut self, test: fn(u8) -> bool, shown: &'static str) -> bool {
        match self.peek() {
            Some(c) if test(c) => {
                self.pos += 1;
                true
            }
            _ => {
                self.expect(self.pos, shown);
                false
            }
        }
    }

    /// `_?`: skips whitespace.
    fn ws_opt(&mut self) {
        while self.peek().is_some_and(is_ws) {
            self.pos += 1;
        }
        self.expect(self.pos, WS);
    }

    /// `_`: at least one whitespace character.
    fn ws(&mut self) -> bool {
        let start = self.pos;
        self.ws_opt();
        self.pos > start
    }

    /// A sequence of terminals; all or nothing.
    fn seq(&mut self, toks: &[Tok]) -> bool {
        let start = self.pos;
        for tok in toks {
            let ok = match *tok {
                Tok::Ws => self.ws(),
                Tok::WsOpt => {
                    self.ws_opt();
                    true
                }
                Tok::Lit(text, shown) => self.lit(text, shown),
            };
            if !ok {
                self.pos = start;
                return false;
            }
        }
        true
    }

    /// `Input <- _? OrExpression _? EOF`.
    fn input(&mut self) -> Option<Node> {
        self.ws_opt();
        let node = self.or()?;
        self.ws_opt();
        if self.pos < self.src.len() {
            self.expect(self.pos, EOF);
            return None;
        }
        Some(node)
    }

    /// `OrExpression <- AndExpression _ "or" _ OrExpression / AndExpression`.
    fn or(&mut self) -> Option<Node> {
        self.chain(lit("or", "\"or\""), Self::and, Node::Or)
    }

    /// `AndExpression <- NotExpression _ "and" _ AndExpression / NotExpression`.
    fn and(&mut self) -> Option<Node> {
        self.chain(lit("and", "\"and\""), Self::not, Node::And)
    }

    /// `Next (_ keyword _ Next)*`, the right recursion of the grammar flattened into a loop.
    fn chain(
        &mut self,
        keyword: Tok,
        next: fn(&mut Self) -> Option<Node>,
        build: fn(Vec<Node>) -> Node,
    ) -> Option<Node> {
        let first = next(self)?;
        let mut items = vec![first];
        loop {
            let save = self.pos;
            if self.seq(&[Tok::Ws, keyword, Tok::Ws])
                && let Some(node) = next(self)
            {
                items.push(node);
                continue;
            }
            self.pos = save;
            break;
        }
        if items.len() == 1 {
            items.pop()
        } else {
            Some(build(items))
        }
    }

    /// `NotExpression <- "not" _ NotExpression / ParenthesizedExpression`.
    fn not(&mut self) -> Option<Node> {
        if self.depth >= MAX_DEPTH {
            self.custom(self.pos, "grouping", "expression nests too deeply");
            return None;
        }
        self.depth += 1;
        let node = self.not_body();
        self.depth -= 1;
        node
    }

    fn not_body(&mut self) -> Option<Node> {
        let start = self.pos;
        if self.seq(&[NOT, Tok::Ws])
            && let Some(inner) = self.not()
        {
            // `not not x` is `x`, as go-bexpr folds it.
            return Some(match inner {
                Node::Not(operand) => *operand,
                other => Node::Not(Box::new(other)),
            });
        }
        self.pos = start;
        self.paren()
    }

    /// `ParenthesizedExpression <- "(" _? OrExpression _? ")" / MatchExpression
    ///   / "(" _? OrExpression _? !")" &{Unmatched parentheses}`.
    ///
    /// The third alternative repeats the first one's prefix, so it is folded into it.
    fn paren(&mut self) -> Option<Node> {
        let start = self.pos;
        if !self.lit("(", "\"(\"") {
            return self.match_expr();
        }
        self.ws_opt();
        if let Some(inner) = self.or() {
            self.ws_opt();
            if self.lit(")", "\")\"") {
                return Some(inner);
            }
            self.custom(self.pos, "grouping", "Unmatched parentheses");
        }
        // A match expression never starts with "(", so the second alternative fails here.
        self.pos = start;
        None
    }

    /// `MatchExpression <- Selector Op Value / Selector Op / Value Op Selector`.
    fn match_expr(&mut self) -> Option<Node> {
        let start = self.pos;
        if let Some(selector) = self.selector() {
            let after_selector = self.pos;
            for (toks, kind, negated) in SELECTOR_VALUE_OPS {
                if !self.seq(toks) {
                    continue;
                }
                let value_at = self.pos;
                if let Some(raw) = self.value() {
                    if let Some(test) = self.test(kind, raw, value_at) {
                        return Some(Self::node(selector, test, negated));
                    }
                    // The error is recorded; the parse as a whole fails.
                    self.pos = start;
                    return None;
                }
                self.pos = after_selector;
                // Ordered choice: the remaining operators cannot match where this one did.
                break;
            }
            for (toks, negated) in SELECTOR_OPS {
                if self.seq(toks) {
                    return Some(Self::node(selector, Test::IsEmpty, negated));
                }
            }
        }
        self.pos = start;
        if let Some(raw) = self.value() {
            for (toks, negated) in VALUE_SELECTOR_OPS {
                if !self.seq(toks) {
                    continue;
                }
                let selector_at = self.pos;
                if let Some(selector) = self.selector() {
                    let test = Test::In(MatchValue::new(raw));
                    return Some(Self::node(selector, test, negated));
                }
                self.custom(selector_at, "match", "Invalid selector");
                break;
            }
        }
        self.pos = start;
        None
    }

    fn node(selector: Selector, test: Test, negated: bool) -> Node {
        Node::Match(Box::new(Match {
            selector,
            test,
            negated,
        }))
    }

    /// Builds the operand of a `Selector Op Value` match; a bad regex is a parse error.
    fn test(&mut self, kind: OpKind, raw: String, value_at: usize) -> Option<Test> {
        match kind {
            OpKind::Equal => Some(Test::Equal(MatchValue::new(raw))),
            OpKind::In => Some(Test::In(MatchValue::new(raw))),
            OpKind::Matches => match Regex::new(&raw) {
                Ok(regex) => Some(Test::Matches(regex)),
                Err(err) => {
                    let message = format!(
                        "failed to compile regular expression {}: {}",
                        goconv::quote(&raw),
                        regex_error_summary(&err)
                    );
                    self.custom(value_at, "match", &message);
                    None
                }
            },
        }
    }

    /// `Selector <- Identifier SelectorOrIndex* / '"' JsonPointerSegment* '"'`.
    fn selector(&mut self) -> Option<Selector> {
        let start = self.pos;
        if let Some(first) = self.identifier() {
            let mut parts = vec![Part::new(first)];
            while let Some(part) = self.selector_or_index() {
                parts.push(part);
            }
            return Some(Selector {
                parts,
                json_pointer: false,
            });
        }
        if self.lit("\"", "\"\\\"\"") {
            let mut parts = Vec::new();
            while let Some(segment) = self.pointer_segment() {
                parts.push(segment);
            }
            if self.lit("\"", "\"\\\"\"") {
                if parts.is_empty() {
                    // pointerstructure reads the pointer "/" as one empty key.
                    parts.push(Part::new(String::new()));
                }
                return Some(Selector {
                    parts,
                    json_pointer: true,
                });
            }
        }
        self.pos = start;
        None
    }

    /// `Identifier <- [a-zA-Z] [a-zA-Z0-9_/]*`.
    fn identifier(&mut self) -> Option<String> {
        let start = self.pos;
        if !self.class(|c| c.is_ascii_alphabetic(), "[a-zA-Z]") {
            return None;
        }
        while self.class(
            |c| c.is_ascii_alphanumeric() || c == b'_' || c == b'/',
            "[a-zA-Z0-9_/]",
        ) {}
        Some(self.src[start..self.pos].to_owned())
    }

    /// `SelectorOrIndex <- "." Identifier / IndexExpression / "." [0-9]+`.
    fn selector_or_index(&mut self) -> Option<Part> {
        let start = self.pos;
        if self.lit(".", "\".\"") {
            if let Some(ident) = self.identifier() {
                return Some(Part::new(ident));
            }
            self.pos = start;
        }
        if let Some(key) = self.index() {
            return Some(Part::new(key));
        }
        if self.lit(".", "\".\"") {
            let digits = self.pos;
            while self.class(|c| c.is_ascii_digit(), "[0-9]") {}
            if self.pos > digits {
                return Some(Part::new(self.src[digits..self.pos].to_owned()));
            }
        }
        self.pos = start;
        None
    }

    /// `IndexExpression <- "[" _? StringLiteral _? "]"` and its two error alternatives.
    fn index(&mut self) -> Option<String> {
        let start = self.pos;
        if !self.lit("[", "\"[\"") {
            return None;
        }
        self.ws_opt();
        let literal_at = self.pos;
        match self.string_literal() {
            Some(key) => {
                self.ws_opt();
                if self.lit("]", "\"]\"") {
                    return Some(key);
                }
                self.custom(self.pos, "index", "Unclosed index expression");
            }
            None => self.custom(literal_at, "index", "Invalid index"),
        }
        self.pos = start;
        None
    }

    /// `JsonPointerSegment <- '/' [\pL\pN-_.~:|]+`, unescaped (`~1` is `/`, `~0` is `~`).
    fn pointer_segment(&mut self) -> Option<Part> {
        let start = self.pos;
        if !self.lit("/", "\"/\"") {
            return None;
        }
        let body = self.pos;
        loop {
            match self.src[self.pos..].chars().next() {
                Some(c) if is_pointer_char(c) => self.pos += c.len_utf8(),
                _ => {
                    self.expect(self.pos, "[\\pL\\pN-_.~:|]");
                    break;
                }
            }
        }
        if self.pos == body {
            self.pos = start;
            return None;
        }
        let key = self.src[body..self.pos]
            .replace("~1", "/")
            .replace("~0", "~");
        Some(Part::new(key))
    }

    /// `Value <- Selector / NumberLiteral / StringLiteral`; a selector value is its text.
    fn value(&mut self) -> Option<String> {
        if let Some(selector) = self.selector() {
            return Some(selector.display());
        }
        if let Some(number) = self.number() {
            return Some(number);
        }
        self.string_literal()
    }

    /// `NumberLiteral <- "-"? ("0" / [1-9][0-9]*) ("." [0-9]+)?` followed by whitespace,
    /// `)` or the end; anything else right after the digits is an invalid number.
    fn number(&mut self) -> Option<String> {
        let start = self.pos;
        self.lit("-", "\"-\"");
        if !self.lit("0", "\"0\"") {
            if !self.class(|c| matches!(c, b'1'..=b'9'), "[1-9]") {
                self.pos = start;
                return None;
            }
            while self.class(|c| c.is_ascii_digit(), "[0-9]") {}
        }
        let integer_end = self.pos;
        if self.lit(".", "\".\"") {
            let fraction = self.pos;
            while self.class(|c| c.is_ascii_digit(), "[0-9]") {}
            if self.pos == fraction {
                self.pos = integer_end;
            }
        }
        match self.peek() {
            None | Some(b' ' | b'\t' | b'\r' | b'\n' | b')') => {
                Some(self.src[start..self.pos].to_owned())
            }
            Some(_) => {
                self.custom(self.pos, "number", "Invalid number literal");
                self.pos = start;
                None
            }
        }
    }

    /// `StringLiteral`: a backquoted raw string, or a double-quoted one that ends at the next
    /// `"` and is unquoted as Go's `strconv.Unquote` does (so `\"` cannot appear inside it, as
    /// in go-bexpr).
    fn string_literal(&mut self) -> Option<String> {
        let start = self.pos;
        let Some(quote @ (b'`' | b'"')) = self.peek() else {
            self.expect(start, "\"`\"");
            self.expect(start, "\"\\\"\"");
            return None;
        };
        let body_start = start + 1;
        let Some(len) = self.src[body_start..].find(char::from(quote)) else {
            self.custom(self.src.len(), "string", "Unterminated string literal");
            return None;
        };
        let body = &self.src[body_start..body_start + len];
        self.pos = body_start + len + 1;
        if quote == b'`' {
            return Some(body.replace('\r', ""));
        }
        let text = goconv::unquote_double(body);
        if text.is_none() {
            // pigeon records an action's error and carries on with the match.
            self.custom(start, "string", "invalid syntax");
        }
        Some(text.unwrap_or_default())
    }
}

/// The last line of a `regex` error (its full text spans several lines with a caret).
fn regex_error_summary(err: &regex::Error) -> String {
    let text = err.to_string();
    let last = text
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or(text.as_str());
    last.trim().trim_start_matches("error: ").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(src: &str) -> String {
        match parse(src) {
            Ok(node) => panic!("{src:?} parsed as {node:?}"),
            Err(e) => e,
        }
    }

    fn only_match(src: &str) -> Match {
        match parse(src) {
            Ok(Node::Match(m)) => *m,
            other => panic!("{src:?}: {other:?}"),
        }
    }

    fn keys(m: &Match) -> Vec<&str> {
        m.selector.parts.iter().map(|p| p.key.as_str()).collect()
    }

    fn raw(m: &Match) -> &str {
        match &m.test {
            Test::Equal(v) | Test::In(v) => &v.raw,
            Test::Matches(regex) => regex.as_str(),
            Test::IsEmpty => "",
        }
    }

    #[test]
    fn selectors_take_dots_indexes_and_digits() {
        let m = only_match(r#"TaskStates.redis["a b"].0 == x"#);
        assert_eq!(keys(&m), ["TaskStates", "redis", "a b", "0"]);
        assert!(!m.selector.json_pointer);
        assert_eq!(m.selector.display(), "TaskStates.redis.a b.0");
        let m = only_match("foo/bar == hello");
        assert_eq!(keys(&m), ["foo/bar"]);
    }

    #[test]
    fn json_pointer_selectors_are_unescaped() {
        let m = only_match(r#""/Meta/a~1b~0c" == x"#);
        assert_eq!(keys(&m), ["Meta", "a/b~c"]);
        assert!(m.selector.json_pointer);
        assert_eq!(m.selector.pointer(), "/Meta/a~1b~0c");
        assert_eq!(m.selector.display(), "Meta/a/b~c");
    }

    #[test]
    fn values_keep_their_text() {
        assert_eq!(raw(&only_match("a == running")), "running");
        assert_eq!(raw(&only_match("a == b.c[\"d\"]")), "b.c.d");
        assert_eq!(raw(&only_match("a == -0.25")), "-0.25");
        assert_eq!(raw(&only_match(r#"a == "x\ty""#)), "x\ty");
        assert_eq!(raw(&only_match(r"a == `x\ty`")), "x\\ty");
        assert_eq!(raw(&only_match(r#"a == """#)), "");
        // As in go-bexpr, a quoted value that reads as a JSON pointer becomes its path.
        assert_eq!(raw(&only_match(r#"a == "/usr/bin""#)), "usr/bin");
        assert_eq!(raw(&only_match(r"a == `/usr/bin`")), "/usr/bin");
    }

    #[test]
    fn operators_map_to_tests() {
        let cases = [
            ("a == 1", "eq", false),
            ("a != 1", "eq", true),
            ("a contains 1", "in", false),
            ("a not contains 1", "in", true),
            ("1 in a", "in", false),
            ("1 not in a", "in", true),
            ("a matches x", "re", false),
            ("a not matches x", "re", true),
            ("a is empty", "empty", false),
            ("a is not empty", "empty", true),
        ];
        for (src, kind, negated) in cases {
            let m = only_match(src);
            let got = match m.test {
                Test::Equal(_) => "eq",
                Test::In(_) => "in",
                Test::Matches(_) => "re",
                Test::IsEmpty => "empty",
            };
            assert_eq!((got, m.negated), (kind, negated), "{src}");
            assert_eq!(keys(&m), ["a"], "{src}");
        }
    }

    #[test]
    fn keywords_can_still_be_selectors() {
        assert_eq!(keys(&only_match("not == 1")), ["not"]);
        assert_eq!(keys(&only_match("notes == 1")), ["notes"]);
        assert_eq!(raw(&only_match("not in x")), "not");
        assert_eq!(keys(&only_match("or is empty")), ["or"]);
    }

    #[test]
    fn and_binds_tighter_than_or_and_chains_flatten() {
        match parse("a == 1 or b == 2 and c == 3 or d == 4") {
            Ok(Node::Or(items)) => {
                assert_eq!(items.len(), 3);
                assert!(matches!(&items[1], Node::And(inner) if inner.len() == 2));
            }
            other => panic!("{other:?}"),
        }
        match parse("(a == 1 or b == 2) and not c == 3") {
            Ok(Node::And(items)) => {
                assert!(matches!(&items[0], Node::Or(_)));
                assert!(matches!(&items[1], Node::Not(_)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn double_not_folds_away() {
        assert!(matches!(parse("not not a == 1"), Ok(Node::Match(_))));
        assert!(matches!(parse("not not not a == 1"), Ok(Node::Not(_))));
    }

    #[test]
    fn whitespace_is_free_around_expressions() {
        for src in [
            "  a==1  ",
            "\t(a == 1)\n",
            "( a == 1 ) and ( b == 2 )",
            "a == 1\nand\tb == 2",
        ] {
            assert!(parse(src).is_ok(), "{src:?}");
        }
    }

    #[test]
    fn keywords_need_whitespace_around_them() {
        // As in go-bexpr: `and`/`or`/`not`/`contains`/`in` are delimited by whitespace.
        for src in [
            "(a == 1)and(b == 2)",
            "not(a == 1)",
            "a contains\"x\"",
            "\"x\"in a",
        ] {
            assert!(parse(src).is_err(), "{src:?}");
        }
    }

    #[test]
    fn errors_match_go_bexpr_texts() {
        let cases = [
            (
                "foo == \"12x",
                "1:12 (11): rule \"string\": Unterminated string literal",
            ),
            (
                "foo == `12x",
                "1:12 (11): rule \"string\": Unterminated string literal",
            ),
            (
                "foo == 3x",
                "1:9 (8): rule \"number\": Invalid number literal",
            ),
            ("foo[3] == abc", "1:5 (4): rule \"index\": Invalid index"),
            (
                "x in foo[\"abc\"",
                "1:15 (14): rule \"index\": Unclosed index expression",
            ),
            (
                "foo[\"abc\" == 3",
                "1:11 (10): rule \"index\": Unclosed index expression",
            ),
            ("x in 32", "1:6 (5): rule \"match\": Invalid selector"),
            (
                "32 == 32",
                "1:4 (3): no match found, expected: \"in\", \"not\" or [ \\t\\r\\n]",
            ),
            (
                "32 is empty",
                "1:4 (3): no match found, expected: \"in\", \"not\" or [ \\t\\r\\n]",
            ),
            (
                "x in foo abc",
                "1:10 (9): no match found, expected: \"and\", \"or\", [ \\t\\r\\n] or EOF",
            ),
            (
                "x in foo and ",
                "1:14 (13): no match found, expected: \"(\", \"-\", \"0\", \"\\\"\", \"`\", \
                 \"not\", [ \\t\\r\\n], [1-9] or [a-zA-Z]",
            ),
            (
                "x in foo or not ",
                "1:17 (16): no match found, expected: \"!=\", \"(\", \"-\", \"0\", \"==\", \
                 \"\\\"\", \"`\", \"contains\", \"in\", \"is\", \"matches\", \"not\", \
                 [ \\t\\r\\n], [1-9] or [a-zA-Z]",
            ),
            (
                "(foo == 4",
                "1:10 (9): rule \"grouping\": Unmatched parentheses",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(err(src), want, "{src}");
        }
    }

    #[test]
    fn incomplete_comparison_reports_expected_value() {
        assert_eq!(
            err("ClientStatus =="),
            "1:16 (15): no match found, expected: \"-\", \"0\", \"\\\"\", \"`\", \
             [ \\t\\r\\n], [1-9] or [a-zA-Z]"
        );
    }

    #[test]
    fn unknown_operator_is_rejected() {
        let e = err("ClientStatus ~= running");
        assert!(
            e.starts_with("1:14 (13): no match found, expected: "),
            "{e}"
        );
        assert!(e.contains("\"==\""), "{e}");
        assert!(parse("a === b").is_err());
        assert!(parse("a == b xor c == d").is_err());
        assert!(parse("a AND b").is_err());
    }

    #[test]
    fn empty_input_is_an_error() {
        assert_eq!(
            err(""),
            "1:1 (0): no match found, expected: \"(\", \"-\", \"0\", \"\\\"\", \"`\", \
             \"not\", [ \\t\\r\\n], [1-9] or [a-zA-Z]"
        );
        assert!(parse("   ").is_err());
        assert!(parse("()").is_err());
    }

    #[test]
    fn positions_count_lines_and_runes() {
        assert_eq!(
            err("é == 1"),
            "1:1 (0): no match found, expected: \"(\", \"-\", \"0\", \"\\\"\", \"`\", \
             \"not\", [ \\t\\r\\n], [1-9] or [a-zA-Z]"
        );
        let e = err("a == \"é\"\nand b ==");
        assert!(e.starts_with("2:9 (18): "), "{e}");
        let e = err("a == \"é\" and b ==");
        assert!(e.starts_with("1:18 (18): "), "{e}");
    }

    #[test]
    fn bad_escape_in_string_is_invalid_syntax() {
        assert_eq!(
            err(r#"a == "x\q""#),
            "1:6 (5): rule \"string\": invalid syntax"
        );
        // `\"` ends the string early in go-bexpr too, leaving a lone backslash.
        assert!(err(r#"a == "x\"y""#).contains("invalid syntax"));
    }

    #[test]
    fn invalid_regex_is_a_parse_error() {
        assert_eq!(
            err(r#"a matches "(x""#),
            "1:11 (10): rule \"match\": failed to compile regular expression \"(x\": \
             unclosed group"
        );
    }

    #[test]
    fn deep_nesting_fails_cleanly() {
        let deep = format!("{}a == 1{}", "(".repeat(5000), ")".repeat(5000));
        assert!(err(&deep).contains("expression nests too deeply"));
        let nots = format!("{}a == 1", "not ".repeat(5001));
        assert!(err(&nots).contains("expression nests too deeply"));
        let ok = format!("{}a == 1{}", "(".repeat(50), ")".repeat(50));
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn long_chains_do_not_recurse() {
        let long = vec!["a == 1"; 20_000].join(" and ");
        match parse(&long) {
            Ok(Node::And(items)) => assert_eq!(items.len(), 20_000),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn odd_inputs_never_panic() {
        for src in [
            "\"",
            "`",
            "[",
            "a[",
            "a[\"",
            "a.",
            "a.\"",
            "\"/",
            "\"/a",
            "-",
            "a == -",
            "a == 0.",
            "a == 01",
            "é",
            "a == \"\u{0}\"",
            "(((",
            ")))",
            "not",
            "not ",
            "a is",
            "a is not",
            "a matches",
            "\"\" == 1",
            "a[``] == 1",
            "a\u{301} == 1",
        ] {
            let _ = parse(src);
        }
    }
}
