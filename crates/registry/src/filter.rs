//! What a read's query keeps: `?filter=` (a subset of go-bexpr, evaluated over the JSON shape
//! each endpoint returns), `?node-meta=key:value` and `?tag=`.
//!
//! Where it sits: the catalog, health and agent handlers parse these from their
//! [`QueryParams`] and apply them to what they read; pure, no I/O.
//!
//! Invariants: a malformed filter is a 400 in go-bexpr's words, never an empty answer; repeated
//! `?node-meta=` and `?tag=` must all match.

use serde_json::Value;

use crate::Error;
use crate::meta::QueryParams;
use crate::store::catalog::{NodeRecord, ServiceRecord};

/// `?node-meta=key:value` filters (every pair must match).
pub(crate) fn node_meta_filter(query: &QueryParams) -> Result<Vec<(String, String)>, Error> {
    query
        .get_all("node-meta")
        .map(|pair| match pair.split_once(':') {
            Some((key, value)) => Ok((key.to_owned(), value.to_owned())),
            None => Err(Error::BadRequest(format!(
                "Invalid node-meta {pair:?}: expected key:value"
            ))),
        })
        .collect()
}

pub(crate) fn node_matches_meta(node: &NodeRecord, filter: &[(String, String)]) -> bool {
    filter
        .iter()
        .all(|(key, value)| node.meta.get(key) == Some(value))
}

/// `?tag=` filters (every tag must be present).
pub(crate) fn tag_filter(query: &QueryParams) -> Vec<String> {
    query.get_all("tag").map(str::to_owned).collect()
}

pub(crate) fn service_has_tags(service: &ServiceRecord, tags: &[String]) -> bool {
    tags.iter().all(|tag| service.tags.contains(tag))
}

/// A parsed `?filter=` expression: `==`, `!=`, `in`, `not in`, `contains`, `not contains`,
/// `is empty`, `is not empty`, combined with `and`, `or`, `not` and parentheses; selectors are
/// dotted field paths (`Service.Tags`, `Node.Meta.rack`); values are `"quoted"`, `` `raw` ``,
/// numbers, booleans or bare words. A selector that names nothing matches nothing (and is
/// empty). `matches` (regular expressions) is refused with a 400.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Filter {
    And(Box<Filter>, Box<Filter>),
    Or(Box<Filter>, Box<Filter>),
    Not(Box<Filter>),
    Equal(Vec<String>, String),
    NotEqual(Vec<String>, String),
    /// `value in selector` / `selector contains value`.
    Contains(Vec<String>, String),
    Empty(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Open,
    Close,
    Eq,
    Ne,
    /// A quoted or raw string: always a value.
    Literal(String),
    /// A bare word: a keyword, a selector or a value.
    Word(String),
}

fn filter_error(expression: &str, reason: &str) -> Error {
    Error::BadRequest(format!(
        "Failed to create boolean expression evaluator: {reason} in filter {expression:?}"
    ))
}

fn tokenize(expression: &str) -> Result<Vec<Token>, Error> {
    let mut tokens = Vec::new();
    let mut chars = expression.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '(' => {
                chars.next();
                tokens.push(Token::Open);
            }
            ')' => {
                chars.next();
                tokens.push(Token::Close);
            }
            '=' | '!' => {
                chars.next();
                if chars.next() != Some('=') {
                    return Err(filter_error(expression, "expected == or !="));
                }
                tokens.push(if c == '=' { Token::Eq } else { Token::Ne });
            }
            '"' => {
                chars.next();
                let mut text = String::new();
                loop {
                    match chars.next() {
                        None => return Err(filter_error(expression, "unterminated string")),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(escaped) => text.push(escaped),
                            None => return Err(filter_error(expression, "unterminated string")),
                        },
                        Some(other) => text.push(other),
                    }
                }
                tokens.push(Token::Literal(text));
            }
            '`' => {
                chars.next();
                let mut text = String::new();
                loop {
                    match chars.next() {
                        None => return Err(filter_error(expression, "unterminated string")),
                        Some('`') => break,
                        Some(other) => text.push(other),
                    }
                }
                tokens.push(Token::Literal(text));
            }
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || matches!(c, '(' | ')' | '=' | '!' | '"' | '`') {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                tokens.push(Token::Word(word));
            }
        }
    }
    Ok(tokens)
}

