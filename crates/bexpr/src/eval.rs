//! Evaluation of a parsed filter (`parse.rs`) against one datum, a `serde_json::Value` holding
//! the full JSON object of a job, an allocation, a catalog entry..., with go-bexpr's semantics.
//!
//! go-bexpr walks Go values by reflection (through `pointerstructure`), so it tells structs
//! from maps by type. JSON cannot, so the caller's [`Layout`] names the selector paths whose
//! objects are Go maps (`map_fields`, dotted, `*` for any one segment). That matters only when
//! a key is missing: a missing last key of a map is "not present" (`==` false, `!=` true, …),
//! while a missing struct field, a missing key earlier in the path, or an index out of range
//! is an error whose text follows pointerstructure's (`/Foo/Bar at part 1: couldn't find key:
//! struct field with name "Bar"`). `Layout::any_element` selects Consul's reading of a
//! selector that goes through an array (`Checks.Status`: any element), where Nomad's needs an
//! index (`TaskGroups.0.Name`).
//!
//! Invariants: no allocation on the success path (all coercions were done at parse time; the
//! datum is only borrowed); `and`/`or` stop at the first deciding operand, so later operands'
//! errors are not raised; recursion depth is bounded by the parser's nesting limit, and a
//! selector's walk by its length plus the datum's array nesting.

use serde_json::Value;

use super::goconv::{self, NumErr};
use super::parse::{Match, MatchValue, Node, Part, Test};
use super::{FilterError, Layout};

