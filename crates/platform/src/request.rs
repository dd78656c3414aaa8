//! Reading requests: [`Body`] (a JSON:API request document with pointer-aware accessors; and
//! [`OptionalBody`] where the body may be empty) and
//! [`Query`] (query parameters, bracketed keys percent-encoded or not, with paging, `include`
//! and `filter[...]` helpers), and the JSON:API content-type rule ([`refuse_content_type`],
//! applied by the platform's admission hook in `rate_limit.rs`).
//!
//! Where it sits: in handler signatures after the state, [`Caller`](crate::auth::Caller) and
//! path extractors. Handlers never use bare `axum::Json`/`Query`, so every failure is a
//! JSON:API error document.
//!
//! Invariants:
//! - A body that is not JSON is a 422; one that is JSON but not an object with a `data` member
//!   of the right shape is a 422 pointing at the member (`/data`, `/data/attributes/name`);
//!   a wrongly typed attribute is a 422 pointing at it; unknown attributes are ignored.
//! - An attribute is looked up under its kebab-case name, then its snake_case twin (pytfe
//!   sends snake_case for some resources; docs/design.md §D2); `null` reads as absent.
//! - Query keys are percent-decoded before lookup, so `page%5Bsize%5D` and `page[size]` are the
//!   same key; a repeated key's last value wins.

use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Request};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderValue, Method, header};
use jsonapi::{Identifier, Page};
use serde_json::{Map, Value};

use crate::Error;

/// A JSON:API request document.
#[derive(Debug, Clone)]
pub(crate) struct Body {
    root: Value,
}

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = Error;

    async fn from_request(request: Request, state: &S) -> Result<Body, Error> {
        let http_kit::ApiJson { value, .. } =
            http_kit::ApiJson::<Value, Error>::from_request(request, state).await?;
        Body::from_value(value)
    }
}

/// A JSON:API request document that may be absent: an empty body (or `null`) is `None`
/// (go-tfe posts some token requests without a body).
#[derive(Debug, Clone)]
pub(crate) struct OptionalBody(pub(crate) Option<Body>);

impl<S: Send + Sync> FromRequest<S> for OptionalBody {
    type Rejection = Error;

    async fn from_request(request: Request, state: &S) -> Result<OptionalBody, Error> {
        let http_kit::ApiJson { value, .. } =
            http_kit::ApiJson::<Value, Error>::from_request(request, state).await?;
        if value.is_null() {
            return Ok(OptionalBody(None));
        }
        Body::from_value(value).map(|body| OptionalBody(Some(body)))
    }
}

impl Body {
    /// Wraps a parsed document; anything but an object is a 422 at `/`.
    pub(crate) fn from_value(root: Value) -> Result<Body, Error> {
        if !root.is_object() {
            return Err(Error::invalid(
                "/",
                "the request body must be a JSON:API document (an object with `data`)",
            ));
        }
        Ok(Body { root })
    }

    /// Whether the document has a non-null `data` member.
    pub(crate) fn has_data(&self) -> bool {
        self.root.get("data").is_some_and(|data| !data.is_null())
    }

    /// The `data` member as an object (a 422 at `/data` when missing or not an object).
    pub(crate) fn data(&self) -> Result<&Map<String, Value>, Error> {
        match self.root.get("data") {
            Some(Value::Object(data)) => Ok(data),
            Some(_) => Err(Error::invalid("/data", "data must be an object")),
            None => Err(Error::invalid("/data", "data is required")),
        }
    }

    /// Checks `data.type` against the accepted names when present (a missing type is
    /// tolerated; TFE clients always send one).
    pub(crate) fn expect_type(&self, accepted: &[&str]) -> Result<(), Error> {
        match self.data()?.get("type") {
            None | Some(Value::Null) => Ok(()),
            Some(Value::String(kind)) if accepted.contains(&kind.as_str()) => Ok(()),
            Some(_) => Err(Error::invalid(
                "/data/type",
                format!(
                    "data.type must be {:?}",
                    accepted.first().copied().unwrap_or_default()
                ),
            )),
        }
    }

