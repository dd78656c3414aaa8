//! `/v1/health/*` endpoints: the health checks of the catalog, by node, by service, by state,
//! and the instances of a service with their node and checks.
//!
//! Where it sits: reads only, over the records of `store/catalog.rs`; checks are written by
//! `catalog.rs` (catalog and agent endpoints) and `tasks/check_runner.rs`.
//!
//! Invariants: every read is a blocking query whose index is the last change to what it reads
//! (a node's checks, all checks, or the whole catalog for service entries); lists drop what
//! the token may not read and then say so with the filtered-results header; results are never
//! `null` (an empty list is `[]`).

use std::collections::BTreeMap;

use axum::extract::{Path, State as AxumState};
use http_kit::Shutdown;
use serde_json::{Value, json};

use crate::acl::{Access, Authz, Resource};
use crate::catalog::{
    check_json, node_json, node_matches_meta, node_meta_filter, service_has_tags,
    service_instances, service_json, tag_filter,
};
use crate::meta::{Indexed, QueryParams};
use crate::store::catalog::{
    CheckRecord, CheckStatus, Stored, catalog_range, checks_range, node_checks_range, scan_records,
    valid_key_part,
};
use crate::{Error, State};

pub(crate) async fn read_unnamed_node() -> Error {
    Error::BadRequest("Missing node name".to_owned())
}

pub(crate) async fn read_unnamed_service() -> Error {
    Error::BadRequest("Missing service name".to_owned())
}

/// Whether the token may read a check: node:read on its node, and service:read on its service
/// when it has one.
fn may_read(authz: &Authz, check: &CheckRecord) -> bool {
    authz.allows(Resource::Node, &check.node, Access::Read)
        && (check.service_id.is_empty()
            || authz.allows(Resource::Service, &check.service_name, Access::Read))
}

/// Checks that pass `keep`, ACL-filtered, as JSON; and whether the ACL dropped any.
fn filter_checks(
    authz: &Authz,
    checks: &[Stored<CheckRecord>],
    keep: impl Fn(&CheckRecord) -> bool,
) -> (Vec<Value>, bool) {
    let mut filtered = false;
    let mut out = Vec::new();
    for check in checks.iter().filter(|check| keep(&check.record)) {
        if may_read(authz, &check.record) {
            out.push(check_json(check));
        } else {
            filtered = true;
        }
    }
    (out, filtered)
}

/// `GET /v1/health/node/:node`: the checks of a node (`[]` when unknown). Blocking.
pub(crate) async fn list_node_checks(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Shutdown(shutdown): Shutdown,
    Path(node): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    let options = query.options(&state)?;
    let filter = filter_param(&query)?;
    let range = if valid_key_part(&node) {
        node_checks_range(&node)
    } else {
        checks_range()
    };
    let ((checks, filtered), index) = http_kit::blocking::block(
        state.storage(),
        range.clone(),
        &options.blocking,
        Some(&shutdown),
        || async {
            let storage = state.storage();
            let index = storage.range_revision(range.clone()).await?;
            if !valid_key_part(&node) {
                return Ok::<_, Error>(((Vec::new(), false), index));
            }
            let checks: Vec<Stored<CheckRecord>> = scan_records(storage, range.clone()).await?;
            let (mut out, filtered) = filter_checks(&authz, &checks, |_| true);
            apply_filter(filter.as_ref(), &mut out);
            Ok(((out, filtered), index))
        },
    )
    .await?;
    Ok(Indexed::new(index, checks).filtered(filtered))
}

/// `GET /v1/health/checks/:service`: the checks of every instance of a service. Blocking.
pub(crate) async fn list_service_checks(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Shutdown(shutdown): Shutdown,
    Path(service): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    let options = query.options(&state)?;
    let filter = filter_param(&query)?;
    let ((checks, filtered), index) = http_kit::blocking::block(
        state.storage(),
        checks_range(),
        &options.blocking,
        Some(&shutdown),
        || async {
            let storage = state.storage();
            let index = storage.range_revision(checks_range()).await?;
            let checks: Vec<Stored<CheckRecord>> = scan_records(storage, checks_range()).await?;
            let keep =
                |check: &CheckRecord| !check.service_id.is_empty() && check.service_name == service;
            let (mut out, filtered) = filter_checks(&authz, &checks, keep);
            apply_filter(filter.as_ref(), &mut out);
            Ok::<_, Error>(((out, filtered), index))
        },
    )
    .await?;
    Ok(Indexed::new(index, checks).filtered(filtered))
}

