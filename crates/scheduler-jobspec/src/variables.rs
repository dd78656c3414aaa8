//! Input variables and locals: `variable "x" {…}` / `variables {…}` declarations, values from
//! the var-file (the API's `Variables` text) and `-var` flags, validation rules, and `locals`.
//!
//! Called by `mod.rs` before the job block is decoded; produces the `var` and `local` objects
//! the evaluator resolves.
//!
//! Precedence and rules follow `jobspec2/types.variables.go`: a variable's value is the last of
//! default < var-file < `-var` flag; a declared type converts every value (a `-var` value for a
//! string, number or untyped variable is taken literally, otherwise parsed as an HCL
//! expression); every declared variable must end up with a value ("Unset variable"); naming an
//! undeclared variable in the var-file or a flag is an error (the CLI's strict mode). Defaults
//! and var-file values may not reference anything. Locals may reference variables, other
//! locals (in any order) and runtime names.

use std::collections::{BTreeMap, BTreeSet};

use hcl::edit::Span;
use hcl::edit::expr::{Expression, TraversalOperator};
use hcl::edit::parser;
use hcl::edit::structure::{Block, Structure};
use hcl::edit::visit::{Visit, visit_expr};

use super::diag::{Diag, Pos, Source};
use super::eval::{Env, Mode, Scope, eval, parse_type};
use super::value::{Type, Value};

/// Where the var-file's diagnostics point (Nomad names the var content `input.hcl` too).
const VAR_FILE: &str = "input.hcl";

struct Validation<'a> {
    condition: &'a Expression,
    error_message: String,
    decl: Option<Pos>,
}

struct Variable<'a> {
    name: String,
    ty: Option<Type>,
    /// (value, where it came from, where its expression is).
    values: Vec<(Value, &'static str, Option<Pos>)>,
    validations: Vec<Validation<'a>>,
}

/// The evaluated `var` and `local` objects.
#[derive(Debug)]
pub(crate) struct Values {
    pub(crate) vars: Value,
    pub(crate) locals: Value,
}

