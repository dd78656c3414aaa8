//! The HCL function library a jobspec can call: go-cty's stdlib and go-cty-funcs as Nomad's
//! `jobspec2/functions.go` registers them, plus Terraform's `regex`, `regexall` and `to*`
//! conversions.
//!
//! Called by the evaluator (`eval.rs`) with already evaluated arguments; `try`, `can` and
//! `convert` need their arguments unevaluated and live in the evaluator.
//!
//! Invariants: the filesystem functions exist but always fail ("filesystem function disabled"),
//! as the parse API runs with `AllowFS: false`; nothing here reads files, the clock or the
//! network except `uuidv4` (randomness). Every function checks its argument count and types
//! and reports failures as values of [`FnError`], never by panicking; functions that could build
//! huge values (`range`, `format` widths) are capped.

use std::collections::BTreeMap;

use super::calendar;
use super::diag::{Diag, Pos};
use super::digest;
use super::value::{Type, Value, format_number, set_of};

/// Why a function call failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FnError {
    Unknown,
    NotEnough { expected: usize },
    TooMany { expected: usize },
    Failed(String),
}

impl FnError {
    pub(crate) fn into_diag(self, name: &str, pos: Option<Pos>) -> Diag {
        match self {
            FnError::Unknown => Diag::new(
                "Call to unknown function",
                format!("There is no function named {name:?}."),
            ),
            FnError::NotEnough { expected } => Diag::new(
                "Not enough function arguments",
                format!("Function {name:?} expects {expected} argument(s)."),
            ),
            FnError::TooMany { expected } => Diag::new(
                "Too many function arguments",
                format!("Function {name:?} expects only {expected} argument(s)."),
            ),
            FnError::Failed(message) => Diag::new(
                "Error in function call",
                format!("Call to function {name:?} failed: {message}."),
            ),
        }
        .at(pos)
    }
}

type FnResult = Result<Value, FnError>;

fn fail(message: impl Into<String>) -> FnError {
    FnError::Failed(message.into())
}

/// The most elements `range` may produce (go-cty's limit).
const RANGE_LIMIT: usize = 1024;

/// The widest field `format` pads to.
const FORMAT_WIDTH_LIMIT: usize = 4096;

/// (min, max) argument counts; `None` max means variadic.
fn arity(name: &str) -> Option<(usize, Option<usize>)> {
    let fixed = |n| Some((n, Some(n)));
    match name {
        "abs" | "base64decode" | "base64encode" | "ceil" | "chomp" | "cidrnetmask" | "compact"
        | "csvdecode" | "distinct" | "flatten" | "floor" | "jsondecode" | "jsonencode" | "keys"
        | "length" | "lower" | "md5" | "reverse" | "sha1" | "sha256" | "sha512" | "signum"
        | "sort" | "strlen" | "strrev" | "title" | "trimspace" | "upper" | "urlencode"
        | "values" | "tobool" | "tonumber" | "tostring" | "tolist" | "tomap" | "toset"
        | "abspath" | "basename" | "dirname" | "file" | "filebase64" | "fileexists"
        | "pathexpand" => fixed(1),
        "chunklist" | "cidrhost" | "contains" | "element" | "formatdate" | "index" | "indent"
        | "log" | "parseint" | "pow" | "split" | "timeadd" | "trim" | "trimprefix"
        | "trimsuffix" | "uuidv5" | "zipmap" | "regex" | "regexall" | "fileset" => fixed(2),
        "cidrsubnet" | "replace" | "regex_replace" | "slice" | "substr" => fixed(3),
        "uuidv4" => fixed(0),
        "lookup" => Some((2, Some(3))),
        "range" => Some((1, Some(3))),
        "format" | "formatlist" | "cidrsubnets" | "setintersection" | "setunion" => Some((1, None)),
        "join" => Some((2, None)),
        "coalesce" | "coalescelist" | "concat" | "max" | "merge" | "min" | "setproduct" => {
            Some((0, None))
        }
        _ => None,
    }
}

