//! The template language's evaluator: walks the tree of `parse.rs` over JSON values, with Go
//! `text/template`'s semantics where cairn's subset has them (truthiness, `with`/`range` moving
//! the dot, variable scopes closing at `end`, maps ranged in key order, `fmt`'s `%v` printing,
//! `<no value>` for a missing map key unless `error_on_missing_key`).
//!
//! Functions: Go's `and`, `or`, `not`, `len`, `index`, `eq`, `ne`, `lt`, `le`, `gt`, `ge`,
//! `print`, `printf` (`%s %v %d %q %t %%`), `println`; consul-template's `secret` (read, or
//! write with `key=value` parameters), `env`, `toJSON`, `toJSONPretty`, `parseJSON`,
//! `toUpper`, `toLower`, `trimSpace`, `split`, `join`, `replaceAll`, `contains`,
//! `base64Encode`, `base64Decode`, `base64URLEncode`, `base64URLDecode`. Any other name is an
//! error naming it.
//!
//! Where the data comes from is the caller's [`Host`]: `secret` answers `None` while a secret
//! has not been fetched (consul-template's missing dependency), which evaluates as nil so the
//! first pass can discover every dependency; the caller fetches them and evaluates again.
//!
//! Invariant: evaluation is pure apart from the host's calls, never panics, and bounds its
//! own work (range and output sizes) so a hostile template fails instead of exhausting memory.

use std::fmt::Write as _;

use base64::Engine as _;
use serde_json::{Map, Value};

use super::parse::{Command, Node, Operand, Pipeline};

/// The largest rendered output (bytes).
const MAX_OUTPUT: usize = 16 << 20;

/// Where functions get their data.
pub(crate) trait Host {
    /// `secret path [k=v ...]`: the secret as consul-template exposes it (`Data`, `LeaseID`,
    /// `LeaseDuration`, `Renewable`, `Warnings`), `None` while it is not fetched yet.
    fn secret(&mut self, path: &str, params: &[String]) -> Result<Option<Value>, String>;
    /// `env NAME`: the task's variable, empty when unset.
    fn env(&self, name: &str) -> String;
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    /// Nomad's `error_on_missing_key`: a missing map key fails instead of `<no value>`.
    pub(crate) error_on_missing_key: bool,
}

/// Renders `nodes`; errors read `template: <name>:<line>: executing "<name>": <reason>`.
pub(crate) fn render(
    name: &str,
    nodes: &[Node],
    host: &mut dyn Host,
    options: Options,
) -> Result<String, String> {
    let mut state = State {
        host,
        options,
        vars: vec![("$".to_owned(), Value::Null)],
        out: String::new(),
    };
    state.walk(nodes, &Value::Null).map_err(|(line, message)| {
        format!("template: {name}:{line}: executing \"{name}\": {message}")
    })?;
    Ok(state.out)
}

type EvalError = (usize, String);

struct State<'a> {
    host: &'a mut dyn Host,
    options: Options,
    vars: Vec<(String, Value)>,
    out: String,
}

