//! The block decoder: turns the `job` block into Nomad API Job JSON by walking it against the
//! schema (`schema.rs`), evaluating every argument (`eval.rs`), then applying `jobspec2`'s
//! normalization (ID/Name from the label, `SpecType`, top-level tasks as groups, vault and
//! secret inheritance, port and template defaults, the default workload identity).
//!
//! Called by `mod.rs` once variables and locals are known.
//!
//! Invariants: strict like gohcl — an argument or block the schema does not list is an error
//! naming it (with HCL's "Did you mean" hints), single blocks may appear once, labels must be
//! exactly as many as the block takes, required arguments must be present. Unset arguments (and
//! arguments set to `null`) are left out of the JSON, so the output is `api.Job` with nil
//! pointers omitted. `dynamic` blocks expand wherever a block of their type is allowed.

use std::collections::BTreeMap;
use std::ops::Range;

use hcl::edit::Span;
use hcl::edit::expr::Expression;
use hcl::edit::structure::{Block, Body, Structure};
use serde_json::{Map, Value as Json};

use super::calendar::parse_go_duration;
use super::diag::{Diag, Pos, suggest};
use super::eval::{Scope, eval};
use super::schema::{self, Field, Kind, Spec};
use super::value::{Value, number_json};

type Object = Map<String, Json>;

/// The arguments of a `constraint`/`affinity` block: value and value span by name.
type ShorthandArgs = BTreeMap<&'static str, (Value, Option<Range<usize>>)>;

/// Decodes the `job` block; `label` is the job's label.
pub(crate) fn decode_job(block: &Block, label: &str, scope: &Scope<'_>) -> Result<Object, Diag> {
    let header = header_of(block, scope);
    let mut job = Object::new();
    decode_body(
        &block.body,
        &schema::JOB,
        scope,
        &mut job,
        header.brace.as_ref(),
    )?;
    normalize_job(&mut job, label);
    Ok(job)
}

/// A block header as the decoder sees it: its type, labels and source ranges. `dynamic` blocks
/// produce headers whose labels were computed.
struct Header {
    ty: String,
    labels: Vec<(String, Option<Range<usize>>)>,
    /// From the type name through the last label (HCL's "DefRange").
    def: Option<Pos>,
    /// Where a missing argument would go (the opening brace).
    brace: Option<Pos>,
}

fn header_of(block: &Block, scope: &Scope<'_>) -> Header {
    let ident_span = block.ident.span();
    let def_end = block
        .labels
        .last()
        .and_then(Span::span)
        .or_else(|| ident_span.clone())
        .map(|s| s.end);
    let def = ident_span
        .as_ref()
        .zip(def_end)
        .map(|(s, end)| s.start..end);
    let src = scope.env().src;
    let brace = def_end.and_then(|end| {
        let offset = src.text.get(end..)?.find('{')?;
        Some(end + offset..end + offset + 1)
    });
    Header {
        ty: block.ident.as_str().to_owned(),
        labels: block
            .labels
            .iter()
            .map(|label| (label.as_str().to_owned(), label.span()))
            .collect(),
        def: scope.pos(def),
        brace: scope.pos(brace),
    }
}

/// Per-body bookkeeping for duplicate detection.
#[derive(Default)]
struct Seen {
    /// Single blocks (and map arguments) already decoded, with where.
    singles: BTreeMap<String, Option<Pos>>,
    /// Task `scaling` labels already decoded.
    scaling: BTreeMap<String, Option<Pos>>,
}

/// Decodes `body` by `spec` into `out`.
fn decode_body(
    body: &Body,
    spec: &'static Spec,
    scope: &Scope<'_>,
    out: &mut Object,
    brace: Option<&Pos>,
) -> Result<(), Diag> {
    let mut seen = Seen::default();
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attr) => {
                let name = attr.key.as_str();
                let key_pos = scope.pos(attr.key.span());
                let Some(field) = spec.field(name).filter(|f| f.kind.is_attribute()) else {
                    return Err(unsupported_argument(name, spec, key_pos));
                };
                if matches!(field.kind, Kind::MapAttrOrBlock) {
                    if let Some(previous) = seen.singles.get(name) {
                        return Err(duplicate_map(name, previous, key_pos));
                    }
                    seen.singles.insert(name.to_owned(), key_pos.clone());
                }
                let value = eval(&attr.value, scope)?;
                if let Some(json) = convert_attribute(field, value, &attr.value, scope)? {
                    out.insert(field.json.to_owned(), json);
                }
            }
            Structure::Block(block) => {
                let header = header_of(block, scope);
                if header.ty == "dynamic" {
                    expand_dynamic(block, header, spec, scope, &mut seen, out)?;
                    continue;
                }
                let Some(field) = spec.field(&header.ty).filter(|f| f.kind.is_block()) else {
                    return Err(unsupported_block(
                        &header.ty,
                        spec,
                        scope.pos(block.ident.span()),
                    ));
                };
                decode_block(field, &header, &block.body, scope, &mut seen, out)?;
            }
        }
    }
    for field in spec.fields.iter().filter(|f| f.required) {
        if !out.contains_key(field.json) {
            return Err(missing_argument(field.hcl).at(brace.cloned()));
        }
    }
    Ok(())
}

