//! The HCL expression evaluator, over `hcl-edit`'s syntax tree (which keeps byte spans).
//!
//! Used by the block decoder for every attribute value, by `variables.rs` for defaults,
//! var-files, `-var` values, validations and locals. Functions live in `functions.rs`.
//!
//! Semantics follow HashiCorp HCL as Nomad's `jobspec2` configures it:
//! - `var.*` and `local.*` resolve to declared values; iterator names of `for` expressions,
//!   template `for` directives and `dynamic` blocks shadow them.
//! - In the job file, a reference to any other root name (`NOMAD_ALLOC_ID`,
//!   `attr.kernel.name`, `node.unique.id`, `meta.x`, `env["X"]`) evaluates to its own source
//!   text wrapped in `${…}` — Nomad's `UndefinedVariable` hook — so runtime interpolations reach
//!   the client untouched, also when mixed with `var.*` in one template. In var-files and
//!   `-var` values ([`Mode::Literal`]) references are errors, as there.
//! - A template that is a single interpolation yields the interpolated value unconverted.
//!
//! Invariants: evaluation never panics and is bounded: every step counts against a budget, so
//! hostile input (nested `for` over `range()`) ends in an error rather than a hang.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ops::Range;

use hcl::edit::Span;
use hcl::edit::expr::{
    BinaryOperator, Expression, ForExpr, FuncCall, ObjectKey, Traversal, TraversalOperator,
    UnaryOperator,
};
use hcl::edit::template::{Directive, Element, Template};

use super::diag::{Diag, Pos, Source};
use super::functions;
use super::value::{Type, Value};

/// How many evaluation steps one parse may take.
const STEP_BUDGET: u64 = 1_000_000;

/// What unresolved root names mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The job file: unknown names are runtime interpolations, kept as `${…}` text.
    Job,
    /// Var-files, `-var` values and variable defaults: no references at all.
    Literal,
}

/// What every scope of one evaluation shares: the source, the declared values, the budget.
#[derive(Debug)]
pub(crate) struct Env<'a> {
    pub(crate) src: Source<'a>,
    pub(crate) vars: Option<Value>,
    pub(crate) locals: Option<Value>,
    pub(crate) mode: Mode,
    steps: &'a Cell<u64>,
}

impl<'a> Env<'a> {
    pub(crate) fn new(src: Source<'a>, mode: Mode, steps: &'a Cell<u64>) -> Env<'a> {
        Env {
            src,
            vars: None,
            locals: None,
            mode,
            steps,
        }
    }

    pub(crate) fn pos(&self, span: Option<Range<usize>>) -> Option<Pos> {
        self.src.pos(span)
    }

    /// The step counter shared by every environment of one parse.
    pub(crate) fn steps(&self) -> &'a Cell<u64> {
        self.steps
    }
}

/// A lexical scope: the shared [`Env`] plus names bound by enclosing iterations.
#[derive(Debug)]
pub(crate) struct Scope<'a> {
    env: &'a Env<'a>,
    parent: Option<&'a Scope<'a>>,
    bindings: Vec<(String, Value)>,
}

impl<'a> Scope<'a> {
    pub(crate) fn new(env: &'a Env<'a>) -> Scope<'a> {
        Scope {
            env,
            parent: None,
            bindings: Vec::new(),
        }
    }

    /// A nested scope binding more names.
    pub(crate) fn child<'b>(&'b self, bindings: Vec<(String, Value)>) -> Scope<'b>
    where
        'a: 'b,
    {
        Scope {
            env: self.env,
            parent: Some(self),
            bindings,
        }
    }

    pub(crate) fn env(&self) -> &'a Env<'a> {
        self.env
    }

    pub(crate) fn pos(&self, span: Option<Range<usize>>) -> Option<Pos> {
        self.env.pos(span)
    }

    fn lookup(&self, name: &str) -> Option<&Value> {
        if let Some((_, value)) = self.bindings.iter().rev().find(|(n, _)| n == name) {
            return Some(value);
        }
        if let Some(parent) = self.parent {
            return parent.lookup(name);
        }
        match name {
            "var" => self.env.vars.as_ref(),
            "local" => self.env.locals.as_ref(),
            _ => None,
        }
    }

    fn step(&self, span: Option<Range<usize>>) -> Result<(), Diag> {
        let used = self.env.steps.get() + 1;
        self.env.steps.set(used);
        if used > STEP_BUDGET {
            return Err(Diag::new(
                "Evaluation too complex",
                "The expressions in this file take too many steps to evaluate.",
            )
            .at(self.pos(span)));
        }
        Ok(())
    }
}