/// `GET /v1/health/state/:state`: every check in a state (`any`, `passing`, `warning`,
/// `critical`). Blocking.
pub(crate) async fn list_checks_in_state(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Shutdown(shutdown): Shutdown,
    Path(wanted): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    let wanted = match wanted.as_str() {
        "any" => None,
        other => Some(
            CheckStatus::parse(other)
                .filter(|_| other == other.to_lowercase())
                .ok_or_else(|| Error::BadRequest(format!("Invalid check state {other:?}")))?,
        ),
    };
    let options = query.options(&state)?;
    let filter = filter_param(&query)?;
    let ((checks, filtered), index) = http_kit::blocking::block(
        state.storage(),
        checks_range(),
        &options.blocking,
        Some(&shutdown),
        || async {
            let storage = state.storage();
            let index = storage.range_revision(checks_range()).await?;
            let checks: Vec<Stored<CheckRecord>> = scan_records(storage, checks_range()).await?;
            let keep = |check: &CheckRecord| wanted.is_none_or(|status| check.status == status);
            let (mut out, filtered) = filter_checks(&authz, &checks, keep);
            apply_filter(filter.as_ref(), &mut out);
            Ok::<_, Error>(((out, filtered), index))
        },
    )
    .await?;
    Ok(Indexed::new(index, checks).filtered(filtered))
}

/// `GET /v1/health/service/:service`: each instance of a service with its node and the checks
/// that apply to it (the node's own checks and the instance's), filtered by `?passing` (only
/// instances whose every check passes), `?tag=`, `?node-meta=` and `?peer=` (no peers exist,
/// so any peer matches nothing). Blocking.
pub(crate) async fn list_service_entries(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Shutdown(shutdown): Shutdown,
    Path(service): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    let options = query.options(&state)?;
    let passing_only = match query.get("passing") {
        None => false,
        Some("") => true,
        Some(raw) => http_kit::parse_bool(raw)
            .ok_or_else(|| Error::BadRequest(format!("Invalid value for ?passing: {raw:?}")))?,
    };
    let tags = tag_filter(&query);
    let meta_filter = node_meta_filter(&query)?;
    let peered = query.get("peer").is_some_and(|peer| !peer.is_empty());
    let filter = filter_param(&query)?;
    let ((entries, filtered), index) = http_kit::blocking::block(
        state.storage(),
        catalog_range(),
        &options.blocking,
        Some(&shutdown),
        || async {
            let storage = state.storage();
            let checks_index = storage.range_revision(checks_range()).await?;
            let instances = service_instances(storage, &service).await?;
            let index = instances.index.max(checks_index);
            if peered {
                return Ok::<_, Error>(((Vec::new(), false), index));
            }
            let checks: Vec<Stored<CheckRecord>> = scan_records(storage, checks_range()).await?;
            let mut by_node: BTreeMap<&str, Vec<&Stored<CheckRecord>>> = BTreeMap::new();
            for check in &checks {
                by_node.entry(&check.record.node).or_default().push(check);
            }
            let mut filtered = false;
            let mut out = Vec::new();
            for (node, svc) in &instances.items {
                if !authz.allows(Resource::Node, &node.record.node, Access::Read)
                    || !authz.allows(Resource::Service, &svc.record.service, Access::Read)
                {
                    filtered = true;
                    continue;
                }
                if !service_has_tags(&svc.record, &tags)
                    || !node_matches_meta(&node.record, &meta_filter)
                {
                    continue;
                }
                let own: Vec<&Stored<CheckRecord>> = by_node
                    .get(node.record.node.as_str())
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|check| {
                        check.record.service_id.is_empty()
                            || check.record.service_id == svc.record.id
                    })
                    .collect();
                if passing_only
                    && own
                        .iter()
                        .any(|check| check.record.status != CheckStatus::Passing)
                {
                    continue;
                }
                out.push(json!({
                    "Node": node_json(node),
                    "Service": service_json(svc),
                    "Checks": own.into_iter().map(check_json).collect::<Vec<_>>(),
                }));
            }
            apply_filter(filter.as_ref(), &mut out);
            Ok(((out, filtered), index))
        },
    )
    .await?;
    Ok(Indexed::new(index, entries).filtered(filtered))
}

/// `GET /v1/health/connect/:service` and `/v1/health/ingress/:service`: this server has no
/// service mesh, so no service is connect-capable or behind an ingress gateway: always `[]`.
pub(crate) async fn list_connect_entries(
    AxumState(state): AxumState<State>,
    Path(_service): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<Value>>, Error> {
    query.options(&state)?;
    let index = state.storage().range_revision(catalog_range()).await?;
    Ok(Indexed::new(index, Vec::new()))
}

// ---------------------------------------------------------------------------------------------
// `?filter=`: a subset of go-bexpr, evaluated over the JSON shape each endpoint returns.

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
}
