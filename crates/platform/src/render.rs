//! Writing responses: [`JsonApi`] (a document with `Content-Type: application/vnd.api+json`,
//! built as a `jsonapi::Document` or already serialized from typed resources, [`Rendered`]),
//! [`no_content`], and [`paged`] / [`page_document`] (slice a sorted list and add `meta.pagination` and `links`).
//!
//! Where it sits: the last line of every handler that answers a document. Views (record →
//! `jsonapi::Resource`) live in `views/`; this file knows no resource type.
//!
//! Invariants: every document response has the JSON:API media type; paging links are
//! relative (`/api/v2/...`, no client reads them) and carry every other query parameter.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use jsonapi::{Document, Page, Resource};

use crate::request::Query;

/// A JSON:API document response.
#[derive(Debug)]
pub(crate) struct JsonApi {
    pub(crate) status: StatusCode,
    pub(crate) body: Rendered,
}

/// What a [`JsonApi`] answers with: a document, or one already serialized from typed
/// resources (`jsonapi::ListDocument`).
#[derive(Debug)]
pub(crate) enum Rendered {
    Document(Document),
    Json(bytes::Bytes),
}

impl JsonApi {
    /// 200 with `document`.
    pub(crate) fn ok(document: Document) -> JsonApi {
        JsonApi {
            status: StatusCode::OK,
            body: Rendered::Document(document),
        }
    }

    /// 200 with a document serialized already.
    pub(crate) fn ok_json(json: impl Into<bytes::Bytes>) -> JsonApi {
        JsonApi {
            status: StatusCode::OK,
            body: Rendered::Json(json.into()),
        }
    }

    /// 201 with `document`.
    pub(crate) fn created(document: Document) -> JsonApi {
        JsonApi {
            status: StatusCode::CREATED,
            body: Rendered::Document(document),
        }
    }
}

impl IntoResponse for JsonApi {
    fn into_response(self) -> Response {
        let json = match self.body {
            Rendered::Document(document) => bytes::Bytes::from(document.to_json()),
            Rendered::Json(json) => json,
        };
        let mut response = (self.status, json).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(jsonapi::MEDIA_TYPE),
        );
        response
    }
}

/// 204 with no body.
pub(crate) fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// The page `page` of `items` (already filtered and sorted) as a list document at `path`:
/// `render` turns each item on the page into a resource; `meta.pagination` and `links` are
/// added. Past the end, `data` is `[]`.
pub(crate) fn paged<T>(
    items: &[T],
    page: Page,
    path: &str,
    query: &Query,
    render: impl FnMut(&T) -> Resource,
) -> Document {
    let resources = items[page.range(items.len())].iter().map(render).collect();
    page_document(page, items.len(), resources, path, query)
}

/// A list document of the already rendered `resources` of page `page` in a list of `total`,
/// with `meta.pagination` and `links`.
pub(crate) fn page_document(
    page: Page,
    total: usize,
    resources: Vec<Resource>,
    path: &str,
    query: &Query,
) -> Document {
    let total = total as u64;
    let mut document = Document::many(resources).with_meta("pagination", page.meta(total));
    document.links = page.links(path, query.pairs(), total);
    document
}