type EvalResult = Result<Value, Diag>;

/// Evaluates an expression.
pub(crate) fn eval(expr: &Expression, scope: &Scope<'_>) -> EvalResult {
    scope.step(expr.span())?;
    match expr {
        Expression::Null(_) => Ok(Value::Null),
        Expression::Bool(b) => Ok(Value::Bool(*b.value())),
        Expression::Number(n) => Ok(Value::Number(n.value().as_f64().unwrap_or(0.0))),
        Expression::String(s) => Ok(Value::String(s.value().clone())),
        Expression::Array(array) => array
            .iter()
            .map(|item| eval(item, scope))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::List),
        Expression::Object(object) => {
            let mut map = BTreeMap::new();
            for (key, value) in object.iter() {
                let key = match key {
                    ObjectKey::Ident(ident) => ident.as_str().to_owned(),
                    ObjectKey::Expression(key_expr) => {
                        let key_value = eval(key_expr, scope)?;
                        key_value.to_str().ok_or_else(|| {
                            Diag::new(
                                "Incorrect key type",
                                "Can't use this value as a key: string required.",
                            )
                            .at(scope.pos(key_expr.span()))
                        })?
                    }
                };
                map.insert(key, eval(value.expr(), scope)?);
            }
            Ok(Value::Object(map))
        }
        Expression::StringTemplate(template) => eval_template_expr(template, scope),
        Expression::HeredocTemplate(heredoc) => {
            let mut out = String::new();
            render(&heredoc.template, scope, false, false, &mut out)?;
            Ok(Value::String(out))
        }
        Expression::Parenthesis(inner) => eval(inner.inner(), scope),
        Expression::Variable(name) => resolve_root(name.as_str(), name.span(), scope),
        Expression::Conditional(cond) => {
            let test = eval(&cond.cond_expr, scope)?;
            if condition(&test, cond.cond_expr.span(), scope)? {
                eval(&cond.true_expr, scope)
            } else {
                eval(&cond.false_expr, scope)
            }
        }
        Expression::FuncCall(call) => eval_call(call, scope),
        Expression::Traversal(traversal) => eval_traversal(traversal, scope),
        Expression::UnaryOp(op) => {
            let operand = eval(&op.expr, scope)?;
            match op.operator.value() {
                UnaryOperator::Neg => {
                    let n = operand_number(&operand, "", op.expr.span(), scope)?;
                    Ok(Value::Number(-n))
                }
                UnaryOperator::Not => {
                    let b = operand_bool(&operand, "", op.expr.span(), scope)?;
                    Ok(Value::Bool(!b))
                }
            }
        }
        Expression::BinaryOp(op) => eval_binary(
            &op.lhs_expr,
            *op.operator.value(),
            &op.rhs_expr,
            expr.span(),
            scope,
        ),
        Expression::ForExpr(for_expr) => eval_for(for_expr, scope),
    }
}

/// A quoted template: a lone interpolation (`"${var.list}"`) yields its value as is.
fn eval_template_expr(template: &Template, scope: &Scope<'_>) -> EvalResult {
    let mut elements = template.iter();
    if let (Some(Element::Interpolation(interp)), None) = (elements.next(), elements.next()) {
        return eval(&interp.expr, scope);
    }
    let mut out = String::new();
    render(template, scope, false, false, &mut out)?;
    Ok(Value::String(out))
}

