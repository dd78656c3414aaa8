//! Values and types of the HCL expression language, a small model of go-cty.
//!
//! The evaluator (`eval.rs`) produces [`Value`]s, the function library (`functions.rs`)
//! transforms them, `variables.rs` converts them to a variable's declared [`Type`], and the block
//! decoder turns them into JSON.
//!
//! Model and invariants: numbers are `f64` (cty uses arbitrary precision; integers up to 2^53 are
//! exact here); lists, tuples and sets are all `List` (sets are kept sorted and deduplicated by
//! the functions that build them); maps and objects are both `Object`, ordered by key as cty
//! orders them. Conversions follow cty's safe and unsafe conversion rules: number and bool turn
//! into strings, strings that spell a number or `true`/`false` turn back.

use std::collections::BTreeMap;

use serde_json::Value as Json;

/// An HCL value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    List(Vec<Value>),
    Object(BTreeMap<String, Value>),
}

impl Value {
    pub(crate) fn string(s: impl Into<String>) -> Value {
        Value::String(s.into())
    }

    /// The type name cty would print in an error message.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::List(_) => "tuple",
            Value::Object(_) => "object",
        }
    }

    /// How deeply lists and objects nest (0 for a primitive).
    pub(crate) fn depth(&self) -> usize {
        match self {
            Value::List(items) => 1 + items.iter().map(Value::depth).max().unwrap_or(0),
            Value::Object(map) => 1 + map.values().map(Value::depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    pub(crate) fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Converts a primitive to a string as cty does (`1.5` → "1.5", `true` → "true").
    pub(crate) fn to_str(&self) -> Option<String> {
        match self {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(format_number(*n)),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    /// Converts a primitive to a number (strings must spell one).
    pub(crate) fn to_number(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            Value::String(s) => parse_number(s),
            _ => None,
        }
    }

    /// Converts a primitive to a bool (strings must be `true` or `false`).
    pub(crate) fn to_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            Value::String(s) if s == "true" => Some(true),
            Value::String(s) if s == "false" => Some(false),
            _ => None,
        }
    }

    /// The value as JSON; whole numbers become JSON integers.
    pub(crate) fn to_json(&self) -> Json {
        match self {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Number(n) => number_json(*n),
            Value::String(s) => Json::String(s.clone()),
            Value::List(items) => Json::Array(items.iter().map(Value::to_json).collect()),
            Value::Object(map) => {
                Json::Object(map.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
            }
        }
    }

    /// A JSON document as a value (`jsondecode`, JSON var-files).
    pub(crate) fn from_json(json: &Json) -> Value {
        match json {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
            Json::String(s) => Value::String(s.clone()),
            Json::Array(items) => Value::List(items.iter().map(Value::from_json).collect()),
            Json::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }
}

/// A whole number in i64 range as a JSON integer, anything else as a JSON float (non-finite
/// numbers, which JSON cannot carry, as null).
pub(crate) fn number_json(n: f64) -> Json {
    if n.fract() == 0.0 && n.abs() < 9.2e18 {
        #[allow(clippy::cast_possible_truncation)]
        let int = n as i64;
        Json::from(int)
    } else {
        serde_json::Number::from_f64(n).map_or(Json::Null, Json::Number)
    }
}

/// Formats a number like cty (no exponent, no trailing `.0`).
pub(crate) fn format_number(n: f64) -> String {
    if n.is_nan() {
        return "NaN".to_owned();
    }
    if n.is_infinite() {
        return if n > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if n == 0.0 {
        return "0".to_owned();
    }
    format!("{n}")
}

/// Parses a number the way cty converts strings to numbers (decimal, optional sign, exponent).
pub(crate) fn parse_number(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.is_empty() || t != s {
        return None;
    }
    let body = t.strip_prefix(['-', '+']).unwrap_or(t);
    if !body.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    if body
        .chars()
        .any(|c| !(c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-')))
    {
        return None;
    }
    t.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// A type constraint (`type = list(string)` in a `variable` block).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Type {
    Any,
    String,
    Number,
    Bool,
    List(Box<Type>),
    Set(Box<Type>),
    Map(Box<Type>),
    Object(BTreeMap<String, (Type, bool)>),
    Tuple(Vec<Type>),
}

impl Type {
    /// Whether a `-var` value for this type is taken literally (cty's string and number types,
    /// and variables without a type) rather than parsed as an HCL expression.
    pub(crate) fn is_literal_flag(&self) -> bool {
        matches!(self, Type::Any | Type::String | Type::Number)
    }

    /// A friendly name, as cty prints in conversion errors.
    pub(crate) fn friendly(&self) -> String {
        match self {
            Type::Any => "any".to_owned(),
            Type::String => "string".to_owned(),
            Type::Number => "number".to_owned(),
            Type::Bool => "bool".to_owned(),
            Type::List(t) => format!("list of {}", t.friendly()),
            Type::Set(t) => format!("set of {}", t.friendly()),
            Type::Map(t) => format!("map of {}", t.friendly()),
            Type::Object(_) => "object".to_owned(),
            Type::Tuple(_) => "tuple".to_owned(),
        }
    }

    /// Converts `value` to this type, or says why not (cty's wording).
    pub(crate) fn convert(&self, value: Value) -> Result<Value, String> {
        if value.is_null() {
            return Ok(Value::Null);
        }
        match self {
            Type::Any => Ok(value),
            Type::String => value
                .to_str()
                .map(Value::String)
                .ok_or_else(|| "string required".to_owned()),
            Type::Number => match &value {
                Value::String(s) => parse_number(s)
                    .map(Value::Number)
                    .ok_or_else(|| "a number is required".to_owned()),
                Value::Number(_) => Ok(value),
                _ => Err("a number is required".to_owned()),
            },
            Type::Bool => match &value {
                Value::String(s) if s != "true" && s != "false" => {
                    Err("a bool is required".to_owned())
                }
                _ => value
                    .to_bool()
                    .map(Value::Bool)
                    .ok_or_else(|| "bool required".to_owned()),
            },
            Type::List(elem) | Type::Set(elem) => {
                let Value::List(items) = value else {
                    return Err(format!("{} required", self.friendly()));
                };
                let mut out = Vec::with_capacity(items.len());
                for (index, item) in items.into_iter().enumerate() {
                    out.push(
                        elem.convert(item)
                            .map_err(|e| format!("element {index}: {e}"))?,
                    );
                }
                if matches!(self, Type::Set(_)) {
                    out = set_of(out);
                }
                Ok(Value::List(out))
            }
            Type::Map(elem) => {
                let Value::Object(map) = value else {
                    return Err(format!("{} required", self.friendly()));
                };
                let mut out = BTreeMap::new();
                for (key, item) in map {
                    let converted = elem
                        .convert(item)
                        .map_err(|e| format!("element {key:?}: {e}"))?;
                    out.insert(key, converted);
                }
                Ok(Value::Object(out))
            }
            Type::Object(attrs) => {
                let Value::Object(mut map) = value else {
                    return Err("object required".to_owned());
                };
                let mut out = BTreeMap::new();
                for (name, (ty, optional)) in attrs {
                    match map.remove(name) {
                        Some(item) => {
                            let converted = ty
                                .convert(item)
                                .map_err(|e| format!("attribute {name:?}: {e}"))?;
                            out.insert(name.clone(), converted);
                        }
                        None if *optional => {
                            out.insert(name.clone(), Value::Null);
                        }
                        None => return Err(format!("attribute {name:?} is required")),
                    }
                }
                Ok(Value::Object(out))
            }
            Type::Tuple(types) => {
                let Value::List(items) = value else {
                    return Err("tuple required".to_owned());
                };
                if items.len() != types.len() {
                    return Err(format!("tuple required with {} elements", types.len()));
                }
                let mut out = Vec::with_capacity(items.len());
                for (index, (item, ty)) in items.into_iter().zip(types).enumerate() {
                    out.push(
                        ty.convert(item)
                            .map_err(|e| format!("element {index}: {e}"))?,
                    );
                }
                Ok(Value::List(out))
            }
        }
    }

    /// The type a default value implies for a variable without a `type`: its primitive type,
    /// or `any` for collections (cty would pin the exact tuple/object shape; we stay lenient).
    pub(crate) fn implied_by(value: &Value) -> Type {
        match value {
            Value::String(_) => Type::String,
            Value::Number(_) => Type::Number,
            Value::Bool(_) => Type::Bool,
            _ => Type::Any,
        }
    }
}

/// Sorts and deduplicates values as a cty set of them would hold them.
pub(crate) fn set_of(mut items: Vec<Value>) -> Vec<Value> {
    items.sort_by(compare_values);
    items.dedup();
    items
}

/// A total order over values, for sets and `sort`: strings lexically, numbers numerically,
/// other kinds by kind.
pub(crate) fn compare_values(a: &Value, b: &Value) -> std::cmp::Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(_) => 2,
            Value::String(_) => 3,
            Value::List(_) => 4,
            Value::Object(_) => 5,
        }
    }
    match (a, b) {
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Number(x), Value::Number(y)) => x.total_cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::List(x), Value::List(y)) => {
            for (p, q) in x.iter().zip(y) {
                let ord = compare_values(p, q);
                if ord.is_ne() {
                    return ord;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}