/// Calls function `name` with evaluated `args`.
pub(crate) fn call(name: &str, args: Vec<Value>) -> FnResult {
    let Some((min, max)) = arity(name) else {
        return Err(FnError::Unknown);
    };
    if args.len() < min {
        return Err(FnError::NotEnough { expected: min });
    }
    if let Some(max) = max
        && args.len() > max
    {
        return Err(FnError::TooMany { expected: max });
    }
    let arg = |i: usize| args.get(i).cloned().unwrap_or(Value::Null);
    match name {
        // Numbers.
        "abs" => Ok(Value::Number(number(&arg(0))?.abs())),
        "ceil" => Ok(Value::Number(number(&arg(0))?.ceil())),
        "floor" => Ok(Value::Number(number(&arg(0))?.floor())),
        "log" => finite(number(&arg(0))?.ln() / number(&arg(1))?.ln()),
        "pow" => finite(number(&arg(0))?.powf(number(&arg(1))?)),
        "signum" => {
            let n = number(&arg(0))?;
            Ok(Value::Number(if n > 0.0 {
                1.0
            } else if n < 0.0 {
                -1.0
            } else {
                0.0
            }))
        }
        "parseint" => parseint(&string(&arg(0))?, &arg(1)),
        "max" | "min" => {
            if args.is_empty() {
                return Err(fail("must pass at least one number"));
            }
            let mut best: Option<f64> = None;
            for value in &args {
                let n = number(value)?;
                best = Some(match best {
                    None => n,
                    Some(b) if name == "max" => b.max(n),
                    Some(b) => b.min(n),
                });
            }
            Ok(Value::Number(best.unwrap_or(0.0)))
        }
        // Strings.
        "chomp" => Ok(Value::String(
            string(&arg(0))?.trim_end_matches(['\n', '\r']).to_owned(),
        )),
        "format" => {
            let spec = string(&arg(0))?;
            format(&spec, args.get(1..).unwrap_or(&[])).map(Value::String)
        }
        "formatlist" => formatlist(&args),
        "indent" => {
            let spaces = integer(&arg(0))?;
            let text = string(&arg(1))?;
            let pad = " ".repeat(usize::try_from(spaces).unwrap_or(0).min(FORMAT_WIDTH_LIMIT));
            Ok(Value::String(text.replace('\n', &format!("\n{pad}"))))
        }
        "join" => {
            let sep = string(&arg(0))?;
            let mut parts = Vec::new();
            for list_value in args.iter().skip(1) {
                for item in list(list_value)? {
                    if item.is_null() {
                        return Err(fail("element is null; cannot concatenate null values"));
                    }
                    parts.push(string(&item)?);
                }
            }
            Ok(Value::String(parts.join(&sep)))
        }
        "lower" => Ok(Value::String(string(&arg(0))?.to_lowercase())),
        "upper" => Ok(Value::String(string(&arg(0))?.to_uppercase())),
        "title" => Ok(Value::String(title(&string(&arg(0))?))),
        "trimspace" => Ok(Value::String(string(&arg(0))?.trim().to_owned())),
        "trim" => {
            let cutset: Vec<char> = string(&arg(1))?.chars().collect();
            Ok(Value::String(
                string(&arg(0))?
                    .trim_matches(|c| cutset.contains(&c))
                    .to_owned(),
            ))
        }
        "trimprefix" => {
            let text = string(&arg(0))?;
            let prefix = string(&arg(1))?;
            Ok(Value::String(
                text.strip_prefix(prefix.as_str())
                    .unwrap_or(&text)
                    .to_owned(),
            ))
        }
        "trimsuffix" => {
            let text = string(&arg(0))?;
            let suffix = string(&arg(1))?;
            Ok(Value::String(
                text.strip_suffix(suffix.as_str())
                    .unwrap_or(&text)
                    .to_owned(),
            ))
        }
        "split" => {
            let sep = string(&arg(0))?;
            let text = string(&arg(1))?;
            let parts: Vec<Value> = if sep.is_empty() {
                text.chars().map(|c| Value::String(c.to_string())).collect()
            } else {
                text.split(sep.as_str()).map(Value::string).collect()
            };
            Ok(Value::List(parts))
        }
        "replace" => {
            let text = string(&arg(0))?;
            let search = string(&arg(1))?;
            let replacement = string(&arg(2))?;
            if search.is_empty() {
                return Ok(Value::String(text));
            }
            Ok(Value::String(text.replace(&search, &replacement)))
        }
        "regex_replace" => {
            let text = string(&arg(0))?;
            let re = compile(&string(&arg(1))?)?;
            let replacement = string(&arg(2))?;
            Ok(Value::String(
                re.replace_all(&text, replacement.as_str()).into_owned(),
            ))
        }
        "regex" => {
            let re = compile(&string(&arg(0))?)?;
            let text = string(&arg(1))?;
            let caps = re
                .captures(&text)
                .ok_or_else(|| fail("pattern did not match any part of the given string"))?;
            Ok(regex_result(&re, &caps))
        }
        "regexall" => {
            let re = compile(&string(&arg(0))?)?;
            let text = string(&arg(1))?;
            Ok(Value::List(
                re.captures_iter(&text)
                    .map(|caps| regex_result(&re, &caps))
                    .collect(),
            ))
        }
        "substr" => substr(&string(&arg(0))?, integer(&arg(1))?, integer(&arg(2))?),
        "strrev" => Ok(Value::String(string(&arg(0))?.chars().rev().collect())),
        "strlen" => {
            #[allow(clippy::cast_precision_loss)]
            let len = string(&arg(0))?.chars().count() as f64;
            Ok(Value::Number(len))
        }
        // Collections.
        "coalesce" => args
            .into_iter()
            .find(|v| !v.is_null())
            .ok_or_else(|| fail("no non-null arguments")),
        "coalescelist" => {
            for value in &args {
                if let Value::List(items) = value {
                    if !items.is_empty() {
                        return Ok(value.clone());
                    }
                } else if !value.is_null() {
                    return Err(fail("all arguments must be lists or tuples"));
                }
            }
            Err(fail("no non-null arguments"))
        }
        "compact" => {
            let mut out = Vec::new();
            for item in list(&arg(0))? {
                match item {
                    Value::Null => {}
                    Value::String(s) if s.is_empty() => {}
                    other => out.push(Value::String(string(&other)?)),
                }
            }
            Ok(Value::List(out))
        }
        "concat" => {
            let mut out = Vec::new();
            for value in &args {
                out.extend(list(value)?);
            }
            Ok(Value::List(out))
        }
        "contains" => {
            let items = list(&arg(0))?;
            let needle = arg(1);
            Ok(Value::Bool(
                items.iter().any(|item| loosely_equal(item, &needle)),
            ))
        }
        "distinct" => {
            let mut out: Vec<Value> = Vec::new();
            for item in list(&arg(0))? {
                if !out.contains(&item) {
                    out.push(item);
                }
            }
            Ok(Value::List(out))
        }
        "element" => {
            let items = list(&arg(0))?;
            let index = integer(&arg(1))?;
            if items.is_empty() {
                return Err(fail("cannot use element function with an empty list"));
            }
            if index < 0 {
                return Err(fail("cannot use element function with a negative index"));
            }
            let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
            let at = usize::try_from(index % len).unwrap_or(0);
            items.get(at).cloned().ok_or_else(|| fail("invalid index"))
        }
        "flatten" => {
            let mut out = Vec::new();
            flatten_into(list(&arg(0))?, &mut out, 0)?;
            Ok(Value::List(out))
        }
        "index" => {
            let items = list(&arg(0))?;
            let needle = arg(1);
            items
                .iter()
                .position(|item| loosely_equal(item, &needle))
                .map(|i| Value::Number(count(i)))
                .ok_or_else(|| fail("item not found"))
        }
        "keys" => Ok(Value::List(
            object(&arg(0))?.into_keys().map(Value::String).collect(),
        )),
        "values" => Ok(Value::List(object(&arg(0))?.into_values().collect())),
        "length" => match arg(0) {
            Value::String(s) => Ok(Value::Number(count(s.chars().count()))),
            Value::List(items) => Ok(Value::Number(count(items.len()))),
            Value::Object(map) => Ok(Value::Number(count(map.len()))),
            Value::Null => Err(fail("argument must not be null")),
            other => Err(fail(format!(
                "collection must be a list, a map or a tuple, not {}",
                other.type_name()
            ))),
        },
        "lookup" => {
            let map = object(&arg(0))?;
            let key = string(&arg(1))?;
            match map.get(&key) {
                Some(value) => Ok(value.clone()),
                None if args.len() == 3 => Ok(arg(2)),
                None => Err(fail(format!("lookup failed to find key {key:?}"))),
            }
        }
        "merge" => {
            let mut out = BTreeMap::new();
            for value in &args {
                if value.is_null() {
                    continue;
                }
                out.extend(object(value)?);
            }
            Ok(Value::Object(out))
        }
        "range" => range(&args),
        "reverse" => {
            let mut items = list(&arg(0))?;
            items.reverse();
            Ok(Value::List(items))
        }
        "slice" => {
            let items = list(&arg(0))?;
            let start = integer(&arg(1))?;
            let end = integer(&arg(2))?;
            if start < 0 {
                return Err(fail("from index must be greater than or equal to 0"));
            }
            let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
            if end > len {
                return Err(fail(
                    "to index must be less than or equal to the length of the input collection",
                ));
            }
            if start > end {
                return Err(fail("from index must be less than or equal to index"));
            }
            let (start, end) = (
                usize::try_from(start).unwrap_or(0),
                usize::try_from(end).unwrap_or(0),
            );
            Ok(Value::List(items.get(start..end).unwrap_or(&[]).to_vec()))
        }
        "sort" => {
            let mut strings = Vec::new();
            for item in list(&arg(0))? {
                if item.is_null() {
                    return Err(fail(
                        "given list element is null; a null value cannot be sorted",
                    ));
                }
                strings.push(string(&item)?);
            }
            strings.sort();
            Ok(Value::List(
                strings.into_iter().map(Value::String).collect(),
            ))
        }
        "zipmap" => {
            let keys = list(&arg(0))?;
            let values = list(&arg(1))?;
            if keys.len() != values.len() {
                return Err(fail(format!(
                    "number of keys ({}) does not match number of values ({})",
                    keys.len(),
                    values.len()
                )));
            }
            let mut out = BTreeMap::new();
            for (key, value) in keys.iter().zip(values) {
                out.insert(string(key)?, value);
            }
            Ok(Value::Object(out))
        }
        "chunklist" => {
            let items = list(&arg(0))?;
            let size = integer(&arg(1))?;
            if size < 0 {
                return Err(fail("the size argument must be positive"));
            }
            if size == 0 {
                return Ok(Value::List(vec![Value::List(items)]));
            }
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            Ok(Value::List(
                items
                    .chunks(size)
                    .map(|chunk| Value::List(chunk.to_vec()))
                    .collect(),
            ))
        }
        "setunion" => {
            let mut out = Vec::new();
            for value in &args {
                out.extend(list(value)?);
            }
            Ok(Value::List(set_of(out)))
        }
        "setintersection" => {
            let mut sets = args.iter().map(list);
            let mut out = set_of(sets.next().transpose()?.unwrap_or_default());
            for set in sets {
                let set = set?;
                out.retain(|item| set.contains(item));
            }
            Ok(Value::List(out))
        }
        "setproduct" => {
            let mut product: Vec<Vec<Value>> = vec![Vec::new()];
            if args.is_empty() {
                return Err(fail("at least two arguments are required"));
            }
            for value in &args {
                let set = list(value)?;
                let mut next = Vec::new();
                for prefix in &product {
                    for item in &set {
                        if next.len() >= RANGE_LIMIT * 64 {
                            return Err(fail("the product has too many elements"));
                        }
                        let mut combined = prefix.clone();
                        combined.push(item.clone());
                        next.push(combined);
                    }
                }
                product = next;
            }
            Ok(Value::List(product.into_iter().map(Value::List).collect()))
        }
        // Conversions.
        "tobool" => convert(Type::Bool, arg(0)),
        "tonumber" => convert(Type::Number, arg(0)),
        "tostring" => convert(Type::String, arg(0)),
        "tolist" => convert(Type::List(Box::new(Type::Any)), arg(0)),
        "toset" => convert(Type::Set(Box::new(Type::Any)), arg(0)),
        "tomap" => convert(Type::Map(Box::new(Type::Any)), arg(0)),
        // Encodings.
        "jsonencode" => Ok(Value::String(json_encode(&arg(0)))),
        "jsondecode" => {
            let text = string(&arg(0))?;
            let json: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
            Ok(Value::from_json(&json))
        }
        "csvdecode" => csv_decode(&string(&arg(0))?),
        "base64encode" => Ok(Value::String(digest::base64_encode(
            string(&arg(0))?.as_bytes(),
        ))),
        "base64decode" => {
            let text = string(&arg(0))?;
            let bytes = digest::base64_decode(&text)
                .ok_or_else(|| fail(format!("failed to decode base64 data {text:?}")))?;
            String::from_utf8(bytes)
                .map(Value::String)
                .map_err(|_| fail("the result of decoding the provided string is not valid UTF-8"))
        }
        "urlencode" => Ok(Value::String(query_escape(&string(&arg(0))?))),
        "md5" => Ok(Value::String(digest::md5_hex(string(&arg(0))?.as_bytes()))),
        "sha1" => Ok(Value::String(digest::sha1_hex(string(&arg(0))?.as_bytes()))),
        "sha256" => Ok(Value::String(digest::sha256_hex(
            string(&arg(0))?.as_bytes(),
        ))),
        "sha512" => Ok(Value::String(digest::sha512_hex(
            string(&arg(0))?.as_bytes(),
        ))),
        "uuidv4" => Ok(Value::String(uuid::Uuid::new_v4().to_string())),
        "uuidv5" => uuidv5(&string(&arg(0))?, &string(&arg(1))?),
        // Networks.
        "cidrhost" => cidr_host(&string(&arg(0))?, integer(&arg(1))?),
        "cidrnetmask" => cidr_netmask(&string(&arg(0))?),
        "cidrsubnet" => cidr_subnet(&string(&arg(0))?, integer(&arg(1))?, integer(&arg(2))?),
        "cidrsubnets" => {
            let prefix = string(&arg(0))?;
            let mut bits = Vec::new();
            for value in args.iter().skip(1) {
                bits.push(integer(value)?);
            }
            cidr_subnets(&prefix, &bits)
        }
        // Time.
        "formatdate" => calendar::format_date(&string(&arg(0))?, &string(&arg(1))?)
            .map(Value::String)
            .map_err(fail),
        "timeadd" => calendar::time_add(&string(&arg(0))?, &string(&arg(1))?)
            .map(Value::String)
            .map_err(fail),
        // The filesystem is off limits to the parse API.
        "abspath" | "basename" | "dirname" | "file" | "filebase64" | "fileexists" | "fileset"
        | "pathexpand" => Err(fail("filesystem function disabled")),
        _ => Err(FnError::Unknown),
    }
}