/// Renders a template into `out`. `strip_first`/`strip_last` say whether the enclosing template
/// sequences' strip markers (`~`) eat the whitespace at the start and end of this template.
fn render(
    template: &Template,
    scope: &Scope<'_>,
    strip_first: bool,
    strip_last: bool,
    out: &mut String,
) -> Result<(), Diag> {
    let elements: Vec<&Element> = template.iter().collect();
    for (index, element) in elements.iter().enumerate() {
        match element {
            Element::Literal(literal) => {
                let strip_start = if index == 0 {
                    strip_first
                } else {
                    elements
                        .get(index - 1)
                        .is_some_and(|prev| right_strip(prev))
                };
                let strip_end = match elements.get(index + 1) {
                    Some(next) => left_strip(next),
                    None => strip_last,
                };
                let mut text = literal.value().as_str();
                if strip_start {
                    text = text.trim_start();
                }
                if strip_end {
                    text = text.trim_end();
                }
                out.push_str(text);
            }
            Element::Interpolation(interp) => {
                let value = eval(&interp.expr, scope)?;
                out.push_str(&interpolated(&value, interp.expr.span(), scope)?);
            }
            Element::Directive(directive) => match directive.as_ref() {
                Directive::If(dir) => {
                    let test = eval(&dir.if_expr.cond_expr, scope)?;
                    let after_true = dir
                        .else_expr
                        .as_ref()
                        .map_or(dir.endif_expr.strip, |e| e.strip);
                    if condition(&test, dir.if_expr.cond_expr.span(), scope)? {
                        render(
                            &dir.if_expr.template,
                            scope,
                            dir.if_expr.strip.strip_end(),
                            after_true.strip_start(),
                            out,
                        )?;
                    } else if let Some(else_expr) = &dir.else_expr {
                        render(
                            &else_expr.template,
                            scope,
                            else_expr.strip.strip_end(),
                            dir.endif_expr.strip.strip_start(),
                            out,
                        )?;
                    }
                }
                Directive::For(dir) => {
                    let intro = &dir.for_expr;
                    let collection = eval(&intro.collection_expr, scope)?;
                    let items = iterate(&collection, intro.collection_expr.span(), scope)?;
                    for (key, value) in items {
                        let mut bindings = Vec::with_capacity(2);
                        if let Some(key_var) = &intro.key_var {
                            bindings.push((key_var.as_str().to_owned(), key));
                        }
                        bindings.push((intro.value_var.as_str().to_owned(), value));
                        let inner = scope.child(bindings);
                        render(
                            &intro.template,
                            &inner,
                            intro.strip.strip_end(),
                            dir.endfor_expr.strip.strip_start(),
                            out,
                        )?;
                    }
                }
            },
        }
    }
    Ok(())
}

/// Whether the template sequence `element` strips whitespace on its left (`${~`, `%{~`).
fn left_strip(element: &Element) -> bool {
    match element {
        Element::Literal(_) => false,
        Element::Interpolation(interp) => interp.strip.strip_start(),
        Element::Directive(directive) => match directive.as_ref() {
            Directive::If(dir) => dir.if_expr.strip.strip_start(),
            Directive::For(dir) => dir.for_expr.strip.strip_start(),
        },
    }
}

/// Whether the template sequence `element` strips whitespace on its right (`~}`).
fn right_strip(element: &Element) -> bool {
    match element {
        Element::Literal(_) => false,
        Element::Interpolation(interp) => interp.strip.strip_end(),
        Element::Directive(directive) => match directive.as_ref() {
            Directive::If(dir) => dir.endif_expr.strip.strip_end(),
            Directive::For(dir) => dir.endfor_expr.strip.strip_end(),
        },
    }
}

fn interpolated(
    value: &Value,
    span: Option<Range<usize>>,
    scope: &Scope<'_>,
) -> Result<String, Diag> {
    match value {
        Value::Null => Err(Diag::new(
            "Invalid template interpolation value",
            "The expression result is null. Cannot include a null value in a string template.",
        )
        .at(scope.pos(span))),
        Value::List(_) | Value::Object(_) => Err(Diag::new(
            "Invalid template interpolation value",
            "Cannot include the given value in a string template: string required.",
        )
        .at(scope.pos(span))),
        other => Ok(other.to_str().unwrap_or_default()),
    }
}

fn condition(value: &Value, span: Option<Range<usize>>, scope: &Scope<'_>) -> Result<bool, Diag> {
    match value {
        Value::Null => Err(Diag::new(
            "Null condition",
            "The condition value is null. Conditions must either be true or false.",
        )
        .at(scope.pos(span))),
        other => other.to_bool().ok_or_else(|| {
            Diag::new(
                "Incorrect condition type",
                "The condition expression must be of type bool.",
            )
            .at(scope.pos(span))
        }),
    }
}