fn missing_argument(name: &str) -> Diag {
    Diag::new(
        "Missing required argument",
        format!("The argument {name:?} is required, but no definition was found."),
    )
}

fn unsupported_argument(name: &str, spec: &Spec, pos: Option<Pos>) -> Diag {
    let hint = if spec.field(name).is_some() {
        format!(" Did you mean to define a block of type {name:?}?")
    } else {
        suggest(
            name,
            spec.fields
                .iter()
                .filter(|f| f.kind.is_attribute())
                .map(|f| f.hcl),
        )
        .map(|s| format!(" Did you mean {s:?}?"))
        .unwrap_or_default()
    };
    Diag::new(
        "Unsupported argument",
        format!("An argument named {name:?} is not expected here.{hint}"),
    )
    .at(pos)
}

fn unsupported_block(ty: &str, spec: &Spec, pos: Option<Pos>) -> Diag {
    let hint = if spec.field(ty).is_some() {
        format!(
            " Did you mean to define argument {ty:?}? If so, use the equals sign to assign it a value."
        )
    } else {
        suggest(
            ty,
            spec.fields
                .iter()
                .filter(|f| f.kind.is_block())
                .map(|f| f.hcl),
        )
        .map(|s| format!(" Did you mean {s:?}?"))
        .unwrap_or_default()
    };
    Diag::new(
        "Unsupported block type",
        format!("Blocks of type {ty:?} are not expected here.{hint}"),
    )
    .at(pos)
}

fn duplicate_map(name: &str, previous: &Option<Pos>, pos: Option<Pos>) -> Diag {
    let at = previous
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    Diag::new(
        format!("Duplicate {name} block"),
        format!("{name} may not be defined more than once. Another definition is defined at {at}."),
    )
    .at(pos)
}

/// Checks that a block has as many labels as its type takes.
fn check_labels(header: &Header, takes_label: bool, scope: &Scope<'_>) -> Result<(), Diag> {
    let ty = &header.ty;
    let wanted = usize::from(takes_label);
    if header.labels.len() < wanted {
        return Err(Diag::new(
            format!("Missing name for {ty}"),
            format!("All {ty} blocks must have 1 labels (name)."),
        )
        .at(header.brace.clone()));
    }
    if let Some((_, span)) = header.labels.get(wanted) {
        let detail = if takes_label {
            format!("Only 1 labels (name) are expected for {ty} blocks.")
        } else {
            format!("No labels are expected for {ty} blocks.")
        };
        return Err(
            Diag::new(format!("Extraneous label for {ty}"), detail).at(scope.pos(span.clone()))
        );
    }
    Ok(())
}

/// Records a block that may appear only once in its body.
fn once(header: &Header, seen: &mut Seen) -> Result<(), Diag> {
    if let Some(previous) = seen.singles.get(&header.ty) {
        let at = previous
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let ty = &header.ty;
        return Err(Diag::new(
            format!("Duplicate {ty} block"),
            format!("Only one {ty} block is allowed. Another was defined at {at}."),
        )
        .at(header.def.clone()));
    }
    seen.singles.insert(header.ty.clone(), header.def.clone());
    Ok(())
}