impl State<'_> {
    fn walk(&mut self, nodes: &[Node], dot: &Value) -> Result<(), EvalError> {
        for node in nodes {
            match node {
                Node::Text(text) => self.write(text, 0)?,
                Node::Action(pipeline) => {
                    let value = self.pipeline(pipeline, dot)?;
                    if pipeline.vars.is_empty() {
                        let text = print_value(&value);
                        self.write(&text, pipeline.line)?;
                    }
                }
                Node::If {
                    cond,
                    then,
                    otherwise,
                } => {
                    let mark = self.vars.len();
                    let value = self.pipeline(cond, dot)?;
                    let branch = if truth(&value) { then } else { otherwise };
                    self.walk(branch, dot)?;
                    self.vars.truncate(mark);
                }
                Node::With {
                    value,
                    then,
                    otherwise,
                } => {
                    let mark = self.vars.len();
                    let value = self.pipeline(value, dot)?;
                    if truth(&value) {
                        self.walk(then, &value)?;
                    } else {
                        self.walk(otherwise, dot)?;
                    }
                    self.vars.truncate(mark);
                }
                Node::Range {
                    value,
                    body,
                    otherwise,
                } => self.range(value, body, otherwise, dot)?,
            }
        }
        Ok(())
    }

    fn write(&mut self, text: &str, line: usize) -> Result<(), EvalError> {
        if self.out.len() + text.len() > MAX_OUTPUT {
            return Err((line, format!("output larger than {MAX_OUTPUT} bytes")));
        }
        self.out.push_str(text);
        Ok(())
    }

    fn range(
        &mut self,
        header: &Pipeline,
        body: &[Node],
        otherwise: &[Node],
        dot: &Value,
    ) -> Result<(), EvalError> {
        let mark = self.vars.len();
        // The range's variables are set per element, not to the pipeline's value.
        let plain = Pipeline {
            vars: Vec::new(),
            ..header.clone()
        };
        let value = self.pipeline(&plain, dot)?;
        let items: Vec<(Value, Value)> = match &value {
            Value::Array(list) => list
                .iter()
                .enumerate()
                .map(|(index, item)| (Value::from(index), item.clone()))
                .collect(),
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                keys.into_iter()
                    .map(|key| (Value::from(key.clone()), map[key].clone()))
                    .collect()
            }
            Value::Null => Vec::new(),
            Value::Number(number) => {
                let count = number.as_i64().unwrap_or(0).clamp(0, 100_000);
                (0..count)
                    .map(|i| (Value::from(i), Value::from(i)))
                    .collect()
            }
            other => {
                return Err((
                    header.line,
                    format!("range can't iterate over {}", print_value(other)),
                ));
            }
        };
        if items.is_empty() {
            self.walk(otherwise, dot)?;
        }
        for (key, item) in items {
            let inner = self.vars.len();
            match header.vars.as_slice() {
                [value_var] => self.set_var(value_var, item.clone(), header.assign),
                [key_var, value_var] => {
                    self.set_var(key_var, key, header.assign);
                    self.set_var(value_var, item.clone(), header.assign);
                }
                _ => {}
            }
            self.walk(body, &item)?;
            self.vars.truncate(inner.max(mark));
        }
        self.vars.truncate(mark);
        Ok(())
    }

    fn set_var(&mut self, name: &str, value: Value, assign: bool) {
        if assign && let Some(slot) = self.vars.iter_mut().rev().find(|(var, _)| var == name) {
            slot.1 = value;
            return;
        }
        self.vars.push((name.to_owned(), value));
    }

    fn pipeline(&mut self, pipeline: &Pipeline, dot: &Value) -> Result<Value, EvalError> {
        let mut value: Option<Value> = None;
        for command in &pipeline.commands {
            value = Some(self.command(pipeline.line, command, dot, value)?);
        }
        let value = value.unwrap_or(Value::Null);
        if let [name] = pipeline.vars.as_slice() {
            if pipeline.assign && !self.vars.iter().any(|(var, _)| var == name) {
                return Err((pipeline.line, format!("undefined variable: ${name}")));
            }
            self.set_var(name, value.clone(), pipeline.assign);
        }
        Ok(value)
    }

    fn command(
        &mut self,
        line: usize,
        command: &Command,
        dot: &Value,
        piped: Option<Value>,
    ) -> Result<Value, EvalError> {
        let Some((first, rest)) = command.args.split_first() else {
            return Err((line, "empty command".to_owned()));
        };
        if let Operand::Func(name) = first {
            return self.call(line, name, rest, dot, piped);
        }
        if !rest.is_empty() || piped.is_some() {
            return Err((
                line,
                format!("can't give argument to non-function {}", describe(first)),
            ));
        }
        self.operand(line, first, dot)
    }

    fn operand(&mut self, line: usize, operand: &Operand, dot: &Value) -> Result<Value, EvalError> {
        match operand {
            Operand::Dot(fields) => self.fields(line, dot.clone(), fields),
            Operand::Var(name, fields) => {
                let name = if name.is_empty() { "$" } else { name.as_str() };
                let value = self
                    .vars
                    .iter()
                    .rev()
                    .find(|(var, _)| var == name)
                    .map(|(_, value)| value.clone())
                    .ok_or_else(|| {
                        (
                            line,
                            format!("undefined variable: ${}", name.trim_start_matches('$')),
                        )
                    })?;
                self.fields(line, value, fields)
            }
            Operand::Literal(value) => Ok(value.clone()),
            Operand::Sub(pipeline, fields) => {
                let mark = self.vars.len();
                let value = self.pipeline(pipeline, dot)?;
                self.vars.truncate(mark);
                self.fields(line, value, fields)
            }
            Operand::Func(name) => self.call(line, name, &[], dot, None),
        }
    }

    fn fields(&self, line: usize, mut value: Value, fields: &[String]) -> Result<Value, EvalError> {
        for field in fields {
            value = match value {
                Value::Object(mut map) => match map.remove(field) {
                    Some(next) => next,
                    None if self.options.error_on_missing_key => {
                        return Err((line, format!("map has no entry for key {field:?}")));
                    }
                    None => Value::Null,
                },
                Value::Null if self.options.error_on_missing_key => {
                    return Err((
                        line,
                        format!("nil pointer evaluating interface {{}}.{field}"),
                    ));
                }
                Value::Null => Value::Null,
                other => {
                    return Err((
                        line,
                        format!("can't evaluate field {field} in type {}", go_type(&other)),
                    ));
                }
            };
        }
        Ok(value)
    }

    fn args(
        &mut self,
        line: usize,
        args: &[Operand],
        dot: &Value,
        piped: Option<Value>,
    ) -> Result<Vec<Value>, EvalError> {
        let mut values = Vec::with_capacity(args.len() + 1);
        for arg in args {
            values.push(self.operand(line, arg, dot)?);
        }
        values.extend(piped);
        Ok(values)
    }

    fn call(
        &mut self,
        line: usize,
        name: &str,
        args: &[Operand],
        dot: &Value,
        piped: Option<Value>,
    ) -> Result<Value, EvalError> {
        // `and` and `or` evaluate lazily, as Go 1.18+ does.
        if name == "and" || name == "or" {
            let mut last = Value::Null;
            let count = args.len() + usize::from(piped.is_some());
            if count == 0 {
                return Err((
                    line,
                    format!("wrong number of args for {name}: want at least 1 got 0"),
                ));
            }
            for arg in args {
                last = self.operand(line, arg, dot)?;
                if truth(&last) == (name == "or") {
                    return Ok(last);
                }
            }
            return Ok(piped.unwrap_or(last));
        }
        let values = self.args(line, args, dot, piped)?;
        call_function(self.host, name, &values)
            .map_err(|message| (line, format!("error calling {name}: {message}")))
    }
}