/// The (key, value) pairs a `for` iterates: list index and element, or object key and value.
fn iterate(
    collection: &Value,
    span: Option<Range<usize>>,
    scope: &Scope<'_>,
) -> Result<Vec<(Value, Value)>, Diag> {
    match collection {
        #[allow(clippy::cast_precision_loss)]
        Value::List(items) => Ok(items
            .iter()
            .enumerate()
            .map(|(i, v)| (Value::Number(i as f64), v.clone()))
            .collect()),
        Value::Object(map) => Ok(map
            .iter()
            .map(|(k, v)| (Value::String(k.clone()), v.clone()))
            .collect()),
        Value::Null => Err(Diag::new(
            "Iteration over null value",
            "A null value cannot be used as the collection in a 'for' expression.",
        )
        .at(scope.pos(span))),
        other => Err(Diag::new(
            "Iteration over non-iterable value",
            format!(
                "A value of type {} cannot be used as the collection in a 'for' expression.",
                other.type_name()
            ),
        )
        .at(scope.pos(span))),
    }
}

fn eval_for(for_expr: &ForExpr, scope: &Scope<'_>) -> EvalResult {
    let intro = &for_expr.intro;
    let collection = eval(&intro.collection_expr, scope)?;
    let items = iterate(&collection, intro.collection_expr.span(), scope)?;
    let mut list = Vec::new();
    let mut object: BTreeMap<String, Value> = BTreeMap::new();
    let mut groups: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (key, value) in items {
        let mut bindings = Vec::with_capacity(2);
        if let Some(key_var) = &intro.key_var {
            bindings.push((key_var.as_str().to_owned(), key));
        }
        bindings.push((intro.value_var.as_str().to_owned(), value));
        let inner = scope.child(bindings);
        if let Some(cond) = &for_expr.cond {
            let test = eval(&cond.expr, &inner)?;
            if !condition(&test, cond.expr.span(), &inner)? {
                continue;
            }
        }
        let item = eval(&for_expr.value_expr, &inner)?;
        match &for_expr.key_expr {
            None => list.push(item),
            Some(key_expr) => {
                let key_value = eval(key_expr, &inner)?;
                let key = match key_value {
                    Value::Null => None,
                    other => other.to_str(),
                }
                .ok_or_else(|| {
                    Diag::new(
                        "Invalid object key",
                        "Key expression in 'for' expression must be a string.",
                    )
                    .at(scope.pos(key_expr.span()))
                })?;
                if for_expr.grouping {
                    groups.entry(key).or_default().push(item);
                } else {
                    match object.entry(key) {
                        std::collections::btree_map::Entry::Occupied(entry) => {
                            return Err(Diag::new(
                                "Duplicate object key",
                                format!(
                                    "Two different items produced the key {:?} in this 'for' expression. If duplicates are expected, use the ellipsis (...) after the value expression to enable grouping by key.",
                                    entry.key()
                                ),
                            )
                            .at(scope.pos(key_expr.span())));
                        }
                        std::collections::btree_map::Entry::Vacant(entry) => {
                            entry.insert(item);
                        }
                    }
                }
            }
        }
    }
    if for_expr.key_expr.is_none() {
        Ok(Value::List(list))
    } else if for_expr.grouping {
        Ok(Value::Object(
            groups
                .into_iter()
                .map(|(k, v)| (k, Value::List(v)))
                .collect(),
        ))
    } else {
        Ok(Value::Object(object))
    }
}

/// A root name: an iterator, `var`, `local`, or (job file only) a runtime interpolation.
fn resolve_root(name: &str, span: Option<Range<usize>>, scope: &Scope<'_>) -> EvalResult {
    if let Some(value) = scope.lookup(name) {
        return Ok(value.clone());
    }
    match scope.env.mode {
        Mode::Job => Ok(Value::String(runtime_text(span, name, scope))),
        Mode::Literal => Err(
            Diag::new("Variables not allowed", "Variables may not be used here.")
                .at(scope.pos(span)),
        ),
    }
}