    /// `data.attributes` (empty when missing; a 422 when not an object).
    pub(crate) fn attributes(&self) -> Result<Option<&Map<String, Value>>, Error> {
        match self.data()?.get("attributes") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(attributes)) => Ok(Some(attributes)),
            Some(_) => Err(Error::invalid(
                "/data/attributes",
                "attributes must be an object",
            )),
        }
    }

    /// The raw value of attribute `name` (kebab-case, or its snake_case twin); `null` is absent.
    pub(crate) fn attribute(&self, name: &str) -> Result<Option<&Value>, Error> {
        let Some(attributes) = self.attributes()? else {
            return Ok(None);
        };
        let value = attributes
            .get(name)
            .or_else(|| attributes.get(&name.replace('-', "_")));
        Ok(value.filter(|value| !value.is_null()))
    }

    /// Whether attribute `name` was sent at all, `null` included.
    pub(crate) fn has_attribute(&self, name: &str) -> Result<bool, Error> {
        Ok(self.attributes()?.is_some_and(|attributes| {
            attributes.contains_key(name) || attributes.contains_key(&name.replace('-', "_"))
        }))
    }

    pub(crate) fn string(&self, name: &str) -> Result<Option<String>, Error> {
        match self.attribute(name)? {
            None => Ok(None),
            Some(Value::String(value)) => Ok(Some(value.clone())),
            Some(_) => Err(Error::invalid_attribute(
                name,
                format!("{name} must be a string"),
            )),
        }
    }

    /// A string attribute that must be present and not blank.
    pub(crate) fn required_string(&self, name: &str) -> Result<String, Error> {
        match self.string(name)? {
            Some(value) if !value.trim().is_empty() => Ok(value),
            _ => Err(Error::invalid_attribute(
                name,
                format!("{name} can't be blank"),
            )),
        }
    }

    pub(crate) fn bool(&self, name: &str) -> Result<Option<bool>, Error> {
        match self.attribute(name)? {
            None => Ok(None),
            Some(Value::Bool(value)) => Ok(Some(*value)),
            Some(_) => Err(Error::invalid_attribute(
                name,
                format!("{name} must be a boolean"),
            )),
        }
    }

    pub(crate) fn integer(&self, name: &str) -> Result<Option<i64>, Error> {
        match self.attribute(name)? {
            None => Ok(None),
            Some(Value::Number(number)) => number.as_i64().map(Some).ok_or_else(|| {
                Error::invalid_attribute(name, format!("{name} must be an integer"))
            }),
            Some(_) => Err(Error::invalid_attribute(
                name,
                format!("{name} must be an integer"),
            )),
        }
    }

    pub(crate) fn object(&self, name: &str) -> Result<Option<&Map<String, Value>>, Error> {
        match self.attribute(name)? {
            None => Ok(None),
            Some(Value::Object(value)) => Ok(Some(value)),
            Some(_) => Err(Error::invalid_attribute(
                name,
                format!("{name} must be an object"),
            )),
        }
    }

    /// The identifiers of to-many relationship `name` (`None` when the relationship is absent).
    pub(crate) fn relationship_ids(&self, name: &str) -> Result<Option<Vec<Identifier>>, Error> {
        let pointer = format!("/data/relationships/{name}/data");
        let relationships = match self.data()?.get("relationships") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(relationships)) => relationships,
            Some(_) => {
                return Err(Error::invalid(
                    "/data/relationships",
                    "relationships must be an object",
                ));
            }
        };
        let Some(relationship) = relationships.get(name).filter(|r| !r.is_null()) else {
            return Ok(None);
        };
        match relationship.get("data") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => identifiers(items, &pointer).map(Some),
            Some(_) => Err(Error::invalid(
                pointer,
                format!("{name} data must be an array"),
            )),
        }
    }

    /// The identifier of to-one relationship `name` (`None` when absent or `null`).
    pub(crate) fn relationship_id(&self, name: &str) -> Result<Option<Identifier>, Error> {
        let pointer = format!("/data/relationships/{name}/data");
        let Some(Value::Object(relationships)) = self.data()?.get("relationships") else {
            return Ok(None);
        };
        match relationships.get(name).and_then(|r| r.get("data")) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => identifier(value, &pointer).map(Some),
        }
    }

    /// A relationship document's `data` array (`POST /teams/:id/relationships/users`).
    pub(crate) fn linkage_ids(&self) -> Result<Vec<Identifier>, Error> {
        match self.root.get("data") {
            Some(Value::Array(items)) => identifiers(items, "/data"),
            Some(_) => Err(Error::invalid("/data", "data must be an array")),
            None => Err(Error::invalid("/data", "data is required")),
        }
    }
}