/// Decodes one block (or one `dynamic` expansion) of field `field` into `out`.
fn decode_block(
    field: &'static Field,
    header: &Header,
    body: &Body,
    scope: &Scope<'_>,
    seen: &mut Seen,
    out: &mut Object,
) -> Result<(), Diag> {
    match field.kind {
        Kind::Block(spec) => {
            check_labels(header, spec.label.is_some(), scope)?;
            once(header, seen)?;
            let object = decode_object(spec, header, body, scope)?;
            out.insert(field.json.to_owned(), Json::Object(object));
            if field.hcl == "scaling" {
                validate_group_scaling(out, header)?;
            }
        }
        Kind::Blocks(spec) => {
            check_labels(header, spec.label.is_some(), scope)?;
            let object = decode_object(spec, header, body, scope)?;
            push(out, field.json, Json::Object(object));
        }
        Kind::BlockMap(spec) => {
            check_labels(header, true, scope)?;
            let object = decode_object(spec, header, body, scope)?;
            let label = header
                .labels
                .first()
                .map(|(l, _)| l.clone())
                .unwrap_or_default();
            let entry = out
                .entry(field.json.to_owned())
                .or_insert_with(|| Json::Object(Object::new()));
            if let Json::Object(map) = entry {
                map.insert(label, Json::Object(object));
            }
        }
        Kind::MapBlock | Kind::MapAttrOrBlock => {
            check_labels(header, false, scope)?;
            if let (Kind::MapAttrOrBlock, Some(previous)) =
                (field.kind, seen.singles.get(&header.ty))
            {
                return Err(duplicate_map(&header.ty, previous, header.def.clone()));
            }
            once(header, seen)?;
            out.insert(
                field.json.to_owned(),
                Json::Object(string_map_block(body, scope)?),
            );
        }
        Kind::ListMapBlock => {
            check_labels(header, false, scope)?;
            once(header, seen)?;
            out.insert(
                field.json.to_owned(),
                Json::Object(list_map_block(body, scope)?),
            );
        }
        Kind::ConfigBlock => {
            check_labels(header, false, scope)?;
            once(header, seen)?;
            out.insert(
                field.json.to_owned(),
                Json::Object(config_body(body, scope)?),
            );
        }
        Kind::Constraints => {
            check_labels(header, false, scope)?;
            push(out, field.json, Json::Object(constraint(body, scope)?));
        }
        Kind::Affinities => {
            check_labels(header, false, scope)?;
            push(out, field.json, Json::Object(affinity(body, scope)?));
        }
        Kind::TaskScaling => {
            check_labels(header, true, scope)?;
            let (label, label_span) = header.labels.first().cloned().unwrap_or_default();
            let label = label.to_lowercase();
            let policy_type = match label.as_str() {
                "cpu" => "vertical_cpu",
                "mem" => "vertical_mem",
                _ => {
                    return Err(Diag::new(
                        "Invalid scaling policy name",
                        "scaling policy name must be \"cpu\" or \"mem\"",
                    )
                    .at(scope.pos(label_span)));
                }
            };
            if let Some(previous) = seen.scaling.get(&label) {
                let at = previous
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                return Err(Diag::new(
                    format!("Duplicate scaling {label:?} block"),
                    format!(
                        "Only one scaling {label} block is allowed. Another was defined at {at}."
                    ),
                )
                .at(header.def.clone()));
            }
            seen.scaling.insert(label, header.def.clone());
            let mut policy = Object::new();
            decode_body(
                body,
                &schema::TASK_SCALING,
                scope,
                &mut policy,
                header.brace.as_ref(),
            )?;
            match policy.get("Type").and_then(Json::as_str) {
                None => {
                    policy.insert("Type".to_owned(), Json::from(policy_type));
                }
                Some(given) if given == policy_type => {}
                Some(given) => {
                    return Err(Diag::new(
                        "Invalid scaling policy type",
                        format!(
                            "Invalid policy type, expected {policy_type:?} but found {given:?}"
                        ),
                    )
                    .at(header.def.clone()));
                }
            }
            push(out, field.json, Json::Object(policy));
        }
        Kind::Str
        | Kind::Bool
        | Kind::Int(..)
        | Kind::Duration
        | Kind::StrList
        | Kind::IntList(..)
        | Kind::StrMap => {
            return Err(Diag::new(
                "Unsupported block type",
                format!(
                    "Blocks of type {:?} are not expected here. Did you mean to define argument {:?}? If so, use the equals sign to assign it a value.",
                    header.ty, header.ty
                ),
            )
            .at(header.def.clone()));
        }
    }
    Ok(())
}

/// A group `scaling` block needs `max` and is `horizontal`.
fn validate_group_scaling(out: &mut Object, header: &Header) -> Result<(), Diag> {
    let Some(Json::Object(scaling)) = out.get_mut("Scaling") else {
        return Ok(());
    };
    match scaling.get("Type").and_then(Json::as_str) {
        None | Some("") => {
            scaling.insert("Type".to_owned(), Json::from("horizontal"));
        }
        Some("horizontal") => {}
        Some(other) => {
            return Err(Diag::new(
                "Invalid group scaling type",
                format!("task group scaling policy had invalid type: {other:?}"),
            )
            .at(header.def.clone()));
        }
    }
    if !scaling.contains_key("Max") {
        return Err(missing_argument("max").at(header.brace.clone()));
    }
    Ok(())
}

fn push(out: &mut Object, key: &str, item: Json) {
    let entry = out
        .entry(key.to_owned())
        .or_insert_with(|| Json::Array(Vec::new()));
    if let Json::Array(items) = entry {
        items.push(item);
    }
}