/// The `${…}` text of an unresolved reference spanning `span`: its source, widened to the
/// enclosing `${ … }` when it is the whole interpolation, else wrapped in one.
fn runtime_text(span: Option<Range<usize>>, fallback: &str, scope: &Scope<'_>) -> String {
    let src = scope.env.src;
    let Some(span) = span else {
        return format!("${{{fallback}}}");
    };
    let Some(text) = src.slice(&span) else {
        return format!("${{{fallback}}}");
    };
    let bytes = src.text.as_bytes();
    let mut prefix_start = None;
    let mut i = span.start;
    while i >= 2 {
        i -= 1;
        match bytes.get(i) {
            Some(b'{') if bytes.get(i - 1) == Some(&b'$') => {
                prefix_start = Some(i - 1);
                break;
            }
            Some(b' ') => {}
            _ => break,
        }
    }
    let Some(prefix_start) = prefix_start else {
        return format!("${{{text}}}");
    };
    let mut out = src
        .text
        .get(prefix_start..span.start)
        .unwrap_or("${")
        .to_owned();
    out.push_str(text);
    let mut j = span.end;
    while bytes.get(j) == Some(&b' ') {
        j += 1;
    }
    if bytes.get(j) == Some(&b'}') {
        out.push_str(src.text.get(span.end..j).unwrap_or(""));
    }
    out.push('}');
    out
}

fn is_static_operator(op: &TraversalOperator) -> bool {
    match op {
        TraversalOperator::GetAttr(_) | TraversalOperator::LegacyIndex(_) => true,
        TraversalOperator::Index(expr) => {
            matches!(expr, Expression::String(_) | Expression::Number(_))
        }
        TraversalOperator::AttrSplat(_) | TraversalOperator::FullSplat(_) => false,
    }
}

fn eval_traversal(traversal: &Traversal, scope: &Scope<'_>) -> EvalResult {
    let operators: Vec<&TraversalOperator> =
        traversal.operators.iter().map(|op| op.value()).collect();
    // An unresolved root with static operators is one runtime reference: `attr.kernel.name`.
    if let Expression::Variable(name) = &traversal.expr
        && scope.lookup(name.as_str()).is_none()
        && scope.env.mode == Mode::Job
    {
        let static_len = operators
            .iter()
            .take_while(|op| is_static_operator(op))
            .count();
        let start = name.span().map(|s| s.start);
        let end = if static_len == 0 {
            name.span().map(|s| s.end)
        } else {
            traversal
                .operators
                .get(static_len - 1)
                .and_then(|op| op.span())
                .map(|s| s.end)
        };
        let span = start.zip(end).map(|(s, e)| s..e);
        let base = Value::String(runtime_text(span, name.as_str(), scope));
        let rest: Vec<_> = traversal.operators.iter().skip(static_len).collect();
        return apply_operators(base, &rest, scope);
    }
    // A bound root (`local.a.b`): follow attribute names by reference and clone only what is
    // reached, not the whole `local` object.
    if let Expression::Variable(name) = &traversal.expr
        && let Some(root) = scope.lookup(name.as_str())
    {
        let mut current = root;
        let mut consumed = 0;
        for op in &operators {
            let TraversalOperator::GetAttr(attr) = op else {
                break;
            };
            let Value::Object(map) = current else { break };
            let Some(next) = map.get(attr.as_str()) else {
                break;
            };
            current = next;
            consumed += 1;
        }
        let rest: Vec<_> = traversal.operators.iter().skip(consumed).collect();
        return apply_operators(current.clone(), &rest, scope);
    }
    let base = eval(&traversal.expr, scope)?;
    let all: Vec<_> = traversal.operators.iter().collect();
    apply_operators(base, &all, scope)
}

fn apply_operators(
    mut value: Value,
    operators: &[&hcl::edit::Decorated<TraversalOperator>],
    scope: &Scope<'_>,
) -> EvalResult {
    for (index, op) in operators.iter().enumerate() {
        scope.step(op.span())?;
        match op.value() {
            TraversalOperator::AttrSplat(_) | TraversalOperator::FullSplat(_) => {
                let rest = operators.get(index + 1..).unwrap_or(&[]);
                let items = match value {
                    Value::Null => Vec::new(),
                    Value::List(items) => items,
                    other => vec![other],
                };
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(apply_operators(item, rest, scope)?);
                }
                return Ok(Value::List(out));
            }
            TraversalOperator::GetAttr(name) => {
                value = get_attr(value, name.as_str(), op.span(), scope)?;
            }
            TraversalOperator::LegacyIndex(index) => {
                #[allow(clippy::cast_precision_loss)]
                let key = Value::Number(*index.value() as f64);
                value = index_value(value, &key, op.span(), scope)?;
            }
            TraversalOperator::Index(key_expr) => {
                let key = eval(key_expr, scope)?;
                value = index_value(value, &key, op.span(), scope)?;
            }
        }
    }
    Ok(value)
}

