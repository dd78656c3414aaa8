//! Nomad HCL2 job specifications: [`parse`] turns a job file (plus var-file text and `-var`
//! flags) into Nomad's API `Job` JSON, exactly what `POST /v1/jobs/parse` returns, and
//! [`canonicalize`] fills the defaults `api.Job.Canonicalize` fills.
//!
//! Where it sits: a pure library below the `scheduler` service. The scheduler's jobs HTTP
//! handlers call [`parse`] for `/v1/jobs/parse` and [`canonicalize`] for that endpoint's
//! `Canonicalize=true`, and [`canonicalize_for_register`] (the same defaults, minus the
//! job-level zero values the typed job takes anyway) for every job registration, before the
//! JSON is deserialized into `scheduler_structs::Job` (a type this crate does not depend on; its tests check that every
//! canonical job deserializes).
//!
//! Pipeline (one file each): `hcl-edit` parses the text with byte spans → the top level is
//! checked here (`variable`, `variables`, `locals`, `job`) → `variables.rs` collects variable
//! values and locals → `decode.rs` walks the `job` block against `schema.rs`, evaluating
//! expressions with `eval.rs` (functions in `functions.rs`, `digest.rs`, `calendar.rs`; values
//! in `value.rs`) and normalizes like `jobspec2` → `canonicalize.rs` (separately) fills
//! defaults. Errors are HCL-style diagnostics (`diag.rs`).
//!
//! Invariants: no panics on any input (hostile input ends in an error: the parser bounds
//! nesting, evaluation has a step budget, `range`/`format` are capped); no file system access
//! (`file()` and friends fail with "filesystem function disabled"); runtime interpolations such
//! as `${NOMAD_ALLOC_ID}` or `${attr.kernel.name}` survive as text; the output's keys are the
//! Go field names of Nomad's `api` structs, durations integer nanoseconds.

mod calendar;
mod canonicalize;
mod decode;
mod diag;
mod digest;
mod eval;
mod functions;
mod schema;
mod value;
mod variables;

#[cfg(test)]
mod tests;

use std::cell::Cell;
use std::collections::BTreeMap;

use hcl::edit::Span;
use hcl::edit::parser;
use hcl::edit::structure::{Block, Structure};

use diag::{Diag, Source};
use eval::{Env, Mode, Scope};

pub use canonicalize::{canonicalize, canonicalize_for_register};

/// The file name diagnostics use for the job text (Nomad's parse endpoint calls it this).
const JOB_FILE: &str = "input.hcl";

/// A job file that could not be parsed; the message reads like an HCL diagnostic, e.g.
/// `input.hcl:3,5-8: Unsupported argument; An argument named "x" is not expected here.`
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct JobspecError(pub String);

/// Parses an HCL2 job file. `variables` is var-file text (HCL `name = value` lines, the API's
/// `Variables` field); `var_flags` are `-var name=value` strings (values parsed as the variable's
/// declared type, strings otherwise). Returns the API Job JSON object (Canonicalize not applied;
/// unset fields are absent, as Nomad's api.Job with nil pointers).
pub fn parse(
    hcl: &str,
    variables: &str,
    var_flags: &BTreeMap<String, String>,
) -> Result<serde_json::Value, JobspecError> {
    parse_job(hcl, variables, var_flags)
        .map(serde_json::Value::Object)
        .map_err(|d| JobspecError(diag::render(&[d])))
}

fn parse_job(
    hcl: &str,
    var_file: &str,
    var_flags: &BTreeMap<String, String>,
) -> Result<serde_json::Map<String, serde_json::Value>, Diag> {
    let body = parser::parse_body(hcl).map_err(|e| Diag::plain(syntax_error(&e, JOB_FILE)))?;
    let src = Source::new(JOB_FILE, hcl);
    let steps = Cell::new(0);
    let env = Env::new(src, Mode::Job, &steps);

    // The top level takes only variable declarations, locals and the job.
    let mut declarations: Vec<&Block> = Vec::new();
    let mut jobs: Vec<&Block> = Vec::new();
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attr) => {
                return Err(Diag::new(
                    "Unsupported argument",
                    format!(
                        "An argument named {:?} is not expected here.",
                        attr.key.as_str()
                    ),
                )
                .at(src.pos(attr.key.span())));
            }
            Structure::Block(block) => {
                let ty = block.ident.as_str();
                let labels = match ty {
                    "variable" | "job" => 1,
                    "variables" | "locals" => 0,
                    other => {
                        let hint = diag::suggest(other, ["variable", "variables", "locals", "job"])
                            .map(|s| format!(" Did you mean {s:?}?"))
                            .unwrap_or_default();
                        return Err(Diag::new(
                            "Unsupported block type",
                            format!("Blocks of type {other:?} are not expected here.{hint}"),
                        )
                        .at(src.pos(block.ident.span())));
                    }
                };
                check_top_labels(block, labels, src)?;
                if ty == "job" {
                    jobs.push(block);
                } else {
                    declarations.push(block);
                }
            }
        }
    }

    let values = variables::collect(&declarations, &env, var_file, var_flags)?;
    let mut job_env = Env::new(src, Mode::Job, &steps);
    job_env.vars = Some(values.vars);
    job_env.locals = Some(values.locals);
    let scope = Scope::new(&job_env);

    let [job] = jobs.as_slice() else {
        return Err(match jobs.get(1) {
            None => Diag::new("Missing job block", "A job block is required"),
            Some(second) => {
                let first = jobs.first().map(|b| def_range(b, src)).unwrap_or_default();
                Diag::new(
                    "Duplicate job block",
                    format!(
                        "Only one block of type \"job\" is allowed. Previous definition was at {first}."
                    ),
                )
                .at(def_pos(second, src))
            }
        });
    };
    let label = job.labels.first().map(|l| l.as_str()).unwrap_or_default();
    decode::decode_job(job, label, &scope)
}

fn def_pos(block: &Block, src: Source<'_>) -> Option<diag::Pos> {
    let start = block.ident.span()?.start;
    let end = block
        .labels
        .last()
        .and_then(Span::span)
        .or_else(|| block.ident.span())?
        .end;
    src.pos(Some(start..end))
}

fn def_range(block: &Block, src: Source<'_>) -> String {
    def_pos(block, src)
        .map(|p| p.to_string())
        .unwrap_or_default()
}

fn check_top_labels(block: &Block, wanted: usize, src: Source<'_>) -> Result<(), Diag> {
    let ty = block.ident.as_str();
    if block.labels.len() < wanted {
        return Err(Diag::new(
            format!("Missing name for {ty}"),
            format!("All {ty} blocks must have 1 labels (name)."),
        )
        .at(def_pos(block, src)));
    }
    if let Some(extra) = block.labels.get(wanted) {
        let detail = if wanted == 0 {
            format!("No labels are expected for {ty} blocks.")
        } else {
            format!("Only 1 labels (name) are expected for {ty} blocks.")
        };
        return Err(
            Diag::new(format!("Extraneous label for {ty}"), detail).at(src.pos(extra.span()))
        );
    }
    Ok(())
}

/// An HCL syntax error as `<file>:<line>,<col>-<col>: Invalid HCL syntax; <what was expected>`.
pub(crate) fn syntax_error(error: &parser::Error, file: &str) -> String {
    let location = error.location();
    format!(
        "{file}:{line},{col}-{col}: Invalid HCL syntax; {message}",
        line = location.line(),
        col = location.column(),
        message = error.message()
    )
}