fn decode_object(
    spec: &'static Spec,
    header: &Header,
    body: &Body,
    scope: &Scope<'_>,
) -> Result<Object, Diag> {
    let mut object = Object::new();
    if let (Some(key), Some((label, _))) = (spec.label, header.labels.first()) {
        object.insert(key.to_owned(), Json::from(label.clone()));
    }
    decode_body(body, spec, scope, &mut object, header.brace.as_ref())?;
    Ok(object)
}

/// Expands `dynamic "<type>" { for_each, iterator, labels, content {} }` into blocks of
/// `<type>`, each decoded with the iterator (`<type>` unless renamed) bound to `{key, value}`.
fn expand_dynamic(
    block: &Block,
    header: Header,
    spec: &'static Spec,
    scope: &Scope<'_>,
    seen: &mut Seen,
    out: &mut Object,
) -> Result<(), Diag> {
    let [(ty, ty_span)] = header.labels.as_slice() else {
        return Err(if header.labels.is_empty() {
            Diag::new(
                "Missing name for dynamic",
                "All dynamic blocks must have 1 labels (name).",
            )
            .at(header.brace.clone())
        } else {
            Diag::new(
                "Extraneous label for dynamic",
                "Only 1 labels (name) are expected for dynamic blocks.",
            )
            .at(header.def.clone())
        });
    };
    let Some(field) = spec.field(ty).filter(|f| f.kind.is_block()) else {
        return Err(unsupported_block(ty, spec, scope.pos(ty_span.clone())));
    };
    let mut for_each = None;
    let mut iterator = ty.clone();
    let mut labels_expr = None;
    let mut content = None;
    for structure in block.body.iter() {
        match structure {
            Structure::Attribute(attr) => match attr.key.as_str() {
                "for_each" => for_each = Some(&attr.value),
                "labels" => labels_expr = Some(&attr.value),
                "iterator" => match &attr.value {
                    Expression::Variable(name) => iterator = name.as_str().to_owned(),
                    other => {
                        return Err(Diag::new(
                            "Invalid dynamic iterator name",
                            "Dynamic iterator must be a single variable name.",
                        )
                        .at(scope.pos(other.span())));
                    }
                },
                other => {
                    return Err(Diag::new(
                        "Unsupported argument",
                        format!("An argument named {other:?} is not expected here."),
                    )
                    .at(scope.pos(attr.key.span())));
                }
            },
            Structure::Block(inner) if inner.ident.as_str() == "content" => {
                if content.is_some() {
                    return Err(Diag::new(
                        "Duplicate content block",
                        "Only one content block is allowed in a dynamic block.",
                    )
                    .at(scope.pos(inner.ident.span())));
                }
                content = Some(&inner.body);
            }
            Structure::Block(inner) => {
                return Err(Diag::new(
                    "Unsupported block type",
                    format!(
                        "Blocks of type {:?} are not expected here.",
                        inner.ident.as_str()
                    ),
                )
                .at(scope.pos(inner.ident.span())));
            }
        }
    }
    let Some(for_each) = for_each else {
        return Err(missing_argument("for_each").at(header.brace.clone()));
    };
    let Some(content) = content else {
        return Err(Diag::new(
            "Missing content block",
            "A dynamic block must have a nested block of type \"content\" to describe the body of each generated block.",
        )
        .at(header.brace.clone()));
    };
    let collection = eval(for_each, scope)?;
    #[allow(clippy::cast_precision_loss)]
    let items: Vec<(Value, Value)> = match collection {
        Value::List(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| (Value::Number(i as f64), v))
            .collect(),
        Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| (Value::String(k), v))
            .collect(),
        other => {
            return Err(Diag::new(
                "Invalid dynamic for_each value",
                format!(
                    "Cannot use a {} value in for_each. An iterable collection is required.",
                    other.type_name()
                ),
            )
            .at(scope.pos(for_each.span())));
        }
    };
    for (key, value) in items {
        let mut bound = BTreeMap::new();
        bound.insert("key".to_owned(), key);
        bound.insert("value".to_owned(), value);
        let inner = scope.child(vec![(iterator.clone(), Value::Object(bound))]);
        let mut labels = Vec::new();
        if let Some(expr) = labels_expr {
            let Value::List(values) = eval(expr, &inner)? else {
                return Err(Diag::new(
                    "Invalid dynamic block labels",
                    "The labels must be a list of strings.",
                )
                .at(inner.pos(expr.span())));
            };
            for label in values {
                let text = label.to_str().ok_or_else(|| {
                    Diag::new(
                        "Invalid dynamic block label",
                        "Block labels must be strings.",
                    )
                    .at(inner.pos(expr.span()))
                })?;
                labels.push((text, expr.span()));
            }
        }
        let generated = Header {
            ty: ty.clone(),
            labels,
            def: header.def.clone(),
            brace: header.brace.clone(),
        };
        decode_block(field, &generated, content, &inner, seen, out)?;
    }
    Ok(())
}