fn get_attr(value: Value, name: &str, span: Option<Range<usize>>, scope: &Scope<'_>) -> EvalResult {
    match value {
        Value::Object(mut map) => map.remove(name).ok_or_else(|| {
            Diag::new(
                "Unsupported attribute",
                format!("This object does not have an attribute named {name:?}."),
            )
            .at(scope.pos(span))
        }),
        Value::Null => Err(Diag::new(
            "Attempt to get attribute from null value",
            "This value is null, so it does not have any attributes.",
        )
        .at(scope.pos(span))),
        Value::List(_) => Err(Diag::new(
            "Unsupported attribute",
            "Can't access attributes on a list of objects. Did you mean to access an attribute for a specific element of the list, or across all elements of the list?",
        )
        .at(scope.pos(span))),
        other => Err(Diag::new(
            "Unsupported attribute",
            format!(
                "Can't access attributes on a primitive-typed value ({}).",
                other.type_name()
            ),
        )
        .at(scope.pos(span))),
    }
}

fn index_value(
    value: Value,
    key: &Value,
    span: Option<Range<usize>>,
    scope: &Scope<'_>,
) -> EvalResult {
    let invalid = || {
        Diag::new(
            "Invalid index",
            "The given key does not identify an element in this collection value.",
        )
        .at(scope.pos(span.clone()))
    };
    match value {
        Value::List(mut items) => {
            let n = key.to_number().ok_or_else(|| {
                Diag::new(
                    "Invalid index",
                    "The given key does not identify an element in this collection value: a number is required.",
                )
                .at(scope.pos(span.clone()))
            })?;
            if n.fract() != 0.0 || n < 0.0 || n >= items.len() as f64 {
                return Err(invalid());
            }
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let i = n as usize;
            if i < items.len() {
                Ok(items.swap_remove(i))
            } else {
                Err(invalid())
            }
        }
        Value::Object(mut map) => {
            let k = key.to_str().ok_or_else(invalid)?;
            map.remove(&k).ok_or_else(invalid)
        }
        Value::Null => Err(Diag::new(
            "Attempt to index null value",
            "This value is null, so it does not have any indices.",
        )
        .at(scope.pos(span))),
        _ => Err(
            Diag::new("Invalid index", "This value does not have any indices.").at(scope.pos(span)),
        ),
    }
}

fn operand_number(
    value: &Value,
    side: &str,
    span: Option<Range<usize>>,
    scope: &Scope<'_>,
) -> Result<f64, Diag> {
    value.to_number().ok_or_else(|| {
        Diag::new(
            "Invalid operand",
            format!("Unsuitable value for {side}operand: a number is required."),
        )
        .at(scope.pos(span))
    })
}

fn operand_bool(
    value: &Value,
    side: &str,
    span: Option<Range<usize>>,
    scope: &Scope<'_>,
) -> Result<bool, Diag> {
    value.to_bool().ok_or_else(|| {
        Diag::new(
            "Invalid operand",
            format!("Unsuitable value for {side}operand: a bool is required."),
        )
        .at(scope.pos(span))
    })
}