#[allow(clippy::cast_precision_loss)]
fn count(n: usize) -> f64 {
    n as f64
}

fn finite(n: f64) -> FnResult {
    if n.is_finite() {
        Ok(Value::Number(n))
    } else {
        Err(fail("the result is not a finite number"))
    }
}

fn convert(ty: Type, value: Value) -> FnResult {
    ty.convert(value)
        .map_err(|e| fail(format!("cannot convert: {e}")))
}

fn string(value: &Value) -> Result<String, FnError> {
    match value {
        Value::Null => Err(fail("argument must not be null")),
        other => other.to_str().ok_or_else(|| fail("string required")),
    }
}

fn number(value: &Value) -> Result<f64, FnError> {
    match value {
        Value::Null => Err(fail("argument must not be null")),
        other => other
            .to_number()
            .ok_or_else(|| fail("a number is required")),
    }
}

fn integer(value: &Value) -> Result<i64, FnError> {
    let n = number(value)?;
    if n.fract() != 0.0 || n.abs() > 9.0e15 {
        return Err(fail("a whole number is required"));
    }
    #[allow(clippy::cast_possible_truncation)]
    Ok(n as i64)
}

fn list(value: &Value) -> Result<Vec<Value>, FnError> {
    match value {
        Value::List(items) => Ok(items.clone()),
        Value::Null => Err(fail("argument must not be null")),
        other => Err(fail(format!(
            "list or tuple required, not {}",
            other.type_name()
        ))),
    }
}