fn describe(operand: &Operand) -> String {
    match operand {
        Operand::Dot(fields) => format!(".{}", fields.join(".")),
        Operand::Var(name, fields) if fields.is_empty() => format!("${name}"),
        Operand::Var(name, fields) => format!("${name}.{}", fields.join(".")),
        Operand::Literal(value) => print_value(value),
        Operand::Func(name) => name.clone(),
        Operand::Sub(..) => "(pipeline)".to_owned(),
    }
}

fn arity(values: &[Value], want: usize) -> Result<(), String> {
    if values.len() == want {
        Ok(())
    } else {
        Err(format!(
            "wrong number of args: want {want} got {}",
            values.len()
        ))
    }
}

fn string_arg(value: &Value) -> Result<String, String> {
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Null => Ok(String::new()),
        Value::Number(_) | Value::Bool(_) => Ok(print_value(value)),
        other => Err(format!("expected a string, got {}", go_type(other))),
    }
}

fn call_function(host: &mut dyn Host, name: &str, values: &[Value]) -> Result<Value, String> {
    let engine = &base64::engine::general_purpose::STANDARD;
    let url_engine = &base64::engine::general_purpose::URL_SAFE;
    Ok(match name {
        "secret" => {
            let Some((path, params)) = values.split_first() else {
                return Err("wrong number of args: want at least 1 got 0".to_owned());
            };
            let path = string_arg(path)?;
            let params = params
                .iter()
                .map(string_arg)
                .collect::<Result<Vec<_>, _>>()?;
            host.secret(&path, &params)?.unwrap_or(Value::Null)
        }
        "env" => {
            arity(values, 1)?;
            Value::from(host.env(&string_arg(&values[0])?))
        }
        "not" => {
            arity(values, 1)?;
            Value::Bool(!truth(&values[0]))
        }
        "len" => {
            arity(values, 1)?;
            Value::from(match &values[0] {
                Value::String(text) => text.len(),
                Value::Array(list) => list.len(),
                Value::Object(map) => map.len(),
                other => return Err(format!("len of type {}", go_type(other))),
            })
        }
        "index" => {
            let Some((first, keys)) = values.split_first() else {
                return Err("wrong number of args: want at least 1 got 0".to_owned());
            };
            let mut value = first.clone();
            for key in keys {
                value = match (&value, key) {
                    (Value::Object(map), key) => {
                        map.get(&string_arg(key)?).cloned().unwrap_or(Value::Null)
                    }
                    (Value::Array(list), Value::Number(number)) => {
                        let index = number.as_u64().and_then(|i| usize::try_from(i).ok());
                        match index.and_then(|i| list.get(i)) {
                            Some(item) => item.clone(),
                            None => return Err(format!("index out of range: {number}")),
                        }
                    }
                    (Value::Null, _) => return Err("index of untyped nil".to_owned()),
                    (other, _) => {
                        return Err(format!("can't index item of type {}", go_type(other)));
                    }
                };
            }
            value
        }
        "eq" => {
            let Some((first, rest)) = values.split_first() else {
                return Err("missing argument for comparison".to_owned());
            };
            if rest.is_empty() {
                return Err("missing argument for comparison".to_owned());
            }
            Value::Bool(rest.iter().any(|other| equal(first, other)))
        }
        "ne" => {
            arity(values, 2)?;
            Value::Bool(!equal(&values[0], &values[1]))
        }
        "lt" | "le" | "gt" | "ge" => {
            arity(values, 2)?;
            let ordering = compare(&values[0], &values[1])?;
            Value::Bool(match name {
                "lt" => ordering.is_lt(),
                "le" => ordering.is_le(),
                "gt" => ordering.is_gt(),
                _ => ordering.is_ge(),
            })
        }
        "print" => Value::from(go_sprint(values)),
        "println" => {
            let parts: Vec<String> = values.iter().map(print_value).collect();
            Value::from(format!("{}\n", parts.join(" ")))
        }
        "printf" => {
            let Some((format, rest)) = values.split_first() else {
                return Err("wrong number of args: want at least 1 got 0".to_owned());
            };
            Value::from(go_sprintf(&string_arg(format)?, rest))
        }
        "toJSON" => {
            arity(values, 1)?;
            Value::from(go_json(&values[0], false))
        }
        "toJSONPretty" => {
            arity(values, 1)?;
            Value::from(go_json(&values[0], true))
        }
        "parseJSON" => {
            arity(values, 1)?;
            let text = string_arg(&values[0])?;
            if text.trim().is_empty() {
                Value::Object(Map::new())
            } else {
                serde_json::from_str(&text).map_err(|error| error.to_string())?
            }
        }
        "toUpper" => {
            arity(values, 1)?;
            Value::from(string_arg(&values[0])?.to_uppercase())
        }
        "toLower" => {
            arity(values, 1)?;
            Value::from(string_arg(&values[0])?.to_lowercase())
        }
        "trimSpace" => {
            arity(values, 1)?;
            Value::from(string_arg(&values[0])?.trim().to_owned())
        }
        "split" => {
            arity(values, 2)?;
            let (sep, text) = (string_arg(&values[0])?, string_arg(&values[1])?);
            if text.is_empty() {
                Value::Array(Vec::new())
            } else if sep.is_empty() {
                Value::Array(text.chars().map(|c| Value::from(c.to_string())).collect())
            } else {
                Value::Array(text.split(sep.as_str()).map(Value::from).collect())
            }
        }
        "join" => {
            arity(values, 2)?;
            let sep = string_arg(&values[0])?;
            let Value::Array(list) = &values[1] else {
                return Err(format!("join expects a list, got {}", go_type(&values[1])));
            };
            let parts = list.iter().map(string_arg).collect::<Result<Vec<_>, _>>()?;
            Value::from(parts.join(&sep))
        }
        "replaceAll" => {
            arity(values, 3)?;
            let (from, to, text) = (
                string_arg(&values[0])?,
                string_arg(&values[1])?,
                string_arg(&values[2])?,
            );
            Value::from(if from.is_empty() {
                text
            } else {
                text.replace(&from, &to)
            })
        }
        "contains" => {
            arity(values, 2)?;
            Value::Bool(match &values[1] {
                Value::Array(list) => list.iter().any(|item| equal(item, &values[0])),
                Value::Object(map) => map.contains_key(&string_arg(&values[0])?),
                other => string_arg(other)?.contains(&string_arg(&values[0])?),
            })
        }
        "base64Encode" => {
            arity(values, 1)?;
            Value::from(engine.encode(string_arg(&values[0])?))
        }
        "base64URLEncode" => {
            arity(values, 1)?;
            Value::from(url_engine.encode(string_arg(&values[0])?))
        }
        "base64Decode" | "base64URLDecode" => {
            arity(values, 1)?;
            let text = string_arg(&values[0])?;
            let decoded = if name == "base64Decode" {
                engine.decode(text.as_bytes())
            } else {
                url_engine.decode(text.as_bytes())
            }
            .map_err(|error| format!("{name}: {error}"))?;
            Value::from(String::from_utf8_lossy(&decoded).into_owned())
        }
        other => {
            return Err(format!(
                "function {other:?} not defined (cairn's template renderer does not provide it)"
            ));
        }
    })
}