fn eval_binary(
    lhs: &Expression,
    op: BinaryOperator,
    rhs: &Expression,
    span: Option<Range<usize>>,
    scope: &Scope<'_>,
) -> EvalResult {
    let left = eval(lhs, scope)?;
    // `&&` and `||` short-circuit, so `var.x != null && var.x.y` works.
    match op {
        BinaryOperator::And => {
            if !operand_bool(&left, "left ", lhs.span(), scope)? {
                return Ok(Value::Bool(false));
            }
            let right = eval(rhs, scope)?;
            return operand_bool(&right, "right ", rhs.span(), scope).map(Value::Bool);
        }
        BinaryOperator::Or => {
            if operand_bool(&left, "left ", lhs.span(), scope)? {
                return Ok(Value::Bool(true));
            }
            let right = eval(rhs, scope)?;
            return operand_bool(&right, "right ", rhs.span(), scope).map(Value::Bool);
        }
        _ => {}
    }
    let right = eval(rhs, scope)?;
    match op {
        BinaryOperator::Eq => Ok(Value::Bool(left == right)),
        BinaryOperator::NotEq => Ok(Value::Bool(left != right)),
        _ => {
            let a = operand_number(&left, "left ", lhs.span(), scope)?;
            let b = operand_number(&right, "right ", rhs.span(), scope)?;
            let result = match op {
                BinaryOperator::Less => return Ok(Value::Bool(a < b)),
                BinaryOperator::LessEq => return Ok(Value::Bool(a <= b)),
                BinaryOperator::Greater => return Ok(Value::Bool(a > b)),
                BinaryOperator::GreaterEq => return Ok(Value::Bool(a >= b)),
                BinaryOperator::Plus => a + b,
                BinaryOperator::Minus => a - b,
                BinaryOperator::Mul => a * b,
                BinaryOperator::Div | BinaryOperator::Mod if b == 0.0 => {
                    return Err(Diag::new(
                        "Operation failed",
                        "Error during operation: can't divide by zero.",
                    )
                    .at(scope.pos(span)));
                }
                BinaryOperator::Div => a / b,
                BinaryOperator::Mod => a % b,
                _ => 0.0,
            };
            if result.is_finite() {
                Ok(Value::Number(result))
            } else {
                Err(Diag::new(
                    "Operation failed",
                    "Error during operation: the result is not a finite number.",
                )
                .at(scope.pos(span)))
            }
        }
    }
}

fn eval_call(call: &FuncCall, scope: &Scope<'_>) -> EvalResult {
    let name = call.name.name.as_str();
    let span = call.name.name.span();
    if call.name.is_namespaced() {
        return Err(Diag::new(
            "Call to unknown function",
            format!("There is no function named {name:?}."),
        )
        .at(scope.pos(span)));
    }
    let arg_exprs: Vec<&Expression> = call.args.iter().collect();
    match name {
        // Forms that look at their arguments before (or instead of) evaluating them.
        "try" => {
            if arg_exprs.is_empty() {
                return Err(Diag::new(
                    "Not enough function arguments",
                    "Function \"try\" expects at least 1 argument(s).",
                )
                .at(scope.pos(span)));
            }
            let mut last = None;
            for arg in &arg_exprs {
                match eval(arg, scope) {
                    Ok(value) => return Ok(value),
                    Err(diag) if diag.summary == "Evaluation too complex" => return Err(diag),
                    Err(diag) => last = Some(diag),
                }
            }
            let detail = last.map(|d| d.detail).unwrap_or_default();
            return Err(Diag::new(
                "Error in function call",
                format!("Call to function \"try\" failed: no expression succeeded: {detail}"),
            )
            .at(scope.pos(span)));
        }
        "can" => {
            let [arg] = arg_exprs.as_slice() else {
                return Err(arity_diag(name, 1, arg_exprs.len(), span, scope));
            };
            return match eval(arg, scope) {
                Ok(_) => Ok(Value::Bool(true)),
                Err(diag) if diag.summary == "Evaluation too complex" => Err(diag),
                Err(_) => Ok(Value::Bool(false)),
            };
        }
        "convert" => {
            let [value_expr, type_expr] = arg_exprs.as_slice() else {
                return Err(arity_diag(name, 2, arg_exprs.len(), span, scope));
            };
            let ty = parse_type(type_expr, scope.env.src)?;
            let value = eval(value_expr, scope)?;
            return ty.convert(value).map_err(|e| {
                Diag::new(
                    "Invalid function argument",
                    format!("Invalid value for \"value\" parameter: {e}."),
                )
                .at(scope.pos(value_expr.span()))
            });
        }
        _ => {}
    }
    let mut args = Vec::with_capacity(arg_exprs.len());
    for arg in &arg_exprs {
        args.push(eval(arg, scope)?);
    }
    if call.args.expand_final() {
        match args.pop() {
            Some(Value::List(items)) => args.extend(items),
            Some(Value::Null) | None => {}
            Some(_) => {
                return Err(Diag::new(
                    "Invalid expanding argument value",
                    "The expanding argument (indicated by ...) must be of a tuple, list, or set type.",
                )
                .at(scope.pos(span)));
            }
        }
    }
    functions::call(name, args).map_err(|err| err.into_diag(name, scope.pos(call.span())))
}