/// Evaluates `node` against `datum`.
pub(crate) fn eval(node: &Node, datum: &Value, layout: &Layout<'_>) -> Result<bool, FilterError> {
    match node {
        Node::And(items) => {
            for item in items {
                if !eval(item, datum, layout)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        Node::Or(items) => {
            for item in items {
                if eval(item, datum, layout)? {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        Node::Not(inner) => Ok(!eval(inner, datum, layout)?),
        Node::Match(m) => walk(m, datum, 0, layout),
    }
}

/// Evaluates `m` at `current`, the value its selector's first `depth` parts lead to.
///
/// Each step resolves one part; the test runs where the selector ends. With
/// [`Layout::any_element`], a step that is not an index fans out over an array's elements
/// and the match holds if it holds for any of them (negation applies per element, as in
/// Consul's go-bexpr).
fn walk(
    m: &Match,
    current: &Value,
    depth: usize,
    layout: &Layout<'_>,
) -> Result<bool, FilterError> {
    let parts = &m.selector.parts;
    let map_fields = layout.map_fields;
    let Some(part) = parts.get(depth) else {
        return Ok(test(m, current, map_fields)? != m.negated);
    };
    let parent = &parts[..depth];
    let next = match current {
        Value::Object(object) => object.get(&part.key),
        // A nil Go map reads as an empty one.
        Value::Null if is_map_path(parent, map_fields) => None,
        Value::Array(items) if layout.any_element && part.index.is_none() => {
            for item in items {
                if walk(m, item, depth, layout)? {
                    return Ok(true);
                }
            }
            return Ok(false);
        }
        Value::Array(items) => {
            let Some(index) = part.index else {
                return Err(eval_err(format!(
                    "{} at part {depth}: couldn't convert value {} to type int",
                    m.selector.pointer(),
                    goconv::quote(&part.key)
                )));
            };
            match usize::try_from(index).ok().and_then(|ix| items.get(ix)) {
                Some(item) => Some(item),
                None => {
                    return Err(eval_err(format!(
                        "{} at part {depth}: index {index} is out of range (length = {})",
                        m.selector.pointer(),
                        items.len()
                    )));
                }
            }
        }
        other => {
            return Err(eval_err(format!(
                "{}: at part {depth}, invalid value kind: {}",
                m.selector.pointer(),
                kind_name(other, parent, map_fields)
            )));
        }
    };
    if let Some(value) = next {
        return walk(m, value, depth + 1, layout);
    }
    let in_map = is_map_path(parent, map_fields);
    if in_map && depth >= 1 && depth + 1 == parts.len() {
        // A missing map key: nothing equals, contains or matches it, and it is empty.
        let positive = matches!(m.test, Test::IsEmpty);
        return Ok(positive != m.negated);
    }
    let what = if in_map {
        format!("couldn't find key {}", goconv::quote(&part.key))
    } else {
        format!(
            "couldn't find key: struct field with name {}",
            goconv::quote(&part.key)
        )
    };
    Err(eval_err(format!(
        "{} at part {depth}: {what}",
        m.selector.pointer()
    )))
}

/// The positive form of `m`'s test on the value its selector found.
fn test(m: &Match, value: &Value, map_fields: &[&str]) -> Result<bool, FilterError> {
    match &m.test {
        Test::Equal(want) => equal(want, value),
        Test::In(want) => contains(want, value, m, map_fields),
        Test::IsEmpty => is_empty(value, m, map_fields),
        Test::Matches(regex) => match value {
            Value::String(s) => Ok(regex.is_match(s)),
            Value::Null => Ok(regex.is_match("")),
            other => Err(eval_err(format!(
                "value of type {} is not convertible to []byte",
                kind_name(other, &m.selector.parts, map_fields)
            ))),
        },
    }
}

/// Whether the object at `path` is a Go map according to `map_fields`.
fn is_map_path(path: &[Part], map_fields: &[&str]) -> bool {
    map_fields.iter().any(|pattern| {
        let mut segments = pattern.split('.');
        path.iter().all(|part| {
            segments
                .next()
                .is_some_and(|segment| segment == "*" || segment == part.key)
        }) && segments.next().is_none()
    })
}

/// `==`: the value text coerced to the field's kind (ints, uints, floats, bools; strings
/// exactly). A `null` stands for a Go zero value.
fn equal(want: &MatchValue, field: &Value) -> Result<bool, FilterError> {
    match field {
        Value::String(s) => Ok(*s == want.raw),
        Value::Bool(b) => match want.as_bool {
            Some(v) => Ok(v == *b),
            None => Err(coercion_err(NumErr::Syntax, "ParseBool", &want.raw)),
        },
        Value::Number(n) => {
            number_equal(want, n).map_err(|(err, func)| coercion_err(err, func, &want.raw))
        }
        Value::Null => Ok(want.is_zero),
        Value::Array(_) | Value::Object(_) => Err(eval_err(
            "unable to find suitable primitive comparison function for matching".to_owned(),
        )),
    }
}

/// Numeric equality with the value coerced to the number's kind; the error names the Go
/// parse function that failed.
fn number_equal(want: &MatchValue, n: &serde_json::Number) -> Result<bool, (NumErr, &'static str)> {
    if let Some(i) = n.as_i64() {
        want.as_int.map(|v| v == i).map_err(|e| (e, "ParseInt"))
    } else if let Some(u) = n.as_u64() {
        want.as_uint.map(|v| v == u).map_err(|e| (e, "ParseUint"))
    } else if let Some(f) = n.as_f64() {
        // Exact, as Go's `==` on float64.
        want.as_float.map(|v| v == f).map_err(|e| (e, "ParseFloat"))
    } else {
        Ok(false)
    }
}

/// `in`/`contains`: key of an object, element of an array, substring of a string.
fn contains(
    want: &MatchValue,
    field: &Value,
    m: &Match,
    map_fields: &[&str],
) -> Result<bool, FilterError> {
    match field {
        Value::Object(object) => Ok(object.contains_key(&want.raw)),
        Value::String(s) => Ok(s.contains(want.raw.as_str())),
        Value::Null => Ok(false),
        Value::Array(items) => {
            for item in items {
                // Like go-bexpr over an interface slice: an element the value cannot be
                // coerced to simply does not match.
                let hit = match item {
                    Value::String(s) => *s == want.raw,
                    Value::Bool(b) => want.as_bool == Some(*b),
                    Value::Number(n) => match number_equal(want, n) {
                        Ok(hit) => hit,
                        Err((NumErr::Syntax, _)) => false,
                        Err((NumErr::Range, _)) => {
                            return Err(eval_err(
                                "error getting interface slice match value in expression"
                                    .to_owned(),
                            ));
                        }
                    },
                    Value::Null => false,
                    Value::Array(_) | Value::Object(_) => {
                        return Err(eval_err(
                            "unable to find suitable primitive comparison function for \"in\" \
                             comparison"
                                .to_owned(),
                        ));
                    }
                };
                if hit {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        other => Err(eval_err(format!(
            "cannot perform in/contains operations on type {} for selector: {}",
            kind_name(other, &m.selector.parts, map_fields),
            goconv::quote(&m.selector.display())
        ))),
    }
}

/// `is empty`: length zero for strings, arrays and objects; `null` is empty.
fn is_empty(field: &Value, m: &Match, map_fields: &[&str]) -> Result<bool, FilterError> {
    match field {
        Value::String(s) => Ok(s.is_empty()),
        Value::Array(items) => Ok(items.is_empty()),
        Value::Object(object) => Ok(object.is_empty()),
        Value::Null => Ok(true),
        other => Err(eval_err(format!(
            "cannot perform is-empty operations on type {} for selector: {}",
            kind_name(other, &m.selector.parts, map_fields),
            goconv::quote(&m.selector.display())
        ))),
    }
}

/// The Go kind a JSON value most likely had, for error texts.
fn kind_name(value: &Value, path: &[Part], map_fields: &[&str]) -> &'static str {
    match value {
        Value::Null => "invalid",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int",
        Value::Number(n) if n.is_u64() => "uint64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "slice",
        Value::Object(_) if is_map_path(path, map_fields) => "map",
        Value::Object(_) => "struct",
    }
}

fn coercion_err(err: NumErr, func: &str, raw: &str) -> FilterError {
    eval_err(format!(
        "error getting match value in expression: {}",
        err.message(func, raw)
    ))
}

fn eval_err(message: String) -> FilterError {
    FilterError::Eval(message)
}