/// Go's `truth`: false, 0, "", nil and empty lists and maps are false.
pub(crate) fn truth(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(flag) => *flag,
        Value::Number(number) => number.as_f64().is_some_and(|n| n != 0.0),
        Value::String(text) => !text.is_empty(),
        Value::Array(list) => !list.is_empty(),
        Value::Object(map) => !map.is_empty(),
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn compare(a: &Value, b: &Value) -> Result<std::cmp::Ordering, String> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .zip(y.as_f64())
            .and_then(|(x, y)| x.partial_cmp(&y))
            .ok_or_else(|| "incomparable numbers".to_owned()),
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        _ => Err(format!(
            "incompatible types for comparison: {} and {}",
            go_type(a),
            go_type(b)
        )),
    }
}

fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "nil",
        Value::Bool(_) => "bool",
        Value::Number(number) if number.is_f64() => "float64",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// `fmt`'s `%v` of a value (maps with sorted keys, as Go prints them).
pub(crate) fn print_value(value: &Value) -> String {
    match value {
        Value::Null => "<no value>".to_owned(),
        Value::String(text) => text.clone(),
        other => print_nested(other),
    }
}

fn print_nested(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        Value::String(text) => text.clone(),
        Value::Array(list) => {
            let parts: Vec<String> = list.iter().map(print_nested).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|key| format!("{key}:{}", print_nested(&map[key])))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// `fmt.Sprint`: spaces between operands when neither side is a string.
fn go_sprint(values: &[Value]) -> String {
    let mut out = String::new();
    for (index, value) in values.iter().enumerate() {
        if index > 0 && !values[index - 1].is_string() && !value.is_string() {
            out.push(' ');
        }
        out.push_str(&print_nested(value));
    }
    out
}

/// `fmt.Sprintf` for `%s %v %d %q %t %%` (flags and widths are not supported and print as
/// Go prints a bad verb).
fn go_sprintf(format: &str, values: &[Value]) -> String {
    let mut out = String::new();
    let mut args = values.iter();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.next() else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        match verb {
            's' | 'v' | 'd' | 't' => out.push_str(&print_nested(arg)),
            'q' => out.push_str(&go_json(&Value::from(print_nested(arg)), false)),
            other => {
                let _ = write!(out, "%!{other}({})", print_nested(arg));
            }
        }
    }
    let extra: Vec<String> = args.map(print_nested).collect();
    if !extra.is_empty() {
        let _ = write!(out, "%!(EXTRA {})", extra.join(", "));
    }
    out
}