fn object(value: &Value) -> Result<BTreeMap<String, Value>, FnError> {
    match value {
        Value::Object(map) => Ok(map.clone()),
        Value::Null => Err(fail("argument must not be null")),
        other => Err(fail(format!(
            "map or object required, not {}",
            other.type_name()
        ))),
    }
}

/// Equality after converting primitives to strings (cty unifies `contains(["1"], 1)`).
fn loosely_equal(a: &Value, b: &Value) -> bool {
    if a == b {
        return true;
    }
    match (a.to_str(), b.to_str()) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

fn flatten_into(items: Vec<Value>, out: &mut Vec<Value>, depth: usize) -> Result<(), FnError> {
    if depth > 64 {
        return Err(fail("the list is nested too deeply"));
    }
    for item in items {
        match item {
            Value::List(inner) => flatten_into(inner, out, depth + 1)?,
            other => out.push(other),
        }
    }
    Ok(())
}

fn parseint(text: &str, base: &Value) -> FnResult {
    let base = integer(base)?;
    if !(2..=62).contains(&base) {
        return Err(fail(
            "base must be a whole number between 2 and 62 inclusive",
        ));
    }
    let err = || fail(format!("cannot parse {text:?} as a base {base} integer"));
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if digits.is_empty() {
        return Err(err());
    }
    let mut total: f64 = 0.0;
    for ch in digits.chars() {
        let digit = match ch {
            '0'..='9' => u32::from(ch) - u32::from('0'),
            'a'..='z' => u32::from(ch) - u32::from('a') + 10,
            'A'..='Z' if base <= 36 => u32::from(ch) - u32::from('A') + 10,
            'A'..='Z' => u32::from(ch) - u32::from('A') + 36,
            _ => return Err(err()),
        };
        if i64::from(digit) >= base {
            return Err(err());
        }
        #[allow(clippy::cast_precision_loss)]
        {
            total = total * base as f64 + f64::from(digit);
        }
    }
    Ok(Value::Number(if negative { -total } else { total }))
}

fn title(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at_word_start = true;
    for ch in text.chars() {
        if at_word_start && ch.is_alphabetic() {
            out.extend(ch.to_uppercase());
        } else {
            out.push(ch);
        }
        at_word_start = !(ch.is_alphanumeric() || ch == '_' || ch == '\'');
    }
    out
}

fn substr(text: &str, offset: i64, length: i64) -> FnResult {
    let chars: Vec<char> = text.chars().collect();
    let len = i64::try_from(chars.len()).unwrap_or(i64::MAX);
    let mut start = offset;
    if start < 0 {
        start += len;
        if start < 0 {
            return Err(fail("offset is out of range"));
        }
    }
    if start > len {
        return Err(fail("offset is out of range"));
    }
    let end = if length < 0 {
        len
    } else {
        start.saturating_add(length).min(len)
    };
    let (start, end) = (
        usize::try_from(start).unwrap_or(0),
        usize::try_from(end).unwrap_or(0),
    );
    Ok(Value::String(
        chars.get(start..end).unwrap_or(&[]).iter().collect(),
    ))
}

fn range(args: &[Value]) -> FnResult {
    let (start, end, step) = match args {
        [end] => (0.0, number(end)?, 1.0),
        [start, end] => {
            let (s, e) = (number(start)?, number(end)?);
            (s, e, if s <= e { 1.0 } else { -1.0 })
        }
        [start, end, step] => (number(start)?, number(end)?, number(step)?),
        _ => return Err(fail("range expects one to three arguments")),
    };
    if step == 0.0 {
        return Err(fail("step must not be zero"));
    }
    if (step > 0.0 && start > end) || (step < 0.0 && start < end) {
        return Err(fail(
            "step must be the same direction as the distance between start and end",
        ));
    }
    let mut out = Vec::new();
    let mut i = start;
    while (step > 0.0 && i < end) || (step < 0.0 && i > end) {
        if out.len() >= RANGE_LIMIT {
            return Err(fail(format!(
                "more than {RANGE_LIMIT} values were generated; either decrease the difference between start and end or use a smaller step"
            )));
        }
        out.push(Value::Number(i));
        i += step;
    }
    Ok(Value::List(out))
}

fn compile(pattern: &str) -> Result<regex::Regex, FnError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| fail(format!("invalid regular expression pattern: {e}")))
}

