//! JSON:API documents: [`Document`], [`Resource`], [`Relationship`] and resource identifiers.
//!
//! Where it sits: the platform crate builds these from its stored records and serializes them
//! as response bodies; request bodies are read by the platform itself (it needs JSON pointers
//! for 422s), so these types are mostly written, and read back only in tests.
//!
//! Invariants:
//! - A resource always serializes `id`, `type` and `attributes` (an object, possibly empty);
//!   `relationships` and `links` are omitted when empty.
//! - A relationship serializes `data` as `null`, an identifier or an array exactly as built;
//!   it is omitted only when the relationship carries links alone ([`Relationship::links_only`]).
//! - A list document's `data` is always an array (never `null`), `included` is omitted when
//!   empty and never holds the same `(type, id)` twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// `{"id": "...", "type": "..."}`: a pointer to a resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Identifier {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
}

impl Identifier {
    pub fn new(kind: impl Into<String>, id: impl Into<String>) -> Identifier {
        Identifier {
            id: id.into(),
            kind: kind.into(),
        }
    }
}

/// The `data` member of a relationship: `null`, one identifier, or an array of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Linkage {
    Null,
    One(Identifier),
    Many(Vec<Identifier>),
}

impl<'de> Deserialize<'de> for Linkage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Linkage, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            One(Identifier),
            Many(Vec<Identifier>),
        }
        Ok(match Option::<Raw>::deserialize(deserializer)? {
            None => Linkage::Null,
            Some(Raw::One(identifier)) => Linkage::One(identifier),
            Some(Raw::Many(identifiers)) => Linkage::Many(identifiers),
        })
    }
}

/// One relationship of a resource: `{"data": ..., "links": {"related": "..."}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relationship {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "some_linkage"
    )]
    pub data: Option<Linkage>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub links: BTreeMap<String, Value>,
}

fn some_linkage<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Linkage>, D::Error> {
    Linkage::deserialize(deserializer).map(Some)
}

impl Relationship {
    /// A to-one relationship: `{"data": {"id", "type"}}`.
    pub fn one(kind: impl Into<String>, id: impl Into<String>) -> Relationship {
        Relationship {
            data: Some(Linkage::One(Identifier::new(kind, id))),
            links: BTreeMap::new(),
        }
    }

    /// A to-one relationship that may be empty: `{"data": null}` when `id` is `None`.
    pub fn optional(kind: impl Into<String>, id: Option<impl Into<String>>) -> Relationship {
        let data = match id {
            Some(id) => Linkage::One(Identifier::new(kind, id)),
            None => Linkage::Null,
        };
        Relationship {
            data: Some(data),
            links: BTreeMap::new(),
        }
    }

    /// A to-many relationship: `{"data": [...]}` (an empty array when there are none).
    pub fn many<I, S>(kind: &str, ids: I) -> Relationship
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Relationship {
            data: Some(Linkage::Many(
                ids.into_iter()
                    .map(|id| Identifier::new(kind, id))
                    .collect(),
            )),
            links: BTreeMap::new(),
        }
    }

    /// A relationship with links and no `data` member.
    pub fn links_only() -> Relationship {
        Relationship {
            data: None,
            links: BTreeMap::new(),
        }
    }

    /// Adds `links.related`.
    pub fn related(mut self, href: impl Into<String>) -> Relationship {
        self.links
            .insert("related".to_owned(), Value::String(href.into()));
        self
    }

    /// The identifiers this relationship points at (none for `null` or links only).
    pub fn identifiers(&self) -> Vec<&Identifier> {
        match &self.data {
            Some(Linkage::One(identifier)) => vec![identifier],
            Some(Linkage::Many(identifiers)) => identifiers.iter().collect(),
            Some(Linkage::Null) | None => Vec::new(),
        }
    }
}

/// One resource object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub attributes: Map<String, Value>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub relationships: BTreeMap<String, Relationship>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub links: BTreeMap<String, Value>,
}

impl Resource {
    pub fn new(kind: impl Into<String>, id: impl Into<String>) -> Resource {
        Resource {
            id: id.into(),
            kind: kind.into(),
            attributes: Map::new(),
            relationships: BTreeMap::new(),
            links: BTreeMap::new(),
        }
    }

    /// Sets one attribute (anything serializable; a failure to serialize becomes `null`).
    pub fn attribute(mut self, name: &str, value: impl Serialize) -> Resource {
        let value = serde_json::to_value(value).unwrap_or(Value::Null);
        self.attributes.insert(name.to_owned(), value);
        self
    }

    pub fn relationship(mut self, name: &str, relationship: Relationship) -> Resource {
        self.relationships.insert(name.to_owned(), relationship);
        self
    }

    /// Sets `links.self`.
    pub fn self_link(self, href: impl Into<String>) -> Resource {
        self.link("self", href)
    }