/// `json.Marshal` (sorted keys, `<`, `>` and `&` escaped) or `json.MarshalIndent(v, "", "  ")`.
pub(crate) fn go_json(value: &Value, pretty: bool) -> String {
    let sorted = sort_keys(value);
    let text = if pretty {
        serde_json::to_string_pretty(&sorted)
    } else {
        serde_json::to_string(&sorted)
    }
    .unwrap_or_default();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
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

fn sort_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut sorted = Map::new();
            for key in keys {
                sorted.insert(key.clone(), sort_keys(&map[key]));
            }
            Value::Object(sorted)
        }
        Value::Array(list) => Value::Array(list.iter().map(sort_keys).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::template::parse::{Delims, parse};

    #[derive(Default)]
    struct FakeHost {
        secrets: BTreeMap<String, Value>,
        env: BTreeMap<String, String>,
        asked: Vec<(String, Vec<String>)>,
    }

    impl Host for FakeHost {
        fn secret(&mut self, path: &str, params: &[String]) -> Result<Option<Value>, String> {
            self.asked.push((path.to_owned(), params.to_vec()));
            Ok(self.secrets.get(path).cloned())
        }
        fn env(&self, name: &str) -> String {
            self.env.get(name).cloned().unwrap_or_default()
        }
    }

    fn host() -> FakeHost {
        let mut host = FakeHost::default();
        host.secrets.insert(
            "secret/data/app".to_owned(),
            json!({"Data": {"data": {"user": "alice", "pass": "s3cr<t", "port": 5432}, "metadata": {"version": 3}},
                   "LeaseID": "", "LeaseDuration": 0, "Renewable": false}),
        );
        host.secrets.insert(
            "database/creds/ro".to_owned(),
            json!({"Data": {"username": "v-ro-1", "password": "pw"}, "LeaseID": "database/creds/ro/abc",
                   "LeaseDuration": 3600, "Renewable": true}),
        );
        host.env
            .insert("NOMAD_TASK_NAME".to_owned(), "web".to_owned());
        host
    }

    fn run(text: &str, host: &mut FakeHost) -> Result<String, String> {
        let nodes = parse("t", text, Delims::default())?;
        render("t", &nodes, host, Options::default())
    }

    fn ok(text: &str) -> String {
        run(text, &mut host()).unwrap()
    }

    #[test]
    fn with_secret_reads_kv_v2_and_dynamic_credentials() {
        assert_eq!(
            ok(
                r#"{{ with secret "secret/data/app" }}{{ .Data.data.user }}:{{ .Data.data.pass }}@{{ .Data.data.port }} v{{ .Data.metadata.version }}{{ end }}"#
            ),
            "alice:s3cr<t@5432 v3"
        );
        assert_eq!(
            ok(
                r#"{{ with secret "database/creds/ro" }}{{ .Data.username }}/{{ .Data.password }} {{ .LeaseDuration }} {{ .Renewable }}{{ end }}"#
            ),
            "v-ro-1/pw 3600 true"
        );
    }

    #[test]
    fn secret_passes_write_parameters_and_a_missing_secret_is_nil() {
        let mut host = host();
        let text = r#"{{ with secret "pki/issue/web" "common_name=a.example.com" "ttl=1h" }}{{ .Data.certificate }}{{ else }}none{{ end }}"#;
        assert_eq!(run(text, &mut host).unwrap(), "none");
        assert_eq!(
            host.asked,
            vec![(
                "pki/issue/web".to_owned(),
                vec!["common_name=a.example.com".to_owned(), "ttl=1h".to_owned()]
            )]
        );
    }

    #[test]
    fn env_range_if_else_and_variables_behave_as_go() {
        assert_eq!(
            ok(r#"{{ env "NOMAD_TASK_NAME" }}-{{ env "UNSET" }}."#),
            "web-."
        );
        assert_eq!(
            ok(
                r#"{{ with secret "secret/data/app" }}{{ range $k, $v := .Data.data }}{{ $k }}={{ $v }};{{ end }}{{ end }}"#
            ),
            "pass=s3cr<t;port=5432;user=alice;"
        );
        assert_eq!(
            ok(r#"{{ range $i, $x := split "," "a,b" }}{{ $i }}{{ $x }}{{ end }}"#),
            "0a1b"
        );
        assert_eq!(
            ok(r#"{{ range split "," "" }}x{{ else }}empty{{ end }}"#),
            "empty"
        );
        assert_eq!(
            ok(
                r#"{{ $n := 2 }}{{ if eq $n 1 }}one{{ else if eq $n 2 }}two{{ else }}many{{ end }}"#
            ),
            "two"
        );
        assert_eq!(
            ok(r#"{{ $x := "a" }}{{ if true }}{{ $x = "b" }}{{ end }}{{ $x }}"#),
            "b"
        );
        assert_eq!(
            ok(r#"{{ if and 1 "" }}y{{ else }}n{{ end }}{{ or "" "z" }}"#),
            "nz"
        );
        assert_eq!(
            ok(r#"{{ if not (eq 1 2) }}ne{{ end }} {{ len "abc" }} {{ lt 1 2 }}"#),
            "ne 3 true"
        );
    }

    #[test]
    fn pipelines_and_string_functions_apply_left_to_right() {
        assert_eq!(
            ok(
                r#"{{ with secret "secret/data/app" }}{{ .Data.data.user | toUpper }} {{ .Data.data | toJSON }}{{ end }}"#
            ),
            r#"ALICE {"pass":"s3cr\u003ct","port":5432,"user":"alice"}"#
        );
        assert_eq!(ok(r#"{{ "  Hi  " | trimSpace | toLower }}"#), "hi");
        assert_eq!(
            ok(r#"{{ "user:pw" | base64Encode }} {{ "dXNlcjpwdw==" | base64Decode }}"#),
            "dXNlcjpwdw== user:pw"
        );
        assert_eq!(
            ok(r#"{{ split "," "a,b" | join "-" }} {{ "a.b" | replaceAll "." "_" }}"#),
            "a-b a_b"
        );
        assert_eq!(
            ok(r#"{{ printf "%s=%d %q" "a" 3 "x" }} {{ print 1 2 "s" }}"#),
            r#"a=3 "x" 1 2s"#
        );
        assert_eq!(
            ok(r#"{{ (parseJSON `{"a":{"b":[1,2]}}`).a.b }} {{ index (split "," "x,y") 1 }}"#),
            "[1 2] y"
        );
        assert_eq!(ok(r#"{{ "x" | contains "x" }}"#), "true");
        assert_eq!(
            ok(r#"{{ toJSONPretty (parseJSON `{"b":1,"a":2}`) }}"#),
            "{\n  \"a\": 2,\n  \"b\": 1\n}"
        );
    }

    #[test]
    fn missing_keys_print_no_value_unless_the_template_asks_for_errors() {
        assert_eq!(
            ok(r#"{{ with secret "secret/data/app" }}{{ .Data.data.nope }}{{ end }}"#),
            "<no value>"
        );
        let nodes = parse(
            "t",
            r#"{{ with secret "secret/data/app" }}{{ .Data.data.nope }}{{ end }}"#,
            Delims::default(),
        )
        .unwrap();
        let error = render(
            "t",
            &nodes,
            &mut host(),
            Options {
                error_on_missing_key: true,
            },
        )
        .unwrap_err();
        assert_eq!(
            error,
            "template: t:1: executing \"t\": map has no entry for key \"nope\""
        );
    }

    #[test]
    fn bad_calls_fail_with_a_clear_message() {
        let error = run(r#"{{ key "service/x" }}"#, &mut host()).unwrap_err();
        assert!(error.contains("function \"key\" not defined"), "{error}");
        let error = run(r#"{{ "a" | toUpper "b" }}"#, &mut host()).unwrap_err();
        assert!(error.contains("wrong number of args"), "{error}");
        let error = run(r#"{{ $undefined }}"#, &mut host()).unwrap_err();
        assert!(error.contains("undefined variable: $undefined"), "{error}");
        let error = run(r#"{{ "s".x }}"#, &mut host());
        assert!(error.is_err());
        let error = run(r#"{{ range "abc" }}{{ end }}"#, &mut host()).unwrap_err();
        assert!(error.contains("range can't iterate over abc"), "{error}");
        let error = run(r#"{{ .X 1 }}"#, &mut host()).unwrap_err();
        assert!(
            error.contains("can't give argument to non-function .X"),
            "{error}"
        );
    }

    #[test]
    fn variables_declared_in_a_block_end_with_it() {
        let error = run(
            r#"{{ if true }}{{ $x := 1 }}{{ end }}{{ $x }}"#,
            &mut host(),
        )
        .unwrap_err();
        assert!(error.contains("undefined variable: $x"), "{error}");
        assert_eq!(ok(r#"{{ $ }}|{{ . }}"#), "<no value>|<no value>");
    }
}