fn unsuitable(detail: impl Into<String>, expr: &Expression, scope: &Scope<'_>) -> Diag {
    Diag::new(
        "Unsuitable value type",
        format!("Unsuitable value: {}", detail.into()),
    )
    .at(scope.pos(expr.span()))
}

/// Converts an evaluated argument by its field kind; `None` for null (left unset).
fn convert_attribute(
    field: &Field,
    value: Value,
    expr: &Expression,
    scope: &Scope<'_>,
) -> Result<Option<Json>, Diag> {
    if value.is_null() {
        if matches!(field.kind, Kind::Duration) {
            return Err(
                Diag::new("Unsuitable value", "Unsuitable duration value: nil")
                    .at(scope.pos(expr.span())),
            );
        }
        return Ok(None);
    }
    let json = match field.kind {
        Kind::Str => Json::String(
            value
                .to_str()
                .ok_or_else(|| unsuitable("string required", expr, scope))?,
        ),
        Kind::Bool => Json::Bool(
            value
                .to_bool()
                .ok_or_else(|| unsuitable("bool required", expr, scope))?,
        ),
        Kind::Int(min, max) => whole_number(&value, min, max, expr, scope)?,
        Kind::Duration => match &value {
            Value::String(text) => Json::from(parse_go_duration(text).map_err(|e| {
                Diag::new(
                    "Unsuitable value type",
                    format!("Unsuitable duration value: {e}"),
                )
                .at(scope.pos(expr.span()))
            })?),
            Value::Number(_) => whole_number(&value, i64::MIN, i64::MAX, expr, scope)?,
            other => {
                return Err(unsuitable(
                    format!("expected a string but found {}", other.type_name()),
                    expr,
                    scope,
                ));
            }
        },
        Kind::StrList => {
            let Value::List(items) = value else {
                return Err(unsuitable("list of string required", expr, scope));
            };
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                let text = match item {
                    Value::Null => None,
                    other => other.to_str(),
                }
                .ok_or_else(|| unsuitable("list of string required", expr, scope))?;
                out.push(Json::String(text));
            }
            Json::Array(out)
        }
        Kind::IntList(min, max) => {
            let Value::List(items) = value else {
                return Err(unsuitable("list of number required", expr, scope));
            };
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(whole_number(&item, min, max, expr, scope)?);
            }
            Json::Array(out)
        }
        Kind::StrMap | Kind::MapAttrOrBlock => {
            let Value::Object(map) = value else {
                return Err(unsuitable("map of string required", expr, scope));
            };
            let mut out = Object::new();
            for (key, item) in map {
                if item.is_null() {
                    continue;
                }
                let text = item
                    .to_str()
                    .ok_or_else(|| unsuitable("map of string required", expr, scope))?;
                out.insert(key, Json::String(text));
            }
            Json::Object(out)
        }
        _ => return Ok(None),
    };
    Ok(Some(json))
}

fn whole_number(
    value: &Value,
    min: i64,
    max: i64,
    expr: &Expression,
    scope: &Scope<'_>,
) -> Result<Json, Diag> {
    let n = value
        .to_number()
        .ok_or_else(|| unsuitable("a number is required", expr, scope))?;
    #[allow(clippy::cast_precision_loss)]
    let in_range = n.fract() == 0.0 && n >= min as f64 && n <= max as f64;
    if !in_range {
        return Err(unsuitable(
            format!("value must be a whole number, between {min} and {max}"),
            expr,
            scope,
        ));
    }
    Ok(number_json(n))
}

/// A block whose arguments are a string map (`meta {}`, `env {}`, artifact `options {}`).
fn string_map_block(body: &Body, scope: &Scope<'_>) -> Result<Object, Diag> {
    let mut out = Object::new();
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attr) => {
                let value = eval(&attr.value, scope)?;
                if value.is_null() {
                    continue;
                }
                let text = value.to_str().ok_or_else(|| {
                    Diag::new(
                        "Incorrect attribute value type",
                        format!(
                            "Inappropriate value for attribute {:?}: string required.",
                            attr.key.as_str()
                        ),
                    )
                    .at(scope.pos(attr.value.span()))
                })?;
                out.insert(attr.key.as_str().to_owned(), Json::String(text));
            }
            Structure::Block(block) => return Err(block_not_allowed(block, scope)),
        }
    }
    Ok(out)
}

fn block_not_allowed(block: &Block, scope: &Scope<'_>) -> Diag {
    Diag::new(
        format!("Unexpected {:?} block", block.ident.as_str()),
        "Blocks are not allowed here.",
    )
    .at(scope.pos(block.ident.span()))
}