fn identifiers(items: &[Value], pointer: &str) -> Result<Vec<Identifier>, Error> {
    items
        .iter()
        .enumerate()
        .map(|(index, item)| identifier(item, &format!("{pointer}/{index}")))
        .collect()
}

fn identifier(value: &Value, pointer: &str) -> Result<Identifier, Error> {
    let field = |name: &str| match value.get(name) {
        Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
        _ => Err(Error::invalid(
            format!("{pointer}/{name}"),
            format!("{name} must be a non-empty string"),
        )),
    };
    if !value.is_object() {
        return Err(Error::invalid(
            pointer,
            "must be an object with id and type",
        ));
    }
    Ok(Identifier::new(field("type")?, field("id")?))
}

/// The decoded query parameters of a request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    pairs: Vec<(String, String)>,
}

impl<S: Send + Sync> FromRequestParts<S> for Query {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Query, Error> {
        Query::parse(parts.uri.query().unwrap_or_default())
    }
}

impl Query {
    /// Parses a raw query string (`a=1&page%5Bsize%5D=2`).
    pub(crate) fn parse(raw: &str) -> Result<Query, Error> {
        serde_urlencoded::from_str::<Vec<(String, String)>>(raw)
            .map(|pairs| Query { pairs })
            .map_err(|err| Error::BadRequest {
                parameter: None,
                detail: format!("invalid query string: {err}"),
            })
    }

    /// The last value of `key` (decoded, e.g. `page[number]`).
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `filter[<name>]`, when present and not empty.
    pub(crate) fn filter(&self, name: &str) -> Option<&str> {
        self.get(&format!("filter[{name}]"))
            .filter(|value| !value.is_empty())
    }

    /// Every decoded `(key, value)`, for paging links.
    pub(crate) fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// `page[number]` and `page[size]` (400 naming the parameter when not a number).
    pub(crate) fn page(&self, default_size: u64) -> Result<Page, Error> {
        Page::parse(
            self.get("page[number]"),
            self.get("page[size]"),
            default_size,
        )
        .map_err(|err| Error::bad_parameter(err.parameter, err.to_string()))
    }

    /// The comma-separated `include` names, each checked against `allowed` (a 400 naming
    /// `include` otherwise, as TFE: "Invalid include parameter"). `aliases` maps extra
    /// spellings to canonical names (`ingress-attributes` → `ingress_attributes`).
    pub(crate) fn includes(
        &self,
        allowed: &[&str],
        aliases: &[(&str, &str)],
    ) -> Result<Vec<String>, Error> {
        let Some(raw) = self.get("include") else {
            return Ok(Vec::new());
        };
        let mut names: Vec<String> = Vec::new();
        for name in raw
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            let canonical = aliases
                .iter()
                .find(|(alias, _)| *alias == name)
                .map_or(name, |(_, canonical)| canonical);
            if !allowed.contains(&canonical) {
                return Err(Error::bad_parameter(
                    "include",
                    format!("Invalid include parameter: {name}"),
                ));
            }
            if !names.iter().any(|n| n == canonical) {
                names.push(canonical.to_owned());
            }
        }
        Ok(names)
    }
}

