//! What a read's query keeps: `?filter=` (Consul's go-bexpr, through the `bexpr` crate,
//! evaluated over the JSON shape each endpoint returns), `?node-meta=key:value` and `?tag=`.
//!
//! Where it sits: the catalog, health and agent handlers parse these from their
//! [`QueryParams`] and apply them to what they read; pure, no I/O.
//!
//! Invariants: a malformed filter is a 400 in go-bexpr's words inside Consul's
//! (`Failed to create boolean expression evaluator: <go-bexpr's text> in filter "<expr>"`),
//! never an empty answer; so is a filter that does not fit the items (an unknown selector, a
//! value the field's kind cannot take), which Consul refuses when it builds the filter;
//! repeated `?node-meta=` and `?tag=` must all match.
//!
//! How the JSON stands for Consul's Go types (`LAYOUT`): a selector through an array of
//! structs applies to every element, any one matching (`Checks.Status == "critical"`); the
//! objects that are Go maps, or structs rendered with omitempty fields (a check's
//! `Definition`, a service's `Proxy.MeshGateway`), read a missing last key as "not present"
//! rather than as an unknown field.

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

/// The objects of the filtered shapes (`views.rs`, the agent's service) whose keys may be
/// absent: Go maps (`Meta`, `TaggedAddresses`, ...) and structs Consul renders with omitempty
/// fields. One list serves every endpoint; paths through arrays have no index segment.
const MAY_LACK_KEYS: &[&str] = &[
    "Meta",
    "NodeMeta",
    "ServiceMeta",
    "TaggedAddresses",
    "Node.Meta",
    "Node.TaggedAddresses",
    "Service.Meta",
    "Service.TaggedAddresses",
    "Definition",
    "Definition.Header",
    "Checks.Definition",
    "Checks.Definition.Header",
    "Connect",
    "Proxy.MeshGateway",
    "Proxy.Expose",
    "Service.Connect",
    "Service.Proxy.MeshGateway",
    "Service.Proxy.Expose",
    "ServiceConnect",
    "ServiceProxy.MeshGateway",
    "ServiceProxy.Expose",
];

/// How the registry's JSON shapes stand for Consul's Go types.
const LAYOUT: bexpr::Layout<'static> = bexpr::Layout {
    map_fields: MAY_LACK_KEYS,
    any_element: true,
};

/// A parsed `?filter=` expression (go-bexpr's language: `==`, `!=`, `in`, `not in`,
/// `contains`, `not contains`, `matches`, `not matches`, `is empty`, `is not empty`, `and`,
/// `or`, `not`, parentheses), with its text for error messages.
#[derive(Debug, Clone)]
pub(crate) struct Filter {
    expression: String,
    compiled: bexpr::Filter,
}

impl Filter {
    pub(crate) fn parse(expression: &str) -> Result<Filter, Error> {
        match bexpr::Filter::parse(expression) {
            Ok(compiled) => Ok(Filter {
                expression: expression.to_owned(),
                compiled,
            }),
            Err(err) => Err(filter_error(expression, &err)),
        }
    }

    /// Whether `item` (an element of a response) matches.
    pub(crate) fn matches(&self, item: &Value) -> Result<bool, Error> {
        self.compiled
            .matches_in(item, &LAYOUT)
            .map_err(|err| filter_error(&self.expression, &err))
    }
}

fn filter_error(expression: &str, err: &bexpr::FilterError) -> Error {
    Error::BadRequest(format!(
        "Failed to create boolean expression evaluator: {err} in filter {expression:?}"
    ))
}

/// The request's `?filter=`, parsed (a malformed one is a 400).
pub(crate) fn filter_param(query: &QueryParams) -> Result<Option<Filter>, Error> {
    match query.get("filter") {
        None | Some("") => Ok(None),
        Some(expression) => Filter::parse(expression).map(Some),
    }
}

/// Keeps the items `filter` matches (a filter that does not fit them is a 400).
pub(crate) fn apply_filter(filter: Option<&Filter>, items: &mut Vec<Value>) -> Result<(), Error> {
    let Some(filter) = filter else {
        return Ok(());
    };
    let mut kept = Vec::with_capacity(items.len());
    for item in items.drain(..) {
        if filter.matches(&item)? {
            kept.push(item);
        }
    }
    *items = kept;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(expression: &str, item: &Value) -> bool {
        Filter::parse(expression).unwrap().matches(item).unwrap()
    }

    fn refusal(expression: &str, item: &Value) -> String {
        match Filter::parse(expression).and_then(|filter| filter.matches(item)) {
            Err(Error::BadRequest(message)) => message,
            other => panic!("{expression:?}: {other:?}"),
        }
    }

    fn entry() -> Value {
        json!({
            "ServiceID": "foo:1",
            "Port": 80,
            "Service": {"Tags": ["tag:foo:1"], "Meta": {"v": "1"}, "Address": ""},
            "Node": {"Node": "n1"},
            "Checks": [
                {"CheckID": "serfHealth", "Status": "passing", "Definition": {}},
                {"CheckID": "service:foo:1", "Status": "critical",
                 "Definition": {"TTL": "10s"}},
            ],
        })
    }

    #[test]
    fn filters_evaluate_like_bexpr() {
        let item = entry();
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
        assert!(!check(r#"Service.Meta.missing == "x""#, &item));
        assert!(check("Service.Meta.missing is empty", &item));
    }

    #[test]
    fn matches_takes_a_regular_expression() {
        // Consul's go-bexpr has `matches` and `not matches`.
        let item = entry();
        assert!(check(
            r#"ServiceID matches "x.*" or ServiceID matches "^foo:""#,
            &item
        ));
        assert!(check(r#"ServiceID not matches "^bar""#, &item));
        assert!(!check(r#"ServiceID matches "^1""#, &item));
    }

    #[test]
    fn a_selector_through_checks_matches_any_check() {
        let item = entry();
        assert!(check(r#"Checks.Status == "critical""#, &item));
        assert!(!check(r#"Checks.Status == "warning""#, &item));
        assert!(check(r#"Checks.Status != "passing""#, &item));
        assert!(check(r#"Checks.Definition.TTL == "10s""#, &item));
        assert!(!check(r#"Checks.Definition.HTTP == "x""#, &item));
    }

    #[test]
    fn unknown_selectors_are_refused() {
        // Consul checks selectors against the endpoint's type and refuses unknown ones
        // (this registry used to answer "matches nothing" and "is empty").
        let item = entry();
        assert_eq!(
            refusal(r#"Missing.Field == "x""#, &item),
            "Failed to create boolean expression evaluator: /Missing/Field at part 0: couldn't \
             find key: struct field with name \"Missing\" in filter \"Missing.Field == \\\"x\\\"\""
        );
        refusal("Missing.Field is empty", &item);
        refusal("Port == high", &item);
    }

    #[test]
    fn malformed_filters_are_refused() {
        for bad in [
            "",
            "ServiceID ==",
            r#"ServiceID = "x""#,
            r#"ServiceID == "x"#,
            r#"(ServiceID == "x""#,
            r#"ServiceID matches "(""#,
            r#"ServiceID == "x" extra"#,
            "Service..Tags is empty",
        ] {
            assert!(Filter::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            refusal(r#"ServiceID == "x"#, &entry()),
            "Failed to create boolean expression evaluator: 1:16 (15): rule \"string\": \
             Unterminated string literal in filter \"ServiceID == \\\"x\""
        );
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