/// A block whose arguments are lists of strings (check `header {}`).
fn list_map_block(body: &Body, scope: &Scope<'_>) -> Result<Object, Diag> {
    let mut out = Object::new();
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attr) => {
                let value = eval(&attr.value, scope)?;
                let bad = || {
                    Diag::new(
                        "Incorrect attribute value type",
                        format!(
                            "Inappropriate value for attribute {:?}: list of string required.",
                            attr.key.as_str()
                        ),
                    )
                    .at(scope.pos(attr.value.span()))
                };
                let Value::List(items) = value else {
                    return Err(bad());
                };
                let mut strings = Vec::with_capacity(items.len());
                for item in items {
                    strings.push(Json::String(item.to_str().ok_or_else(bad)?));
                }
                out.insert(attr.key.as_str().to_owned(), Json::Array(strings));
            }
            Structure::Block(block) => return Err(block_not_allowed(block, scope)),
        }
    }
    Ok(out)
}

/// A free-form block, as `jobspec2`'s `BlocksAsAttrs` reads it: arguments become JSON (an object
/// literal wrapped in a one-element array), nested blocks become arrays of objects, grouped by
/// type, labels nesting as `{label: [body]}`.
fn config_body(body: &Body, scope: &Scope<'_>) -> Result<Object, Diag> {
    let mut out = Object::new();
    let mut blocks: Vec<(String, Vec<Json>)> = Vec::new();
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attr) => {
                let json = eval(&attr.value, scope)?.to_json();
                let json = if matches!(attr.value, Expression::Object(_)) {
                    Json::Array(vec![json])
                } else {
                    json
                };
                out.insert(attr.key.as_str().to_owned(), json);
            }
            Structure::Block(block) => {
                let mut json = Json::Object(config_body(&block.body, scope)?);
                for label in block.labels.iter().rev() {
                    let mut wrapper = Object::new();
                    wrapper.insert(label.as_str().to_owned(), Json::Array(vec![json]));
                    json = Json::Object(wrapper);
                }
                let ty = block.ident.as_str();
                match blocks.iter_mut().find(|(name, _)| name == ty) {
                    Some((_, items)) => items.push(json),
                    None => blocks.push((ty.to_owned(), vec![json])),
                }
            }
        }
    }
    for (ty, items) in blocks {
        out.insert(ty, Json::Array(items));
    }
    Ok(out)
}

/// Reads the arguments of a `constraint`/`affinity` block, rejecting unknown ones.
fn shorthand_args(
    body: &Body,
    allowed: &[&'static str],
    scope: &Scope<'_>,
) -> Result<ShorthandArgs, Diag> {
    let mut args = BTreeMap::new();
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attr) => {
                let name = attr.key.as_str();
                let Some(known) = allowed.iter().find(|a| **a == name) else {
                    let hint = suggest(name, allowed.iter().copied())
                        .map(|s| format!(" Did you mean {s:?}?"))
                        .unwrap_or_default();
                    return Err(Diag::new(
                        "Unsupported argument",
                        format!("An argument named {name:?} is not expected here.{hint}"),
                    )
                    .at(scope.pos(attr.key.span())));
                };
                let value = eval(&attr.value, scope)?;
                args.insert(*known, (value, attr.value.span()));
            }
            Structure::Block(block) => {
                return Err(Diag::new(
                    "Unsupported block type",
                    format!(
                        "Blocks of type {:?} are not expected here.",
                        block.ident.as_str()
                    ),
                )
                .at(scope.pos(block.ident.span())));
            }
        }
    }
    Ok(args)
}

fn arg_string(args: &ShorthandArgs, name: &str, scope: &Scope<'_>) -> Result<String, Diag> {
    match args.get(name) {
        None | Some((Value::Null, _)) => Ok(String::new()),
        Some((value, span)) => value.to_str().ok_or_else(|| {
            Diag::new(
                "Incorrect attribute value type",
                format!("Inappropriate value for attribute {name:?}: string required."),
            )
            .at(scope.pos(span.clone()))
        }),
    }
}

const CONSTRAINT_ARGS: &[&str] = &[
    "attribute",
    "value",
    "operator",
    "distinct_property",
    "distinct_hosts",
    "regexp",
    "version",
    "semver",
    "set_contains",
    "set_contains_all",
    "set_contains_any",
    "is_set",
    "is_not_set",
];

