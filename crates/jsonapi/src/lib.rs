//! JSON:API (<https://jsonapi.org>) types as Terraform Enterprise clients read them.
//!
//! Pure data: the platform crate renders these into HTTP responses; nothing here knows HTTP
//! beyond the numeric status code carried in an error object. `document.rs` holds documents,
//! resources and relationships; `pagination.rs` paging; `error.rs` error objects; `typed.rs`
//! list documents of typed resources, serialized without building `Value` maps (the
//! platform's hot lists).
//!
//! Invariants: an error object's `status` is always a JSON *string* (`"404"`), because go-tfe
//! and pytfe fail to decode a number; an error document always has a non-empty `errors` array;
//! a list document's `data` is always an array.

mod document;
mod error;
mod pagination;
mod typed;

pub use document::{Document, Identifier, Linkage, PrimaryData, Relationship, Resource};
pub use error::{ErrorDocument, ErrorObject, ErrorSource};
pub use pagination::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Page, PageError, Pagination};
pub use typed::{IdentifierRef, ListDocument, ListMeta, PageLinks, SelfLink, ToMany, ToOne};

/// The media type of every JSON:API request and response body.
pub const MEDIA_TYPE: &str = "application/vnd.api+json";