/// What `regex` returns for one match: the match, the capture list, or the named captures.
fn regex_result(re: &regex::Regex, caps: &regex::Captures<'_>) -> Value {
    let group_count = re.captures_len().saturating_sub(1);
    if group_count == 0 {
        return Value::String(caps.get(0).map_or("", |m| m.as_str()).to_owned());
    }
    let names: Vec<Option<&str>> = re.capture_names().skip(1).collect();
    if names.iter().any(Option::is_some) {
        let mut map = BTreeMap::new();
        for name in names.into_iter().flatten() {
            let value = caps
                .name(name)
                .map_or(Value::Null, |m| Value::String(m.as_str().to_owned()));
            map.insert(name.to_owned(), value);
        }
        return Value::Object(map);
    }
    Value::List(
        (1..=group_count)
            .map(|i| {
                caps.get(i)
                    .map_or(Value::Null, |m| Value::String(m.as_str().to_owned()))
            })
            .collect(),
    )
}

/// JSON as go-cty's `jsonencode` writes it: compact, keys sorted, `<`, `>`, `&` escaped.
pub(crate) fn json_encode(value: &Value) -> String {
    let text = value.to_json().to_string();
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            other => out.push(other),
        }
    }
    out
}

/// Go's `url.QueryEscape`.
fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

fn uuidv5(namespace: &str, name: &str) -> FnResult {
    let ns = match namespace {
        "dns" => uuid::Uuid::NAMESPACE_DNS,
        "url" => uuid::Uuid::NAMESPACE_URL,
        "oid" => uuid::Uuid::NAMESPACE_OID,
        "x500" => uuid::Uuid::NAMESPACE_X500,
        other => uuid::Uuid::parse_str(other)
            .map_err(|e| fail(format!("uuidv5() doesn't support namespace {other} ({e})")))?,
    };
    let mut input = ns.as_bytes().to_vec();
    input.extend_from_slice(name.as_bytes());
    let hash = digest::sha1(&input);
    let mut bytes = [0u8; 16];
    for (dst, src) in bytes.iter_mut().zip(hash.iter()) {
        *dst = *src;
    }
    let uuid = uuid::Builder::from_sha1_bytes(bytes).into_uuid();
    Ok(Value::String(uuid.to_string()))
}