/// A `constraint` block: `{LTarget, RTarget, Operand}`, operand `=` unless a shorthand
/// (`version`, `semver`, `regexp`, `set_contains*`, `is_set`, `is_not_set`, `distinct_hosts`,
/// `distinct_property`) names it.
fn constraint(body: &Body, scope: &Scope<'_>) -> Result<Object, Diag> {
    let args = shorthand_args(body, CONSTRAINT_ARGS, scope)?;
    let mut l_target = arg_string(&args, "attribute", scope)?;
    let mut r_target = arg_string(&args, "value", scope)?;
    let mut operand = arg_string(&args, "operator", scope)?;
    for shorthand in [
        "version",
        "semver",
        "regexp",
        "set_contains",
        "set_contains_all",
        "set_contains_any",
    ] {
        let value = arg_string(&args, shorthand, scope)?;
        if !value.is_empty() {
            operand = shorthand.to_owned();
            r_target = value;
        }
    }
    for shorthand in ["is_set", "is_not_set"] {
        let value = arg_string(&args, shorthand, scope)?;
        match value.as_str() {
            "" | "false" => {}
            "true" => operand = shorthand.to_owned(),
            attribute => {
                operand = shorthand.to_owned();
                l_target = attribute.to_owned();
            }
        }
    }
    if let Some((value, span)) = args.get("distinct_hosts")
        && !value.is_null()
    {
        let hosts = value.to_bool().ok_or_else(|| {
            Diag::new(
                "Incorrect attribute value type",
                "Inappropriate value for attribute \"distinct_hosts\": bool required.",
            )
            .at(scope.pos(span.clone()))
        })?;
        operand = "distinct_hosts".to_owned();
        r_target = hosts.to_string();
    }
    let property = arg_string(&args, "distinct_property", scope)?;
    if !property.is_empty() {
        operand = "distinct_property".to_owned();
        l_target = property;
    }
    if operand.is_empty() {
        operand = "=".to_owned();
    }
    let mut out = Object::new();
    out.insert("LTarget".to_owned(), Json::String(l_target));
    out.insert("RTarget".to_owned(), Json::String(r_target));
    out.insert("Operand".to_owned(), Json::String(operand));
    Ok(out)
}

const AFFINITY_ARGS: &[&str] = &[
    "attribute",
    "value",
    "operator",
    "weight",
    "version",
    "semver",
    "regexp",
    "set_contains",
    "set_contains_all",
    "set_contains_any",
];

/// An `affinity` block: `{LTarget, RTarget, Operand, Weight}` with the same shorthands.
fn affinity(body: &Body, scope: &Scope<'_>) -> Result<Object, Diag> {
    let args = shorthand_args(body, AFFINITY_ARGS, scope)?;
    let l_target = arg_string(&args, "attribute", scope)?;
    let mut r_target = arg_string(&args, "value", scope)?;
    let mut operand = arg_string(&args, "operator", scope)?;
    for shorthand in [
        "version",
        "semver",
        "regexp",
        "set_contains_any",
        "set_contains_all",
        "set_contains",
    ] {
        let value = arg_string(&args, shorthand, scope)?;
        if !value.is_empty() {
            operand = shorthand.to_owned();
            r_target = value;
        }
    }
    if operand.is_empty() {
        operand = "=".to_owned();
    }
    let mut out = Object::new();
    out.insert("LTarget".to_owned(), Json::String(l_target));
    out.insert("RTarget".to_owned(), Json::String(r_target));
    out.insert("Operand".to_owned(), Json::String(operand));
    if let Some((value, span)) = args.get("weight")
        && !value.is_null()
    {
        let n = value
            .to_number()
            .filter(|n| n.fract() == 0.0 && (-128.0..=127.0).contains(n));
        let n = n.ok_or_else(|| {
            Diag::new(
                "Unsuitable value type",
                "Unsuitable value: value must be a whole number, between -128 and 127",
            )
            .at(scope.pos(span.clone()))
        })?;
        out.insert("Weight".to_owned(), number_json(n));
    }
    Ok(out)
}