/// The 415 for a POST, PATCH or DELETE to a JSON:API route (every route under `/api/v2/`:
/// the upload, download and module registry protocol routes are elsewhere) whose
/// `Content-Type` is not `application/vnd.api+json` (parameters such as `charset` are
/// allowed). Run by the platform's admission hook (`rate_limit.rs`), inside each route, so
/// the matched route is known; unknown paths are not checked (they answer 404).
pub(crate) fn refuse_content_type(request: &Request) -> Option<Response> {
    let mutating = matches!(
        *request.method(),
        Method::POST | Method::PATCH | Method::DELETE
    );
    let jsonapi_route = request
        .extensions()
        .get::<MatchedPath>()
        .is_some_and(|route| route.as_str().starts_with("/api/v2/"));
    (mutating && jsonapi_route && !is_jsonapi(request.headers().get(header::CONTENT_TYPE)))
        .then(|| Error::UnsupportedMediaType.into_response())
}

fn is_jsonapi(value: Option<&HeaderValue>) -> bool {
    value
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(jsonapi::MEDIA_TYPE))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(value: Value) -> Body {
        Body::from_value(value).unwrap()
    }

    fn pointer(err: Error) -> Option<String> {
        match err {
            Error::Invalid { pointer, .. } => pointer,
            other => panic!("not a 422: {other:?}"),
        }
    }

    #[test]
    fn attribute_reads_kebab_then_snake_case() {
        let b = body(json!({"data": {"attributes": {"auto_queue_runs": false, "name": "x"}}}));
        assert_eq!(b.bool("auto-queue-runs").unwrap(), Some(false));
        assert_eq!(b.string("name").unwrap().as_deref(), Some("x"));
        assert_eq!(b.string("email").unwrap(), None);
    }

    #[test]
    fn wrong_type_points_at_the_attribute() {
        let b = body(json!({"data": {"attributes": {"email": 3}}}));
        assert_eq!(
            pointer(b.string("email").unwrap_err()).as_deref(),
            Some("/data/attributes/email")
        );
    }

    #[test]
    fn missing_or_wrong_data_points_at_data() {
        assert_eq!(
            pointer(body(json!({})).data().unwrap_err()).as_deref(),
            Some("/data")
        );
        assert_eq!(
            pointer(body(json!({"data": []})).data().unwrap_err()).as_deref(),
            Some("/data")
        );
        assert!(Body::from_value(json!([1])).is_err());
    }

    #[test]
    fn relationship_ids_validate_each_identifier() {
        let b = body(json!({"data": {"relationships": {"teams": {"data": [
            {"id": "team-1", "type": "teams"}, {"type": "teams"}
        ]}}}}));
        assert_eq!(
            pointer(b.relationship_ids("teams").unwrap_err()).as_deref(),
            Some("/data/relationships/teams/data/1/id")
        );
        let none = body(json!({"data": {"attributes": {}}}));
        assert_eq!(none.relationship_ids("teams").unwrap(), None);
    }

    #[test]
    fn query_decodes_bracketed_keys_either_way() {
        let encoded = Query::parse("page%5Bnumber%5D=2&page%5Bsize%5D=5").unwrap();
        let plain = Query::parse("page[number]=2&page[size]=5").unwrap();
        assert_eq!(encoded.page(20).unwrap(), plain.page(20).unwrap());
        assert_eq!(plain.page(20).unwrap(), Page { number: 2, size: 5 });
    }

    #[test]
    fn query_includes_checks_names_and_aliases() {
        let query = Query::parse("include=user,teams,user").unwrap();
        assert_eq!(
            query.includes(&["user", "teams"], &[]).unwrap(),
            ["user", "teams"]
        );
        let bad = Query::parse("include=secrets").unwrap();
        assert!(matches!(
            bad.includes(&["user"], &[]),
            Err(Error::BadRequest { .. })
        ));
        let alias = Query::parse("include=ingress-attributes").unwrap();
        assert_eq!(
            alias
                .includes(
                    &["ingress_attributes"],
                    &[("ingress-attributes", "ingress_attributes")]
                )
                .unwrap(),
            ["ingress_attributes"]
        );
    }
}