/// RFC 4180 CSV with a header row, as go-cty's `csvdecode`.
fn csv_decode(text: &str) -> FnResult {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row: Vec<String> = Vec::new();
    let mut field = String::new();
    let mut in_quotes = false;
    let mut field_started = false;
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        if in_quotes {
            if ch == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    field.push('"');
                } else {
                    in_quotes = false;
                }
            } else {
                field.push(ch);
            }
            continue;
        }
        match ch {
            '"' if !field_started => {
                in_quotes = true;
                field_started = true;
            }
            ',' => {
                row.push(std::mem::take(&mut field));
                field_started = false;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
                field_started = false;
            }
            other => {
                field.push(other);
                field_started = true;
            }
        }
    }
    if in_quotes {
        return Err(fail("extraneous or missing \" in quoted-field"));
    }
    if field_started || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    let mut rows = rows.into_iter();
    let Some(header) = rows.next() else {
        return Err(fail("missing header line"));
    };
    let mut out = Vec::new();
    for (line, record) in rows.enumerate() {
        if record.len() != header.len() {
            return Err(fail(format!(
                "record on line {}: wrong number of fields",
                line + 2
            )));
        }
        out.push(Value::Object(
            header
                .iter()
                .cloned()
                .zip(record.into_iter().map(Value::String))
                .collect(),
        ));
    }
    Ok(Value::List(out))
}

fn formatlist(args: &[Value]) -> FnResult {
    let spec = string(args.first().unwrap_or(&Value::Null))?;
    let rest = args.get(1..).unwrap_or(&[]);
    let mut length: Option<usize> = None;
    for value in rest {
        if let Value::List(items) = value {
            match length {
                Some(n) if n != items.len() => {
                    return Err(fail("all lists must have the same number of elements"));
                }
                _ => length = Some(items.len()),
            }
        }
    }
    let Some(length) = length else {
        return format(&spec, rest).map(|s| Value::List(vec![Value::String(s)]));
    };
    let mut out = Vec::with_capacity(length);
    for i in 0..length {
        let row: Vec<Value> = rest
            .iter()
            .map(|value| match value {
                Value::List(items) => items.get(i).cloned().unwrap_or(Value::Null),
                other => other.clone(),
            })
            .collect();
        out.push(Value::String(format(&spec, &row)?));
    }
    Ok(Value::List(out))
}

/// go-cty's `format`: Go-style verbs `%v %#v %t %s %q %d %b %o %x %X %e %E %f %g %G %%`, with
/// flags, width, precision and `%[n]` argument indexes.
pub(crate) fn format(spec: &str, args: &[Value]) -> Result<String, FnError> {
    let chars: Vec<char> = spec.chars().collect();
    let mut out = String::new();
    let mut next_arg = 0usize;
    let mut i = 0usize;
    while let Some(&ch) = chars.get(i) {
        i += 1;
        if ch != '%' {
            out.push(ch);
            continue;
        }
        let verb_start = i - 1;
        let mut flags = FormatFlags::default();
        while let Some(&flag) = chars.get(i) {
            match flag {
                '-' => flags.minus = true,
                '+' => flags.plus = true,
                ' ' => flags.space = true,
                '0' => flags.zero = true,
                '#' => flags.sharp = true,
                _ => break,
            }
            i += 1;
        }
        if chars.get(i) == Some(&'[') {
            let close = chars
                .get(i..)
                .and_then(|rest| rest.iter().position(|c| *c == ']'))
                .ok_or_else(|| fail("unterminated argument index"))?;
            let index_text: String = chars.get(i + 1..i + close).unwrap_or(&[]).iter().collect();
            let index: usize = index_text
                .parse()
                .map_err(|_| fail(format!("invalid argument index {index_text:?}")))?;
            if index == 0 {
                return Err(fail("argument indexes start at 1"));
            }
            next_arg = index - 1;
            i += close + 1;
        }
        let mut width = None;
        let mut digits = 0usize;
        while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
            digits = digits.saturating_mul(10).saturating_add(d as usize);
            width = Some(digits);
            i += 1;
        }
        let mut precision = None;
        if chars.get(i) == Some(&'.') {
            i += 1;
            let mut p = 0usize;
            while let Some(d) = chars.get(i).and_then(|c| c.to_digit(10)) {
                p = p.saturating_mul(10).saturating_add(d as usize);
                i += 1;
            }
            precision = Some(p.min(FORMAT_WIDTH_LIMIT));
        }
        if width.is_some_and(|w| w > FORMAT_WIDTH_LIMIT) {
            return Err(fail("the field width is too large"));
        }
        let Some(&verb) = chars.get(i) else {
            return Err(fail("format string ends with an incomplete verb"));
        };
        i += 1;
        if verb == '%' {
            out.push('%');
            continue;
        }
        let verb_text: String = chars.get(verb_start..i).unwrap_or(&[]).iter().collect();
        let Some(value) = args.get(next_arg) else {
            return Err(fail(format!(
                "not enough arguments for {verb_text:?} at {}: need index {} but have only {} arguments",
                verb_start,
                next_arg + 1,
                args.len()
            )));
        };
        next_arg += 1;
        let body = format_verb(verb, &flags, precision, value, &verb_text)?;
        out.push_str(&pad(body, width, &flags, verb));
    }
    if next_arg < args.len() {
        return Err(fail(format!(
            "too many arguments; only {next_arg} used by format string"
        )));
    }
    Ok(out)
}