    pub fn link(mut self, name: &str, href: impl Into<String>) -> Resource {
        self.links
            .insert(name.to_owned(), Value::String(href.into()));
        self
    }

    pub fn identifier(&self) -> Identifier {
        Identifier::new(self.kind.clone(), self.id.clone())
    }
}

/// The primary data of a document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PrimaryData {
    Many(Vec<Resource>),
    One(Box<Resource>),
}

/// A top-level document: `{"data": ..., "included": [...], "links": {...}, "meta": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub data: PrimaryData,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub included: Vec<Resource>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub links: BTreeMap<String, Value>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub meta: Map<String, Value>,
}

impl Document {
    /// A document whose primary data is one resource.
    pub fn one(resource: Resource) -> Document {
        Document {
            data: PrimaryData::One(Box::new(resource)),
            included: Vec::new(),
            links: BTreeMap::new(),
            meta: Map::new(),
        }
    }

    /// A document whose primary data is a (possibly empty) array.
    pub fn many(resources: Vec<Resource>) -> Document {
        Document {
            data: PrimaryData::Many(resources),
            included: Vec::new(),
            links: BTreeMap::new(),
            meta: Map::new(),
        }
    }

    /// Adds a resource to `included` unless one with the same `(type, id)` is there already.
    pub fn include(&mut self, resource: Resource) {
        let duplicate = self
            .included
            .iter()
            .any(|r| r.kind == resource.kind && r.id == resource.id);
        if !duplicate {
            self.included.push(resource);
        }
    }

    /// Sets one top-level `meta` member.
    pub fn with_meta(mut self, name: &str, value: impl Serialize) -> Document {
        let value = serde_json::to_value(value).unwrap_or(Value::Null);
        self.meta.insert(name.to_owned(), value);
        self
    }

    /// Serializes the document; a document of plain data cannot fail to serialize.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|_| {
            br#"{"errors":[{"status":"500","title":"internal error"}]}"#.to_vec()
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn to_value(document: &Document) -> Value {
        serde_json::from_slice(&document.to_json()).unwrap()
    }

    #[test]
    fn resource_serializes_relationships_and_links() {
        let resource = Resource::new("teams", "team-abc")
            .attribute("name", "owners")
            .relationship("organization", Relationship::one("organizations", "acme"))
            .relationship(
                "users",
                Relationship::many("users", ["user-1"]).related("/api/v2/teams/team-abc/users"),
            )
            .self_link("/api/v2/teams/team-abc");
        assert_eq!(
            to_value(&Document::one(resource)),
            json!({"data": {
                "id": "team-abc", "type": "teams",
                "attributes": {"name": "owners"},
                "relationships": {
                    "organization": {"data": {"id": "acme", "type": "organizations"}},
                    "users": {
                        "data": [{"id": "user-1", "type": "users"}],
                        "links": {"related": "/api/v2/teams/team-abc/users"}
                    }
                },
                "links": {"self": "/api/v2/teams/team-abc"}
            }})
        );
    }

    #[test]
    fn relationship_null_data_is_kept_and_links_only_omits_data() {
        let resource = Resource::new("configuration-versions", "cv-1")
            .relationship(
                "ingress-attributes",
                Relationship::optional("ingress-attributes", None::<String>),
            )
            .relationship(
                "authentication-tokens",
                Relationship::links_only().related("/api/v2/users/user-1/authentication-tokens"),
            );
        let value = to_value(&Document::one(resource));
        assert_eq!(
            value["data"]["relationships"]["ingress-attributes"],
            json!({"data": null})
        );
        assert_eq!(
            value["data"]["relationships"]["authentication-tokens"],
            json!({"links": {"related": "/api/v2/users/user-1/authentication-tokens"}})
        );
        assert_eq!(value["data"]["attributes"], json!({}));
    }

    #[test]
    fn empty_list_document_has_array_data() {
        assert_eq!(to_value(&Document::many(Vec::new())), json!({"data": []}));
    }

    #[test]
    fn include_skips_duplicates() {
        let mut document = Document::many(Vec::new());
        document.include(Resource::new("users", "user-1"));
        document.include(Resource::new("users", "user-1"));
        document.include(Resource::new("teams", "user-1"));
        assert_eq!(document.included.len(), 2);
    }

    #[test]
    fn document_round_trips_through_serde() {
        let document = Document::one(
            Resource::new("users", "user-1")
                .relationship("teams", Relationship::many("teams", ["team-1"]))
                .relationship("x", Relationship::optional("y", None::<String>)),
        )
        .with_meta("status-counts", json!({"total": 1}));
        let back: Document = serde_json::from_slice(&document.to_json()).unwrap();
        assert_eq!(back, document);
    }
}
