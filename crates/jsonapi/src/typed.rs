//! Typed documents: list documents whose resources are the caller's own `Serialize` structs,
//! written straight to bytes ([`ListDocument::to_json`]) instead of being built as
//! [`Resource`](crate::Resource)'s `serde_json::Value` maps first.
//!
//! Where it sits: the platform renders its hot lists (the organization membership page)
//! through these; every other answer still goes through [`Document`](crate::Document). A typed
//! resource must serialize to the same JSON value as its `Resource` twin (the platform tests
//! each pair), so a client cannot tell which path rendered it.
//!
//! Invariants: [`ListDocument`] has the shape of a list [`Document`](crate::Document): `data`
//! is always an array, `included` is omitted when empty, `links` are the paging links
//! ([`PageLinks`], `prev`/`next` `null` at the ends) and `meta` carries `pagination` next to
//! the caller's own members.

use serde::{Serialize, Serializer};

use crate::{Pagination, Resource};

/// `{"id": ..., "type": ...}` over borrowed strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IdentifierRef<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'a str,
}

impl<'a> IdentifierRef<'a> {
    pub fn new(kind: &'a str, id: &'a str) -> IdentifierRef<'a> {
        IdentifierRef { id, kind }
    }
}

/// `{"data": {"id", "type"}}`: a to-one relationship over borrowed strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ToOne<'a> {
    pub data: IdentifierRef<'a>,
}

impl<'a> ToOne<'a> {
    pub fn new(kind: &'a str, id: &'a str) -> ToOne<'a> {
        ToOne {
            data: IdentifierRef::new(kind, id),
        }
    }
}

/// `{"data": [{"id", "type"}, ...]}`: a to-many relationship of one resource type, written
/// from the ids as they are (no identifier is built per id).
#[derive(Debug)]
pub struct ToMany<'a, S> {
    pub kind: &'a str,
    pub ids: &'a [S],
}

impl<'a, S: AsRef<str>> ToMany<'a, S> {
    pub fn new(kind: &'a str, ids: &'a [S]) -> ToMany<'a, S> {
        ToMany { kind, ids }
    }
}

impl<S: AsRef<str>> Serialize for ToMany<'_, S> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        use serde::ser::SerializeStruct;
        let mut relationship = serializer.serialize_struct("Relationship", 1)?;
        relationship.serialize_field("data", &Identifiers(self.kind, self.ids))?;
        relationship.end()
    }
}

/// The identifiers of a [`ToMany`], serialized as an array.
struct Identifiers<'a, S>(&'a str, &'a [S]);

impl<S: AsRef<str>> Serialize for Identifiers<'_, S> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        serializer.collect_seq(
            self.1
                .iter()
                .map(|id| IdentifierRef::new(self.0, id.as_ref())),
        )
    }
}

/// `{"self": ...}`: a resource's links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SelfLink {
    #[serde(rename = "self")]
    pub this: String,
}

/// A list document's `links`: `self`, `first`, `prev`, `next` and `last`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PageLinks {
    #[serde(rename = "self")]
    pub this: String,
    pub first: String,
    pub prev: Option<String>,
    pub next: Option<String>,
    pub last: String,
}

/// A list document's `meta`: `pagination` and the caller's own members `M` (flattened; `()`
/// for none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListMeta<M> {
    pub pagination: Pagination,
    #[serde(flatten)]
    pub extra: M,
}

/// A list document of typed resources `R`.
#[derive(Debug, Clone, Serialize)]
pub struct ListDocument<'a, R, M> {
    pub data: &'a [R],
    #[serde(skip_serializing_if = "no_resources")]
    pub included: &'a [Resource],
    pub links: PageLinks,
    pub meta: ListMeta<M>,
}

fn no_resources(resources: &&[Resource]) -> bool {
    resources.is_empty()
}

impl<R: Serialize, M: Serialize> ListDocument<'_, R, M> {
    /// Serializes the document; plain data cannot fail to serialize (a failure answers the
    /// same error document as [`Document::to_json`](crate::Document::to_json)).
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + 512 * self.data.len());
        match serde_json::to_writer(&mut out, self) {
            Ok(()) => out,
            Err(_) => br#"{"errors":[{"status":"500","title":"internal error"}]}"#.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::{Document, Page, Relationship};

    #[derive(Serialize)]
    struct Thing<'a> {
        id: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
        attributes: ThingAttributes<'a>,
        relationships: ThingRelationships<'a>,
        links: SelfLink,
    }

    #[derive(Serialize)]
    struct ThingAttributes<'a> {
        name: &'a str,
    }

    #[derive(Serialize)]
    struct ThingRelationships<'a> {
        owner: ToOne<'a>,
        parts: ToMany<'a, String>,
    }

    fn as_value(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn list_document_matches_the_value_document() {
        let parts = vec!["p-1".to_owned(), "p-2".to_owned()];
        let thing = Thing {
            id: "t-1",
            kind: "things",
            attributes: ThingAttributes { name: "one" },
            relationships: ThingRelationships {
                owner: ToOne::new("users", "u-1"),
                parts: ToMany::new("parts", &parts),
            },
            links: SelfLink {
                this: "/api/v2/things/t-1".to_owned(),
            },
        };
        let page = Page { number: 1, size: 1 };
        let extra = vec![("q".to_owned(), "o".to_owned())];
        let typed = ListDocument {
            data: &[thing],
            included: &[],
            links: page.page_links("/api/v2/things", &extra, 2),
            meta: ListMeta {
                pagination: page.meta(2),
                extra: json!({"status-counts": {"total": 2}}),
            },
        };
        let resource = Resource::new("things", "t-1")
            .attribute("name", "one")
            .relationship("owner", Relationship::one("users", "u-1"))
            .relationship("parts", Relationship::many("parts", parts.iter().cloned()))
            .self_link("/api/v2/things/t-1");
        let mut document = Document::many(vec![resource])
            .with_meta("pagination", page.meta(2))
            .with_meta("status-counts", json!({"total": 2}));
        document.links = page.links("/api/v2/things", &extra, 2);
        assert_eq!(as_value(&typed.to_json()), as_value(&document.to_json()));
        assert_eq!(as_value(&typed.to_json())["links"]["prev"], Value::Null);
    }

    #[test]
    fn list_document_keeps_included_and_empty_data() {
        let included = [Resource::new("users", "u-1")];
        let typed: ListDocument<'_, Value, ()> = ListDocument {
            data: &[],
            included: &included,
            links: Page::default().page_links("/x", &[], 0),
            meta: ListMeta {
                pagination: Page::default().meta(0),
                extra: (),
            },
        };
        let value = as_value(&typed.to_json());
        assert_eq!(value["data"], json!([]));
        assert_eq!(value["included"][0]["id"], "u-1");
        assert_eq!(value["meta"]["pagination"]["total-count"], 0);
    }
}