#[derive(Debug, Default)]
struct FormatFlags {
    minus: bool,
    plus: bool,
    space: bool,
    zero: bool,
    sharp: bool,
}

fn format_verb(
    verb: char,
    flags: &FormatFlags,
    precision: Option<usize>,
    value: &Value,
    verb_text: &str,
) -> Result<String, FnError> {
    let unsupported = || {
        fail(format!(
            "unsupported value for {verb_text:?}: {} not supported",
            value.type_name()
        ))
    };
    let sign = |n: f64, body: String| -> String {
        if n >= 0.0 && flags.plus {
            format!("+{body}")
        } else if n >= 0.0 && flags.space {
            format!(" {body}")
        } else {
            body
        }
    };
    match verb {
        'v' => {
            if flags.sharp {
                return Ok(json_encode(value));
            }
            Ok(match value {
                Value::Null => "null".to_owned(),
                Value::List(_) | Value::Object(_) => json_encode(value),
                other => other.to_str().unwrap_or_default(),
            })
        }
        't' => value
            .to_bool()
            .map(|b| b.to_string())
            .ok_or_else(unsupported),
        's' => {
            let text = value.to_str().ok_or_else(unsupported)?;
            Ok(match precision {
                Some(p) => text.chars().take(p).collect(),
                None => text,
            })
        }
        'q' => {
            let text = value.to_str().ok_or_else(unsupported)?;
            Ok(serde_json::Value::String(text).to_string())
        }
        'd' | 'b' | 'o' | 'x' | 'X' => {
            if let (Value::String(s), 'x' | 'X') = (value, verb) {
                let hex: String = s.bytes().map(|b| format!("{b:02x}")).collect();
                return Ok(if verb == 'X' { hex.to_uppercase() } else { hex });
            }
            let n = value.to_number().ok_or_else(unsupported)?;
            if n.fract() != 0.0 || n.abs() > 9.0e18 {
                return Err(fail(format!(
                    "unsupported value for {verb_text:?}: an integer is required"
                )));
            }
            #[allow(clippy::cast_possible_truncation)]
            let int = n as i64;
            let magnitude = int.unsigned_abs();
            let digits = match verb {
                'd' => magnitude.to_string(),
                'b' => format!("{magnitude:b}"),
                'o' => format!("{magnitude:o}"),
                'x' => format!("{magnitude:x}"),
                _ => format!("{magnitude:X}"),
            };
            let digits = if int < 0 {
                format!("-{digits}")
            } else {
                digits
            };
            Ok(sign(n, digits))
        }
        'e' | 'E' | 'f' | 'F' | 'g' | 'G' => {
            let n = value.to_number().ok_or_else(unsupported)?;
            let body = match verb {
                'e' | 'E' => {
                    let text = go_exponent(&format!("{:.*e}", precision.unwrap_or(6), n));
                    if verb == 'E' {
                        text.to_uppercase()
                    } else {
                        text
                    }
                }
                'f' | 'F' => format!("{:.*}", precision.unwrap_or(6), n),
                _ => {
                    let text = match precision {
                        Some(p) => go_exponent(&format!("{:.*e}", p.saturating_sub(1), n)),
                        None if n != 0.0 && (n.abs() >= 1e21 || n.abs() < 1e-4) => {
                            go_exponent(&format!("{n:e}"))
                        }
                        None => format_number(n),
                    };
                    if verb == 'G' {
                        text.to_uppercase()
                    } else {
                        text
                    }
                }
            };
            Ok(sign(n, body))
        }
        _ => Err(fail(format!(
            "unrecognized format character {verb:?} in {verb_text:?}"
        ))),
    }
}

/// Rewrites Rust's `1.5e3` exponent into Go's `1.5e+03`.
fn go_exponent(text: &str) -> String {
    let Some((mantissa, exponent)) = text.split_once('e') else {
        return text.to_owned();
    };
    let (sign, digits) = match exponent.strip_prefix('-') {
        Some(d) => ('-', d),
        None => ('+', exponent),
    };
    let digits = if digits.len() < 2 {
        format!("0{digits}")
    } else {
        digits.to_owned()
    };
    format!("{mantissa}e{sign}{digits}")
}

fn pad(body: String, width: Option<usize>, flags: &FormatFlags, verb: char) -> String {
    let Some(width) = width else {
        return body;
    };
    let len = body.chars().count();
    if len >= width {
        return body;
    }
    let fill = width - len;
    if flags.minus {
        return format!("{body}{}", " ".repeat(fill));
    }
    if flags.zero
        && matches!(
            verb,
            'd' | 'b' | 'o' | 'x' | 'X' | 'e' | 'E' | 'f' | 'F' | 'g' | 'G'
        )
    {
        let (sign, digits) = match body.chars().next() {
            Some(c @ ('-' | '+' | ' ')) => (c.to_string(), body.get(1..).unwrap_or("").to_owned()),
            _ => (String::new(), body.clone()),
        };
        return format!("{sign}{}{digits}", "0".repeat(fill));
    }
    format!("{}{body}", " ".repeat(fill))
}