fn arity_diag(
    name: &str,
    expected: usize,
    given: usize,
    span: Option<Range<usize>>,
    scope: &Scope<'_>,
) -> Diag {
    if given < expected {
        Diag::new(
            "Not enough function arguments",
            format!("Function {name:?} expects {expected} argument(s)."),
        )
        .at(scope.pos(span))
    } else {
        Diag::new(
            "Too many function arguments",
            format!("Function {name:?} expects only {expected} argument(s)."),
        )
        .at(scope.pos(span))
    }
}

/// Parses a type constraint expression (`string`, `list(map(string))`, `object({a=number})`).
pub(crate) fn parse_type(expr: &Expression, src: Source<'_>) -> Result<Type, Diag> {
    let invalid = |what: &str| {
        Diag::new(
            "Invalid type specification",
            format!("The keyword {what:?} is not a valid type specification."),
        )
        .at(src.pos(expr.span()))
    };
    match expr {
        Expression::Variable(name) => match name.as_str() {
            "string" => Ok(Type::String),
            "number" => Ok(Type::Number),
            "bool" => Ok(Type::Bool),
            "any" => Ok(Type::Any),
            "list" => Ok(Type::List(Box::new(Type::Any))),
            "map" => Ok(Type::Map(Box::new(Type::Any))),
            "set" => Ok(Type::Set(Box::new(Type::Any))),
            other => Err(invalid(other)),
        },
        Expression::Parenthesis(inner) => parse_type(inner.inner(), src),
        Expression::FuncCall(call) => {
            let name = call.name.name.as_str();
            let args: Vec<&Expression> = call.args.iter().collect();
            let single = || -> Result<Type, Diag> {
                match args.as_slice() {
                    [arg] => parse_type(arg, src),
                    _ => Err(Diag::new(
                        "Invalid type specification",
                        format!("The {name} type constructor requires one argument specifying the element type."),
                    )
                    .at(src.pos(call.span()))),
                }
            };
            match name {
                "list" => Ok(Type::List(Box::new(single()?))),
                "set" => Ok(Type::Set(Box::new(single()?))),
                "map" => Ok(Type::Map(Box::new(single()?))),
                "optional" => single(),
                "object" => {
                    let [Expression::Object(object)] = args.as_slice() else {
                        return Err(Diag::new(
                            "Invalid type specification",
                            "The object type constructor requires one argument specifying the attribute types as a map.",
                        )
                        .at(src.pos(call.span())));
                    };
                    let mut attrs = BTreeMap::new();
                    for (key, value) in object.iter() {
                        let key = match key {
                            ObjectKey::Ident(ident) => ident.as_str().to_owned(),
                            ObjectKey::Expression(Expression::String(s)) => s.value().clone(),
                            ObjectKey::Expression(other) => {
                                return Err(Diag::new(
                                    "Invalid type specification",
                                    "Object constructor map keys must be attribute names.",
                                )
                                .at(src.pos(other.span())));
                            }
                        };
                        let optional = matches!(value.expr(), Expression::FuncCall(c) if c.name.name.as_str() == "optional");
                        attrs.insert(key, (parse_type(value.expr(), src)?, optional));
                    }
                    Ok(Type::Object(attrs))
                }
                "tuple" => {
                    let [Expression::Array(items)] = args.as_slice() else {
                        return Err(Diag::new(
                            "Invalid type specification",
                            "The tuple type constructor requires one argument specifying the element types as a list.",
                        )
                        .at(src.pos(call.span())));
                    };
                    items
                        .iter()
                        .map(|item| parse_type(item, src))
                        .collect::<Result<Vec<_>, _>>()
                        .map(Type::Tuple)
                }
                other => Err(invalid(other)),
            }
        }
        _ => Err(Diag::new(
            "Invalid type specification",
            "A type specification is either a primitive type keyword (bool, number, string) or a complex type constructor call, like list(string).",
        )
        .at(src.pos(expr.span()))),
    }
}