struct Parser<'a> {
    expression: &'a str,
    tokens: Vec<Token>,
    position: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.position)
    }

    fn peek_word(&self, offset: usize) -> Option<&str> {
        match self.tokens.get(self.position + offset) {
            Some(Token::Word(word)) => Some(word.as_str()),
            _ => None,
        }
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.position).cloned();
        self.position += 1;
        token
    }

    fn error(&self, reason: &str) -> Error {
        filter_error(self.expression, reason)
    }

    fn or(&mut self) -> Result<Filter, Error> {
        let mut left = self.and()?;
        while self.peek_word(0) == Some("or") {
            self.position += 1;
            left = Filter::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Filter, Error> {
        let mut left = self.unary()?;
        while self.peek_word(0) == Some("and") {
            self.position += 1;
            left = Filter::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Filter, Error> {
        if self.peek_word(0) == Some("not") {
            self.position += 1;
            return Ok(Filter::Not(Box::new(self.unary()?)));
        }
        if self.peek() == Some(&Token::Open) {
            self.position += 1;
            let inner = self.or()?;
            if self.next() != Some(Token::Close) {
                return Err(self.error("expected )"));
            }
            return Ok(inner);
        }
        self.comparison()
    }

    fn value(&mut self) -> Result<String, Error> {
        match self.next() {
            Some(Token::Literal(text) | Token::Word(text)) => Ok(text),
            _ => Err(self.error("expected a value")),
        }
    }

    fn selector(&mut self) -> Result<Vec<String>, Error> {
        match self.next() {
            Some(Token::Word(word)) if !word.is_empty() => {
                let path: Vec<String> = word.split('.').map(str::to_owned).collect();
                if path.iter().any(String::is_empty) {
                    return Err(self.error(&format!("invalid selector {word:?}")));
                }
                Ok(path)
            }
            _ => Err(self.error("expected a selector")),
        }
    }

    fn comparison(&mut self) -> Result<Filter, Error> {
        // `value in selector` / `value not in selector`.
        let value_first = match (self.peek(), self.peek_word(1), self.peek_word(2)) {
            (Some(Token::Literal(_) | Token::Word(_)), Some("in"), _) => Some(false),
            (Some(Token::Literal(_) | Token::Word(_)), Some("not"), Some("in")) => Some(true),
            _ => None,
        };
        if let Some(negated) = value_first {
            let value = self.value()?;
            self.position += if negated { 2 } else { 1 };
            let selector = self.selector()?;
            let contains = Filter::Contains(selector, value);
            return Ok(if negated {
                Filter::Not(Box::new(contains))
            } else {
                contains
            });
        }
        let selector = self.selector()?;
        match self.next() {
            Some(Token::Eq) => Ok(Filter::Equal(selector, self.value()?)),
            Some(Token::Ne) => Ok(Filter::NotEqual(selector, self.value()?)),
            Some(Token::Word(word)) => match word.as_str() {
                "contains" => Ok(Filter::Contains(selector, self.value()?)),
                "is" => {
                    let negated = self.peek_word(0) == Some("not");
                    if negated {
                        self.position += 1;
                    }
                    if self.next() != Some(Token::Word("empty".to_owned())) {
                        return Err(self.error("expected empty after is"));
                    }
                    let empty = Filter::Empty(selector);
                    Ok(if negated {
                        Filter::Not(Box::new(empty))
                    } else {
                        empty
                    })
                }
                "not" => match self.next() {
                    Some(Token::Word(next)) if next == "contains" => Ok(Filter::Not(Box::new(
                        Filter::Contains(selector, self.value()?),
                    ))),
                    Some(Token::Word(next)) if next == "matches" => {
                        Err(self.error("the matches operator is not supported"))
                    }
                    _ => Err(self.error("expected contains after not")),
                },
                "matches" => Err(self.error("the matches operator is not supported")),
                other => Err(self.error(&format!("unexpected {other:?}"))),
            },
            _ => Err(self.error("expected an operator")),
        }
    }
}

impl Filter {
    pub(crate) fn parse(expression: &str) -> Result<Filter, Error> {
        let tokens = tokenize(expression)?;
        if tokens.is_empty() {
            return Err(filter_error(expression, "empty expression"));
        }
        let mut parser = Parser {
            expression,
            tokens,
            position: 0,
        };
        let filter = parser.or()?;
        if parser.position != parser.tokens.len() {
            return Err(parser.error("unexpected trailing input"));
        }
        Ok(filter)
    }

    /// Whether `item` (an element of a response) matches.
    pub(crate) fn matches(&self, item: &Value) -> bool {
        match self {
            Filter::And(a, b) => a.matches(item) && b.matches(item),
            Filter::Or(a, b) => a.matches(item) || b.matches(item),
            Filter::Not(inner) => !inner.matches(item),
            Filter::Equal(path, value) => resolve(item, path)
                .and_then(scalar)
                .is_some_and(|field| field == *value),
            Filter::NotEqual(path, value) => resolve(item, path)
                .and_then(scalar)
                .is_some_and(|field| field != *value),
            Filter::Contains(path, value) => match resolve(item, path) {
                Some(Value::Array(items)) => items
                    .iter()
                    .any(|item| scalar(item).as_deref() == Some(value)),
                Some(Value::String(text)) => text.contains(value.as_str()),
                Some(Value::Object(map)) => map.contains_key(value),
                _ => false,
            },
            Filter::Empty(path) => match resolve(item, path) {
                None | Some(Value::Null) => true,
                Some(Value::String(text)) => text.is_empty(),
                Some(Value::Array(items)) => items.is_empty(),
                Some(Value::Object(map)) => map.is_empty(),
                Some(_) => false,
            },
        }
    }
}

fn resolve<'a>(item: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(item, |value, part| value.get(part))
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// The request's `?filter=`, parsed (a malformed one is a 400).
pub(crate) fn filter_param(query: &QueryParams) -> Result<Option<Filter>, Error> {
    match query.get("filter") {
        None | Some("") => Ok(None),
        Some(expression) => Filter::parse(expression).map(Some),
    }
}

/// Keeps the items `filter` matches.
pub(crate) fn apply_filter(filter: Option<&Filter>, items: &mut Vec<Value>) {
    if let Some(filter) = filter {
        items.retain(|item| filter.matches(item));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(expression: &str, item: &Value) -> bool {
        Filter::parse(expression).unwrap().matches(item)
    }

    #[test]
    fn filters_evaluate_like_bexpr() {
        let item = json!({
            "ServiceID": "foo:1",
            "Port": 80,
            "Service": {"Tags": ["tag:foo:1"], "Meta": {"v": "1"}, "Address": ""},
            "Node": {"Node": "n1"},
        });
        assert!(check(r#""tag:foo:1" in Service.Tags"#, &item));
        assert!(!check(r#""tag:nope" in Service.Tags"#, &item));
        assert!(check(r#""tag:nope" not in Service.Tags"#, &item));
        assert!(check(r#"ServiceID == "foo:1""#, &item));
        assert!(check("Node.Node != `` ", &item));
        assert!(check("Port == 80 and Service.Meta.v == `1`", &item));
        assert!(check("Service.Address is empty", &item));
        assert!(check("Service.Tags is not empty", &item));
        assert!(check("Service.Meta contains v", &item));
        assert!(check(r#"not (ServiceID == "x" or Port != 80)"#, &item));
        assert!(!check(r#"Missing.Field == "x""#, &item));
        assert!(check("Missing.Field is empty", &item));
    }

    #[test]
    fn malformed_filters_are_refused() {
        for bad in [
            "",
            "ServiceID ==",
            r#"ServiceID = "x""#,
            r#"ServiceID == "x"#,
            r#"(ServiceID == "x""#,
            r#"ServiceID matches "x.*""#,
            r#"ServiceID == "x" extra"#,
            "Service..Tags is empty",
        ] {
            assert!(Filter::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn repeated_query_filters_are_all_kept() {
        let query = QueryParams::from_pairs([
            ("node-meta", "rack:r1"),
            ("node-meta", "zone:a:b"),
            ("tag", "x"),
            ("tag", "y"),
        ]);
        assert_eq!(
            node_meta_filter(&query).unwrap(),
            vec![
                ("rack".to_owned(), "r1".to_owned()),
                ("zone".to_owned(), "a:b".to_owned())
            ]
        );
        assert_eq!(tag_filter(&query), vec!["x", "y"]);
        let bad = QueryParams::from_pairs([("node-meta", "novalue")]);
        assert!(node_meta_filter(&bad).is_err());
    }
}