fn parse_cidr(prefix: &str) -> Result<(u128, u32, bool), FnError> {
    let invalid = || {
        fail(format!(
            "invalid CIDR expression: invalid CIDR address: {prefix}"
        ))
    };
    let (addr, len) = prefix.split_once('/').ok_or_else(invalid)?;
    let len: u32 = len.parse().map_err(|_| invalid())?;
    if let Ok(v4) = addr.parse::<std::net::Ipv4Addr>() {
        if len > 32 {
            return Err(invalid());
        }
        return Ok((u128::from(u32::from(v4)), len, false));
    }
    let v6 = addr.parse::<std::net::Ipv6Addr>().map_err(|_| invalid())?;
    if len > 128 {
        return Err(invalid());
    }
    Ok((u128::from(v6), len, true))
}

fn mask(bits: u32, len: u32) -> u128 {
    if len == 0 {
        return 0;
    }
    let all = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    let host_bits = bits - len.min(bits);
    if host_bits >= 128 {
        0
    } else {
        all & !((1u128 << host_bits) - 1)
    }
}

fn render_ip(addr: u128, v6: bool) -> String {
    if v6 {
        std::net::Ipv6Addr::from(addr).to_string()
    } else {
        std::net::Ipv4Addr::from(u32::try_from(addr).unwrap_or(0)).to_string()
    }
}

fn cidr_host(prefix: &str, hostnum: i64) -> FnResult {
    let (addr, len, v6) = parse_cidr(prefix)?;
    let bits = if v6 { 128 } else { 32 };
    let host_bits = bits - len;
    let network = addr & mask(bits, len);
    let size: u128 = if host_bits >= 128 {
        u128::MAX
    } else {
        1u128 << host_bits
    };
    let offset = if hostnum >= 0 {
        u128::from(hostnum.unsigned_abs())
    } else {
        size.checked_sub(u128::from(hostnum.unsigned_abs()))
            .ok_or_else(|| {
                fail(format!(
                    "prefix of {len} does not accommodate a host numbered {hostnum}"
                ))
            })?
    };
    if offset >= size {
        return Err(fail(format!(
            "prefix of {len} does not accommodate a host numbered {hostnum}"
        )));
    }
    Ok(Value::String(render_ip(network | offset, v6)))
}

fn cidr_netmask(prefix: &str) -> FnResult {
    let (_, len, v6) = parse_cidr(prefix)?;
    if v6 {
        return Err(fail("IPv6 addresses cannot have a netmask"));
    }
    Ok(Value::String(render_ip(mask(32, len), false)))
}

fn subnet(prefix: &str, newbits: i64, netnum: i64) -> Result<String, FnError> {
    let (addr, len, v6) = parse_cidr(prefix)?;
    let bits: u32 = if v6 { 128 } else { 32 };
    let newbits = u32::try_from(newbits).map_err(|_| fail("newbits must be non-negative"))?;
    let new_len = len + newbits;
    if new_len > bits {
        return Err(fail(format!(
            "insufficient address space to extend prefix of {len} by {newbits}"
        )));
    }
    let netnum =
        u128::from(u64::try_from(netnum).map_err(|_| fail("netnum must be non-negative"))?);
    if newbits < 128 && netnum >= (1u128 << newbits) {
        return Err(fail(format!(
            "prefix extension of {newbits} does not accommodate a subnet numbered {netnum}"
        )));
    }
    let shift = bits - new_len;
    let network = addr & mask(bits, len);
    let shifted = if shift >= 128 { 0 } else { netnum << shift };
    Ok(format!("{}/{new_len}", render_ip(network | shifted, v6)))
}

fn cidr_subnet(prefix: &str, newbits: i64, netnum: i64) -> FnResult {
    subnet(prefix, newbits, netnum).map(Value::String)
}

fn cidr_subnets(prefix: &str, newbits: &[i64]) -> FnResult {
    let (addr, len, v6) = parse_cidr(prefix)?;
    let bits: u32 = if v6 { 128 } else { 32 };
    let base = addr & mask(bits, len);
    let mut next = base;
    let mut out = Vec::with_capacity(newbits.len());
    for &extra in newbits {
        let extra = u32::try_from(extra).map_err(|_| fail("newbits must be non-negative"))?;
        let new_len = len + extra;
        if extra == 0 || new_len > bits {
            return Err(fail(format!(
                "would extend prefix to {new_len} bits, which is too long for an IPv{} address",
                if v6 { 6 } else { 4 }
            )));
        }
        let size_shift = bits - new_len;
        let block: u128 = if size_shift >= 128 {
            0
        } else {
            1u128 << size_shift
        };
        // Align up to this subnet's size.
        let aligned = if block == 0 {
            next
        } else {
            next.div_ceil(block).saturating_mul(block)
        };
        let span_end = aligned.saturating_add(block);
        let limit = base.saturating_add(if bits - len >= 128 {
            u128::MAX
        } else {
            1u128 << (bits - len)
        });
        if span_end > limit {
            return Err(fail(format!(
                "not enough remaining address space for a subnet with a prefix of {new_len} bits after {}",
                render_ip(next, v6)
            )));
        }
        out.push(Value::String(format!(
            "{}/{new_len}",
            render_ip(aligned, v6)
        )));
        next = span_end;
    }
    Ok(Value::List(out))
}