/// Collects variables and locals from the job file's top-level `variable`, `variables` and
/// `locals` blocks, the var-file text and the `-var` flags.
pub(crate) fn collect<'a>(
    blocks: &[&'a Block],
    env: &Env<'a>,
    var_file: &str,
    flags: &BTreeMap<String, String>,
) -> Result<Values, Diag> {
    let literal_env = Env::new(env.src, Mode::Literal, env.steps());
    let literal = Scope::new(&literal_env);
    let mut variables: Vec<Variable<'a>> = Vec::new();
    let mut locals: Vec<(String, &'a Expression)> = Vec::new();
    for block in blocks {
        match block.ident.as_str() {
            "variable" => declare(block, &literal, &mut variables)?,
            "variables" => {
                for structure in block.body.iter() {
                    match structure {
                        Structure::Attribute(attr) => {
                            let name = attr.key.as_str();
                            if variables.iter().any(|v| v.name == name) {
                                return Err(
                                    duplicate_variable(name).at(literal.pos(attr.key.span()))
                                );
                            }
                            let value = eval(&attr.value, &literal)?;
                            variables.push(Variable {
                                name: name.to_owned(),
                                ty: Some(Type::implied_by(&value)),
                                values: vec![(value, "default", literal.pos(attr.value.span()))],
                                validations: Vec::new(),
                            });
                        }
                        Structure::Block(inner) => {
                            return Err(Diag::new(
                                format!("Unexpected {:?} block", inner.ident.as_str()),
                                "Blocks are not allowed here.",
                            )
                            .at(literal.pos(inner.ident.span())));
                        }
                    }
                }
            }
            "locals" => {
                for structure in block.body.iter() {
                    match structure {
                        Structure::Attribute(attr) => {
                            let name = attr.key.as_str();
                            if locals.iter().any(|(n, _)| n == name) {
                                return Err(Diag::new(
                                    "Duplicate value in locals",
                                    format!("Duplicate {name} definition found."),
                                )
                                .at(literal.pos(attr.key.span())));
                            }
                            locals.push((name.to_owned(), &attr.value));
                        }
                        Structure::Block(inner) => {
                            return Err(Diag::new(
                                format!("Unexpected {:?} block", inner.ident.as_str()),
                                "Blocks are not allowed here.",
                            )
                            .at(literal.pos(inner.ident.span())));
                        }
                    }
                }
            }
            _ => {}
        }
    }

    read_var_file(var_file, env, &mut variables)?;
    read_flags(flags, env, &mut variables)?;

    let mut vars = BTreeMap::new();
    for variable in &variables {
        let Some((value, from, pos)) = variable.values.last() else {
            return Err(Diag::new(
                format!("Unset variable {:?}", variable.name),
                "A used variable must be set or have a default value; see https://developer.hashicorp.com/nomad/docs/reference/hcl2/variables  for details.",
            ));
        };
        validate(variable, value, from, pos.clone(), env)?;
        vars.insert(variable.name.clone(), value.clone());
    }
    let vars = Value::Object(vars);
    let locals = evaluate_locals(&locals, &vars, env)?;
    Ok(Values { vars, locals })
}

fn duplicate_variable(name: &str) -> Diag {
    Diag::new(
        "Duplicate variable",
        format!("Duplicate {name} variable definition found."),
    )
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// A `variable "name" { type, default, description, sensitive, validation {} }` block.
fn declare<'a>(
    block: &'a Block,
    literal: &Scope<'_>,
    variables: &mut Vec<Variable<'a>>,
) -> Result<(), Diag> {
    let Some(label) = block.labels.first() else {
        return Err(Diag::new(
            "Missing name for variable",
            "All variable blocks must have 1 labels (name).",
        )
        .at(literal.pos(block.ident.span())));
    };
    let name = label.as_str();
    if variables.iter().any(|v| v.name == name) {
        return Err(duplicate_variable(name));
    }
    if !is_identifier(name) {
        return Err(Diag::new(
            "Invalid variable name",
            "A name must start with a letter or underscore and may contain only letters, digits, underscores, and dashes.",
        )
        .at(literal.pos(label.span())));
    }
    let mut ty = None;
    let mut default = None;
    let mut validations = Vec::new();
    for structure in block.body.iter() {
        match structure {
            Structure::Attribute(attr) => match attr.key.as_str() {
                "description" => {
                    let value = eval(&attr.value, literal)?;
                    if !matches!(value, Value::String(_) | Value::Null) {
                        return Err(Diag::new(
                            "Unsuitable value type",
                            "Unsuitable value: string required",
                        )
                        .at(literal.pos(attr.value.span())));
                    }
                }
                "sensitive" => {
                    let value = eval(&attr.value, literal)?;
                    if value.to_bool().is_none() && !value.is_null() {
                        return Err(Diag::new(
                            "Unsuitable value type",
                            "Unsuitable value: bool required",
                        )
                        .at(literal.pos(attr.value.span())));
                    }
                }
                "type" => ty = Some(parse_type(&attr.value, literal.env().src)?),
                "default" => default = Some((eval(&attr.value, literal)?, &attr.value)),
                other => {
                    return Err(Diag::new(
                        "Unsupported argument",
                        format!("An argument named {other:?} is not expected here."),
                    )
                    .at(literal.pos(attr.key.span())));
                }
            },
            Structure::Block(inner) if inner.ident.as_str() == "validation" => {
                validations.push(validation(inner, literal)?);
            }
            Structure::Block(inner) => {
                return Err(Diag::new(
                    "Unsupported block type",
                    format!(
                        "Blocks of type {:?} are not expected here.",
                        inner.ident.as_str()
                    ),
                )
                .at(literal.pos(inner.ident.span())));
            }
        }
    }
    let mut values = Vec::new();
    if let Some((value, expr)) = default {
        let value = match &ty {
            Some(t) => t.convert(value).map_err(|e| {
                Diag::new(
                    "Invalid default value for variable",
                    format!("This default value is not compatible with the variable's type constraint: {e}."),
                )
                .at(literal.pos(expr.span()))
            })?,
            None => value,
        };
        if ty.is_none() {
            ty = Some(Type::implied_by(&value));
        }
        values.push((value, "default", literal.pos(expr.span())));
    }
    variables.push(Variable {
        name: name.to_owned(),
        ty,
        values,
        validations,
    });
    Ok(())
}

fn validation<'a>(block: &'a Block, literal: &Scope<'_>) -> Result<Validation<'a>, Diag> {
    let mut condition = None;
    let mut error_message = None;
    for structure in block.body.iter() {
        match structure {
            Structure::Attribute(attr) => match attr.key.as_str() {
                "condition" => condition = Some(&attr.value),
                "error_message" => {
                    let message = eval(&attr.value, literal)?.to_str().unwrap_or_default();
                    if message.trim().is_empty() {
                        return Err(Diag::new(
                            "Invalid validation error message",
                            "An empty or blank string is not a valid nor useful error message.",
                        )
                        .at(literal.pos(attr.value.span())));
                    }
                    error_message = Some(message);
                }
                other => {
                    return Err(Diag::new(
                        "Unsupported argument",
                        format!("An argument named {other:?} is not expected here."),
                    )
                    .at(literal.pos(attr.key.span())));
                }
            },
            Structure::Block(inner) => {
                return Err(Diag::new(
                    "Unsupported block type",
                    format!(
                        "Blocks of type {:?} are not expected here.",
                        inner.ident.as_str()
                    ),
                )
                .at(literal.pos(inner.ident.span())));
            }
        }
    }
    let decl = literal.pos(block.ident.span());
    let missing = |name: &str| {
        Diag::new(
            "Missing required argument",
            format!("The argument {name:?} is required, but no definition was found."),
        )
        .at(decl.clone())
    };
    Ok(Validation {
        condition: condition.ok_or_else(|| missing("condition"))?,
        error_message: error_message.ok_or_else(|| missing("error_message"))?,
        decl: decl.clone(),
    })
}

/// Runs a variable's validation rules against its final value; the condition sees only
/// `var.<name>`.
fn validate(
    variable: &Variable<'_>,
    value: &Value,
    from: &str,
    pos: Option<Pos>,
    env: &Env<'_>,
) -> Result<(), Diag> {
    if variable.validations.is_empty() {
        return Ok(());
    }
    let mut check_env = Env::new(env.src, Mode::Literal, env.steps());
    let mut only = BTreeMap::new();
    only.insert(variable.name.clone(), value.clone());
    check_env.vars = Some(Value::Object(only));
    let scope = Scope::new(&check_env);
    for rule in &variable.validations {
        let result = eval(rule.condition, &scope)?;
        let passed = match result {
            Value::Null => {
                return Err(Diag::new(
                    "Invalid variable validation result",
                    "Validation condition expression must return either true or false, not null.",
                )
                .at(scope.pos(rule.condition.span())));
            }
            other => other.to_bool().ok_or_else(|| {
                Diag::new(
                    "Invalid variable validation result",
                    "Invalid validation condition result value: a bool is required.",
                )
                .at(scope.pos(rule.condition.span()))
            })?,
        };
        if !passed {
            let at = rule
                .decl
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            return Err(Diag::new(
                format!("Invalid value for {from} variable"),
                format!(
                    "{}\n\nThis was checked by the validation rule at {at}.",
                    rule.error_message
                ),
            )
            .at(pos.or_else(|| rule.decl.clone())));
        }
    }
    Ok(())
}

fn convert_for(variable: &Variable<'_>, value: Value) -> Result<Value, String> {
    match &variable.ty {
        Some(ty) => ty.convert(value),
        None => Ok(value),
    }
}

/// The var-file: HCL (or JSON) `name = value` lines, literal values only.
fn read_var_file(text: &str, env: &Env<'_>, variables: &mut [Variable<'_>]) -> Result<(), Diag> {
    if text.trim().is_empty() {
        return Ok(());
    }
    if text.trim_start().starts_with('{') {
        let json: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Diag::plain(format!("unable to parse var content: {e}")))?;
        let serde_json::Value::Object(map) = json else {
            return Err(Diag::plain(
                "unable to parse var content: the root must be an object",
            ));
        };
        for (name, value) in map {
            let value = Value::from_json(&value);
            assign(variables, &name, value, "varfile", None)?;
        }
        return Ok(());
    }
    let src = Source::new(VAR_FILE, text);
    let body = parser::parse_body(text).map_err(|e| {
        Diag::plain(format!(
            "unable to parse var content: {}",
            super::syntax_error(&e, VAR_FILE)
        ))
    })?;
    let file_env = Env::new(src, Mode::Literal, env.steps());
    let scope = Scope::new(&file_env);
    for structure in body.iter() {
        if let Structure::Block(block) = structure {
            if block.ident.as_str() == "variable" {
                let name = block.labels.first().map(|l| l.as_str()).unwrap_or_default();
                return Err(Diag::new(
                    "Variable declaration in a .var file",
                    format!(
                        "A .var file is used to assign values to variables that have already been declared in job files, not to declare new variables. To declare variable {name:?}, place this block in one of your job files\n\nTo set a value for this variable in {VAR_FILE}, use the definition syntax instead:\n    {name} = <value>"
                    ),
                )
                .at(scope.pos(block.ident.span())));
            }
            return Err(Diag::new(
                format!("Unexpected {:?} block", block.ident.as_str()),
                "Blocks are not allowed here.",
            )
            .at(scope.pos(block.ident.span())));
        }
    }
    for attr in body.attributes() {
        let name = attr.key.as_str();
        if !variables.iter().any(|v| v.name == name) {
            return Err(Diag::new(
                "Undefined variable",
                format!(
                    "A {name:?} variable was set but was not found in known variables. To declare variable {name:?}, place this block in your job files"
                ),
            ));
        }
        let value = eval(&attr.value, &scope)?;
        assign(
            variables,
            name,
            value,
            "varfile",
            scope.pos(attr.value.span()),
        )?;
    }
    Ok(())
}