/// `jobspec2`'s `normalizeJob`, on JSON.
fn normalize_job(job: &mut Object, label: &str) {
    if !job.contains_key("Name") {
        job.insert("Name".to_owned(), Json::from(label));
    }
    if !job.contains_key("ID") {
        job.insert("ID".to_owned(), Json::from(label));
    }
    if let Some(Json::Object(periodic)) = job.get_mut("Periodic")
        && (periodic.contains_key("Spec") || periodic.contains_key("Specs"))
    {
        periodic.insert("SpecType".to_owned(), Json::from("cron"));
    }
    let job_vault = job.remove(schema::VAULT_KEY).map(normalize_vault);
    let job_secrets = take_array(job, schema::SECRETS_KEY);
    let lone_tasks = take_array(job, schema::TASKS_KEY);
    if !lone_tasks.is_empty() {
        let mut groups: Vec<Json> = lone_tasks
            .into_iter()
            .map(|task| {
                let mut group = Object::new();
                if let Some(name) = task.get("Name") {
                    group.insert("Name".to_owned(), name.clone());
                }
                group.insert("Tasks".to_owned(), Json::Array(vec![task]));
                Json::Object(group)
            })
            .collect();
        groups.extend(take_array(job, "TaskGroups"));
        job.insert("TaskGroups".to_owned(), Json::Array(groups));
    }
    let Some(Json::Array(groups)) = job.get_mut("TaskGroups") else {
        return;
    };
    for group in groups.iter_mut() {
        let Json::Object(group) = group else { continue };
        let group_vault = group.remove(schema::VAULT_KEY).map(normalize_vault);
        let group_secrets = take_array(group, schema::SECRETS_KEY);
        if let Some(Json::Array(networks)) = group.get_mut("Networks") {
            normalize_ports(networks);
        }
        let Some(Json::Array(tasks)) = group.get_mut("Tasks") else {
            continue;
        };
        for task in tasks.iter_mut() {
            let Json::Object(task) = task else { continue };
            if let Some(Json::Object(resources)) = task.get_mut("Resources")
                && let Some(Json::Array(networks)) = resources.get_mut("Networks")
            {
                normalize_ports(networks);
            }
            if let Some(Json::Array(templates)) = task.get_mut("Templates") {
                for template in templates.iter_mut() {
                    if let Json::Object(template) = template {
                        normalize_template(template);
                    }
                }
            }
            match task.remove("Vault") {
                Some(vault) => {
                    task.insert("Vault".to_owned(), normalize_vault(vault));
                }
                None => {
                    if let Some(vault) = group_vault.clone().or_else(|| job_vault.clone()) {
                        task.insert("Vault".to_owned(), vault);
                    }
                }
            }
            if !group_secrets.is_empty() || !job_secrets.is_empty() {
                let mut secrets = take_array(task, "Secrets");
                secrets.extend(group_secrets.iter().cloned());
                secrets.extend(job_secrets.iter().cloned());
                task.insert("Secrets".to_owned(), Json::Array(secrets));
            }
            normalize_identities(task);
        }
    }
}

fn take_array(object: &mut Object, key: &str) -> Vec<Json> {
    match object.remove(key) {
        Some(Json::Array(items)) => items,
        _ => Vec::new(),
    }
}

fn set_default(object: &mut Object, key: &str, value: Json) {
    if object.get(key).is_none_or(Json::is_null) {
        object.insert(key.to_owned(), value);
    }
}

fn normalize_vault(mut vault: Json) -> Json {
    if let Json::Object(object) = &mut vault {
        set_default(object, "Env", Json::Bool(true));
        set_default(object, "DisableFile", Json::Bool(false));
        set_default(object, "ChangeMode", Json::from("restart"));
    }
    vault
}

/// Ports given a static value under `port` are reserved ports, the rest dynamic.
fn normalize_ports(networks: &mut [Json]) {
    for network in networks.iter_mut() {
        let Json::Object(network) = network else {
            continue;
        };
        let ports = take_array(network, "DynamicPorts");
        if ports.is_empty() {
            continue;
        }
        let (reserved, dynamic): (Vec<Json>, Vec<Json>) = ports.into_iter().partition(|port| {
            port.get("Value")
                .and_then(Json::as_i64)
                .is_some_and(|v| v > 0)
        });
        network.remove("ReservedPorts");
        if !dynamic.is_empty() {
            network.insert("DynamicPorts".to_owned(), Json::Array(dynamic));
        }
        if !reserved.is_empty() {
            network.insert("ReservedPorts".to_owned(), Json::Array(reserved));
        }
    }
}

const FIVE_SECONDS: i64 = 5_000_000_000;

fn normalize_template(template: &mut Object) {
    set_default(template, "ChangeMode", Json::from("restart"));
    set_default(template, "Perms", Json::from("0644"));
    set_default(template, "Splay", Json::from(FIVE_SECONDS));
    set_default(template, "ErrMissingKey", Json::Bool(false));
    if let Some(Json::Object(script)) = template.get_mut("ChangeScript") {
        set_default(script, "Args", Json::Array(Vec::new()));
        set_default(script, "Timeout", Json::from(FIVE_SECONDS));
        set_default(script, "FailOnError", Json::Bool(false));
        set_default(script, "RunOnFirstRender", Json::Bool(false));
    }
}

/// The identity named "" or "default" moves from `Identities` to `Identity`.
fn normalize_identities(task: &mut Object) {
    let Some(Json::Array(identities)) = task.get_mut("Identities") else {
        return;
    };
    let default = identities.iter().position(|identity| {
        matches!(
            identity.get("Name").and_then(Json::as_str),
            None | Some("" | "default")
        )
    });
    if let Some(index) = default {
        let identity = identities.remove(index);
        task.insert("Identity".to_owned(), identity);
    }
}