/// Records a var-file value after converting it to the variable's type.
fn assign(
    variables: &mut [Variable<'_>],
    name: &str,
    value: Value,
    from: &'static str,
    pos: Option<Pos>,
) -> Result<(), Diag> {
    let Some(variable) = variables.iter_mut().find(|v| v.name == name) else {
        return Err(Diag::new(
            "Undefined variable",
            format!(
                "A {name:?} variable was set but was not found in known variables. To declare variable {name:?}, place this block in your job files"
            ),
        ));
    };
    let value = convert_for(variable, value).map_err(|e| {
        Diag::new(
            "Invalid value for variable",
            format!(
                "The value for {name} is not compatible with the variable's type constraint: {e}."
            ),
        )
        .at(pos.clone())
    })?;
    variable.values.push((value, from, pos));
    Ok(())
}

/// `-var name=value` flags.
fn read_flags(
    flags: &BTreeMap<String, String>,
    env: &Env<'_>,
    variables: &mut [Variable<'_>],
) -> Result<(), Diag> {
    for (name, text) in flags {
        let Some(variable) = variables.iter_mut().find(|v| &v.name == name) else {
            return Err(Diag::new(
                "Undefined -var variable",
                format!(
                    "A {name:?} variable was passed in the command line but was not found in known variables. To declare variable {name:?}, place this block in your job file"
                ),
            ));
        };
        let file = format!("<value for var.{name} from arguments>");
        let literal = variable.ty.as_ref().is_none_or(Type::is_literal_flag);
        let (value, pos) = if literal {
            (Value::String(text.clone()), None)
        } else {
            let src = Source::new(&file, text);
            let expr = parser::parse_expr(text)
                .map_err(|e| Diag::plain(super::syntax_error(&e, &file)))?;
            let flag_env = Env::new(src, Mode::Literal, env.steps());
            let scope = Scope::new(&flag_env);
            (eval(&expr, &scope)?, scope.pos(expr.span()))
        };
        let value = convert_for(variable, value).map_err(|e| {
            Diag::new(
                "Invalid argument value for -var variable",
                format!("The received arg value for {name} is not compatible with the variable's type constraint: {e}."),
            )
            .at(pos.clone())
        })?;
        variable.values.push((value, "cmd", pos));
    }
    Ok(())
}

/// How deeply a local's value may nest: locals referencing locals could otherwise build values
/// deep enough to exhaust the stack of the recursive value code.
const MAX_LOCAL_DEPTH: usize = 128;

/// The locals an expression references (`local.x`; a bare `local` references all of them).
#[derive(Default)]
struct LocalRefs {
    names: BTreeSet<String>,
    all: bool,
}

impl Visit for LocalRefs {
    fn visit_expr(&mut self, expr: &Expression) {
        match expr {
            Expression::Variable(name) if name.as_str() == "local" => self.all = true,
            Expression::Traversal(traversal) => {
                if let Expression::Variable(root) = &traversal.expr
                    && root.as_str() == "local"
                {
                    match traversal.operators.first().map(|op| op.value()) {
                        Some(TraversalOperator::GetAttr(name)) => {
                            self.names.insert(name.as_str().to_owned());
                        }
                        _ => self.all = true,
                    }
                    for op in traversal.operators.iter().skip(1) {
                        self.visit_traversal_operator(op);
                    }
                } else {
                    visit_expr(self, expr);
                }
            }
            _ => visit_expr(self, expr),
        }
    }
}

/// Evaluates locals in dependency order: a local is evaluated once every local it references
/// is; what is left when nothing is ready (a reference to an undeclared local, or a cycle) is
/// evaluated anyway to report its error.
fn evaluate_locals(
    locals: &[(String, &Expression)],
    vars: &Value,
    env: &Env<'_>,
) -> Result<Value, Diag> {
    let declared: BTreeSet<&str> = locals.iter().map(|(name, _)| name.as_str()).collect();
    let mut pending: Vec<(&str, &Expression, LocalRefs)> = locals
        .iter()
        .map(|(name, expr)| {
            let mut refs = LocalRefs::default();
            refs.visit_expr(expr);
            (name.as_str(), *expr, refs)
        })
        .collect();
    let mut done: BTreeMap<String, Value> = BTreeMap::new();
    while !pending.is_empty() {
        let is_ready = |refs: &LocalRefs, done: &BTreeMap<String, Value>, own: &str| {
            if refs.all {
                return declared.iter().all(|n| *n == own || done.contains_key(*n));
            }
            refs.names
                .iter()
                .all(|n| !declared.contains(n.as_str()) || done.contains_key(n))
        };
        let (ready, blocked): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .partition(|(name, _, refs)| is_ready(refs, &done, name));
        // Nothing ready: evaluate the first blocked local for its error.
        let (ready, blocked) = if ready.is_empty() {
            let mut blocked = blocked;
            let first = blocked.remove(0);
            (vec![first], blocked)
        } else {
            (ready, blocked)
        };
        let mut pass_env = Env::new(env.src, Mode::Job, env.steps());
        pass_env.vars = Some(vars.clone());
        pass_env.locals = Some(Value::Object(done.clone()));
        let scope = Scope::new(&pass_env);
        for (name, expr, _) in ready {
            let value = eval(expr, &scope)?;
            if value.depth() > MAX_LOCAL_DEPTH {
                return Err(Diag::new(
                    "Local value nested too deeply",
                    format!(
                        "The value of local.{name} nests more than {MAX_LOCAL_DEPTH} levels deep."
                    ),
                )
                .at(scope.pos(expr.span())));
            }
            done.insert(name.to_owned(), value);
        }
        pending = blocked;
    }
    Ok(Value::Object(done))
}
