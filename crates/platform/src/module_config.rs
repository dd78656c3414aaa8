//! What a module archive declares: reads a `.tar.gz` holding a Terraform module at its root
//! and returns the registry's view of it ([`ModuleDetail`]): for the root module, each
//! submodule under `modules/<name>/` and each example under `examples/<name>/`, its inputs
//! (type as written, default as a JSON-encoded string, description, required), outputs,
//! module calls, provider requirements, managed resources and README.
//!
//! Where it sits: pure, below everything; `registry_modules/publish.rs` runs [`parse`] on a
//! blocking thread over a stored archive (an upload or a `git archive` of a tag), and stores
//! the result beside the version; `registry_protocol.rs` renders it as the module detail JSON.
//!
//! Invariants:
//! - Reads the archive once, front to back; keeps only `.tf` files and READMEs of the
//!   directories it reports, each at most [`MAX_FILE_BYTES`], all at most [`MAX_TEXT_BYTES`];
//!   entries past [`MAX_ENTRIES`] or entry paths that are absolute or climb out with `..` are
//!   refused. Never panics on any input.
//! - A module whose root has no `.tf` file, or with a file HCL cannot parse, is refused with a
//!   reason naming the file (the version becomes `reg_ingress_failed` with it).
//! - Lists are sorted by name (paths for submodules and examples), so the result is a
//!   function of the archive's content, not of its entry order.
//! - Defaults are evaluated with no variables or functions (Terraform allows only literal
//!   defaults); one that does not evaluate is kept as its source text, JSON-encoded.
//! - `.tf.json` files are not read (see docs/compat.md).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Component;

use hcl::eval::{Context, Evaluate};
use hcl::{Block, Body, Expression, ObjectKey};
use serde::{Deserialize, Serialize};

/// The most entries an archive may hold.
pub(crate) const MAX_ENTRIES: u64 = 100_000;
/// The largest `.tf` file or README read.
pub(crate) const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// The most text read from one archive.
pub(crate) const MAX_TEXT_BYTES: u64 = 32 * 1024 * 1024;

/// The registry's view of a module version.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct ModuleDetail {
    pub(crate) root: ModulePart,
    pub(crate) submodules: Vec<ModulePart>,
    pub(crate) examples: Vec<ModulePart>,
}

/// One module directory (the root, a submodule or an example), in the registry's JSON shape.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct ModulePart {
    /// `""` for the root, `modules/<name>` or `examples/<name>`.
    pub(crate) path: String,
    pub(crate) name: String,
    /// The README's text, `""` when there is none.
    pub(crate) readme: String,
    /// No `.tf` file in the directory.
    pub(crate) empty: bool,
    pub(crate) inputs: Vec<Input>,
    pub(crate) outputs: Vec<Output>,
    pub(crate) dependencies: Vec<Dependency>,
    pub(crate) provider_dependencies: Vec<ProviderDependency>,
    pub(crate) resources: Vec<ResourceInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Input {
    pub(crate) name: String,
    /// The type constraint as written (`list(string)`), `""` when there is none.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) description: String,
    /// The default, JSON-encoded (`"\"10.0.0.0/16\""`); `""` for a required input.
    pub(crate) default: String,
    pub(crate) required: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Output {
    pub(crate) name: String,
    pub(crate) description: String,
}

/// A `module` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Dependency {
    pub(crate) name: String,
    pub(crate) source: String,
    pub(crate) version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProviderDependency {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) source: String,
    pub(crate) version: String,
}

/// A managed resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ResourceInfo {
    pub(crate) name: String,
    #[serde(rename = "type")]
    pub(crate) kind: String,
}

/// Why a module archive was refused; the Display is the version's `error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("the archive could not be read: {0}")]
    Archive(String),
    #[error("the archive holds more than {MAX_ENTRIES} entries")]
    TooManyEntries,
    #[error("the archive has an entry with an unsafe path: {0:?}")]
    UnsafePath(String),
    #[error("{0} is larger than {MAX_FILE_BYTES} bytes")]
    FileTooLarge(String),
    #[error("the archive's Terraform files are larger than {MAX_TEXT_BYTES} bytes in all")]
    TooMuchText,
    #[error("{0} is not UTF-8 text")]
    NotText(String),
    #[error(
        "no Terraform configuration (.tf) files at the root of the archive: the module must be at the archive's root, not in a subdirectory"
    )]
    NoRootConfig,
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
}

/// The text files of one directory.
#[derive(Debug, Default)]
struct Directory {
    /// File name → content, so files are read in name order.
    tf_files: BTreeMap<String, String>,
    readme: Option<String>,
}

/// Reads the `.tar.gz` from `input` and describes the module named `name` it holds.
pub(crate) fn parse(input: impl Read, name: &str) -> Result<ModuleDetail, ConfigError> {
    let directories = read_directories(input)?;
    let root = directories
        .get("")
        .filter(|root| !root.tf_files.is_empty())
        .ok_or(ConfigError::NoRootConfig)?;
    let mut detail = ModuleDetail {
        root: describe("", name, root)?,
        ..ModuleDetail::default()
    };
    for (path, directory) in &directories {
        let Some((parent, child)) = path.split_once('/') else {
            continue;
        };
        let part = describe(path, child, directory)?;
        match parent {
            "modules" => detail.submodules.push(part),
            "examples" => detail.examples.push(part),
            _ => {}
        }
    }
    Ok(detail)
}

/// The directories the registry reports (the root, `modules/<x>`, `examples/<x>`) with their
/// `.tf` files and README.
fn read_directories(input: impl Read) -> Result<BTreeMap<String, Directory>, ConfigError> {
    let archive_error = |err: std::io::Error| ConfigError::Archive(err.to_string());
    let mut archive = tar::Archive::new(flate2::read::MultiGzDecoder::new(input));
    let mut directories: BTreeMap<String, Directory> = BTreeMap::new();
    let mut entries: u64 = 0;
    let mut text_bytes: u64 = 0;
    for entry in archive.entries().map_err(archive_error)? {
        let mut entry = entry.map_err(archive_error)?;
        entries += 1;
        if entries > MAX_ENTRIES {
            return Err(ConfigError::TooManyEntries);
        }
        let path = entry.path().map_err(archive_error)?.into_owned();
        let mut parts = Vec::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(ConfigError::UnsafePath(path.to_string_lossy().into_owned()));
                }
            }
        }
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let Some(file_name) = parts.pop() else {
            continue;
        };
        let directory = parts.join("/");
        let reported = parts.is_empty()
            || (parts.len() == 2 && matches!(parts[0].as_str(), "modules" | "examples"));
        let is_tf = file_name.ends_with(".tf");
        let is_readme = matches!(
            file_name.to_ascii_lowercase().as_str(),
            "readme.md" | "readme"
        );
        if !reported {
            continue;
        }
        // Every reported directory is listed, even one without a `.tf` file (it is `empty`).
        let slot = directories.entry(directory.clone()).or_default();
        if !is_tf && !is_readme {
            continue;
        }
        let shown = if directory.is_empty() {
            file_name.clone()
        } else {
            format!("{directory}/{file_name}")
        };
        let size = entry.header().size().map_err(archive_error)?;
        if size > MAX_FILE_BYTES {
            return Err(ConfigError::FileTooLarge(shown));
        }
        text_bytes += size;
        if text_bytes > MAX_TEXT_BYTES {
            return Err(ConfigError::TooMuchText);
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        (&mut entry)
            .take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(archive_error)?;
        let text = String::from_utf8(bytes).map_err(|_| ConfigError::NotText(shown))?;
        if is_tf {
            slot.tf_files.insert(file_name, text);
        } else if slot.readme.is_none() || file_name == "README.md" {
            slot.readme = Some(text);
        }
    }
    // Read to the end, so a truncated or corrupt gzip stream is noticed.
    std::io::copy(&mut archive.into_inner(), &mut std::io::sink()).map_err(archive_error)?;
    Ok(directories)
}

/// Everything one directory declares.
fn describe(path: &str, name: &str, directory: &Directory) -> Result<ModulePart, ConfigError> {
    let mut part = ModulePart {
        path: path.to_owned(),
        name: name.to_owned(),
        readme: directory.readme.clone().unwrap_or_default(),
        empty: directory.tf_files.is_empty(),
        ..ModulePart::default()
    };
    let mut providers: BTreeMap<String, ProviderDependency> = BTreeMap::new();
    for (file_name, text) in &directory.tf_files {
        let shown = if path.is_empty() {
            file_name.clone()
        } else {
            format!("{path}/{file_name}")
        };
        let invalid = |message: String| ConfigError::Invalid {
            file: shown.clone(),
            message,
        };
        let body = hcl::parse(text).map_err(|err| invalid(err.to_string()))?;
        for block in body.blocks() {
            let labels: Vec<&str> = block.labels.iter().map(|label| label.as_str()).collect();
            match (block.identifier.as_str(), labels.as_slice()) {
                ("variable", [variable]) => part.inputs.push(input(variable, &block.body)),
                ("output", [output]) => part.outputs.push(Output {
                    name: (*output).to_owned(),
                    description: text_attribute(&block.body, "description"),
                }),
                ("module", [call]) => part.dependencies.push(Dependency {
                    name: (*call).to_owned(),
                    source: text_attribute(&block.body, "source"),
                    version: text_attribute(&block.body, "version"),
                }),
                ("resource", [kind, resource]) => {
                    part.resources.push(ResourceInfo {
                        name: (*resource).to_owned(),
                        kind: (*kind).to_owned(),
                    });
                    imply_provider(&mut providers, block, kind);
                }
                ("data", [kind, _]) => imply_provider(&mut providers, block, kind),
                ("provider", [provider]) => {
                    let entry = providers
                        .entry((*provider).to_owned())
                        .or_insert_with(|| default_provider(provider));
                    let version = text_attribute(&block.body, "version");
                    if !version.is_empty() && entry.version.is_empty() {
                        entry.version = version;
                    }
                }
                ("terraform", []) => {
                    for requirements in block
                        .body
                        .blocks()
                        .filter(|b| b.identifier.as_str() == "required_providers")
                    {
                        required_providers(&mut providers, &requirements.body);
                    }
                }
                _ => {}
            }
        }
        for (kind, names) in [
            (
                "variable",
                part.inputs.iter().map(|i| &i.name).collect::<Vec<_>>(),
            ),
            ("output", part.outputs.iter().map(|o| &o.name).collect()),
        ] {
            let mut seen = std::collections::BTreeSet::new();
            if let Some(duplicate) = names.into_iter().find(|name| !seen.insert(*name)) {
                return Err(invalid(format!("duplicate {kind} {duplicate:?}")));
            }
        }
    }
    part.inputs.sort_by(|a, b| a.name.cmp(&b.name));
    part.outputs.sort_by(|a, b| a.name.cmp(&b.name));
    part.dependencies.sort_by(|a, b| a.name.cmp(&b.name));
    part.resources
        .sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    part.provider_dependencies = providers.into_values().collect();
    Ok(part)
}

fn input(name: &str, body: &Body) -> Input {
    let default = attribute(body, "default");
    Input {
        name: name.to_owned(),
        kind: attribute(body, "type").map(source_text).unwrap_or_default(),
        description: text_attribute(body, "description"),
        required: default.is_none(),
        default: default.map(json_default).unwrap_or_default(),
    }
}

fn attribute<'a>(body: &'a Body, key: &str) -> Option<&'a Expression> {
    body.attributes()
        .find(|attribute| attribute.key.as_str() == key)
        .map(|attribute| &attribute.expr)
}

/// A string attribute's value (evaluated when it is a template without references); `""`
/// when absent or not a string.
fn text_attribute(body: &Body, key: &str) -> String {
    attribute(body, key).map(text).unwrap_or_default()
}

fn text(expr: &Expression) -> String {
    match expr {
        Expression::String(text) => text.clone(),
        other => match other.evaluate(&Context::new()) {
            Ok(hcl::Value::String(text)) => text,
            _ => String::new(),
        },
    }
}

/// An expression as Terraform source text (`list(string)`).
fn source_text(expr: &Expression) -> String {
    hcl::format::to_string(expr)
        .map(|text| text.trim().to_owned())
        .unwrap_or_default()
}

/// A default as the registry shows it: its value JSON-encoded.
fn json_default(expr: &Expression) -> String {
    match expr.evaluate(&Context::new()) {
        Ok(value) => serde_json::to_string(&value).unwrap_or_default(),
        Err(_) => serde_json::to_string(&source_text(expr)).unwrap_or_default(),
    }
}

/// A provider known only by its local name: Terraform's default, `hashicorp/<name>`.
fn default_provider(name: &str) -> ProviderDependency {
    ProviderDependency {
        name: name.to_owned(),
        namespace: "hashicorp".to_owned(),
        source: format!("hashicorp/{name}"),
        version: String::new(),
    }
}

/// The provider a resource or data block uses: its `provider` argument's first name, else
/// the type's prefix (`aws_instance` → `aws`).
fn imply_provider(providers: &mut BTreeMap<String, ProviderDependency>, block: &Block, kind: &str) {
    let explicit = attribute(&block.body, "provider").and_then(|expr| match expr {
        Expression::Variable(variable) => Some(variable.as_str().to_owned()),
        Expression::Traversal(traversal) => match &traversal.expr {
            Expression::Variable(variable) => Some(variable.as_str().to_owned()),
            _ => None,
        },
        _ => None,
    });
    let name = explicit.unwrap_or_else(|| kind.split('_').next().unwrap_or(kind).to_owned());
    if !name.is_empty() {
        providers
            .entry(name.clone())
            .or_insert_with(|| default_provider(&name));
    }
}

/// `required_providers { aws = { source = "hashicorp/aws", version = ">= 4" } }`, or the
/// legacy `aws = ">= 2.7"`.
fn required_providers(providers: &mut BTreeMap<String, ProviderDependency>, body: &Body) {
    for requirement in body.attributes() {
        let name = requirement.key.as_str().to_owned();
        let mut dependency = default_provider(&name);
        match &requirement.expr {
            Expression::Object(object) => {
                for (key, value) in object {
                    let key = match key {
                        ObjectKey::Identifier(identifier) => identifier.as_str().to_owned(),
                        ObjectKey::Expression(expr) => text(expr),
                        _ => continue,
                    };
                    match key.as_str() {
                        "source" => {
                            let source = text(value);
                            let segments: Vec<&str> = source.split('/').collect();
                            if segments.len() >= 2 {
                                dependency.namespace = segments[segments.len() - 2].to_owned();
                                dependency.source = source.clone();
                            }
                        }
                        "version" => dependency.version = text(value),
                        _ => {}
                    }
                }
            }
            other => dependency.version = text(other),
        }
        providers.insert(name, dependency);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn tar_gz(files: &[(&str, &str)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder
                .append_data(&mut header, path, content.as_bytes())
                .unwrap();
        }
        let tar = builder.into_inner().unwrap();
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(&tar).unwrap();
        encoder.finish().unwrap()
    }

    /// Like [`tar_gz`], writing names as given (the tar crate refuses `..` when asked).
    fn tar_gz_raw_names(files: &[(&str, &str)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in files {
            let mut header = tar::Header::new_old();
            header.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            header.set_cksum();
            builder.append(&header, content.as_bytes()).unwrap();
        }
        let tar = builder.into_inner().unwrap();
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(&tar).unwrap();
        encoder.finish().unwrap()
    }

    const MAIN: &str = r#"
terraform {
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 4.0"
    }
    random = ">= 3.0"
  }
}

variable "cidr" {
  type        = string
  default     = "10.0.0.0/16"
  description = "The VPC's CIDR block"
}

variable "name" {
  type = string
}

variable "tags" {
  type    = map(string)
  default = { env = "dev", count = 2 }
}

resource "aws_vpc" "this" {
  cidr_block = var.cidr
}

data "google_project" "p" {}

module "subnets" {
  source  = "./modules/subnets"
}

output "vpc_id" {
  value       = aws_vpc.this.id
  description = "The VPC id"
}
"#;

    #[test]
    fn parse_describes_root_submodules_and_examples() {
        let archive = tar_gz(&[
            ("./main.tf", MAIN),
            ("README.md", "# VPC\n\nA VPC.\n"),
            (
                "modules/subnets/main.tf",
                "variable \"count\" {\n  default = 3\n}\nresource \"aws_subnet\" \"s\" {}\n",
            ),
            (
                "examples/simple/main.tf",
                "module \"vpc\" {\n  source = \"../..\"\n}\n",
            ),
            ("examples/simple/README.md", "simple"),
            ("modules/subnets/nested/ignored.tf", "not = [valid"),
            ("docs/notes.tf", "also not parsed ("),
        ]);
        let detail = parse(archive.as_slice(), "vpc").unwrap();
        let root = &detail.root;
        assert_eq!((root.path.as_str(), root.name.as_str()), ("", "vpc"));
        assert_eq!(root.readme, "# VPC\n\nA VPC.\n");
        assert!(!root.empty);
        let names: Vec<&str> = root.inputs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["cidr", "name", "tags"]);
        assert_eq!(root.inputs[0].kind, "string");
        assert_eq!(root.inputs[0].default, "\"10.0.0.0/16\"");
        assert_eq!(root.inputs[0].description, "The VPC's CIDR block");
        assert!(!root.inputs[0].required);
        assert!(root.inputs[1].required);
        assert_eq!(root.inputs[1].default, "");
        assert_eq!(root.inputs[2].kind, "map(string)");
        let tags: serde_json::Value = serde_json::from_str(&root.inputs[2].default).unwrap();
        assert_eq!(tags, serde_json::json!({"env": "dev", "count": 2}));
        assert_eq!(root.outputs.len(), 1);
        assert_eq!(root.outputs[0].description, "The VPC id");
        assert_eq!(root.resources.len(), 1);
        assert_eq!(root.resources[0].kind, "aws_vpc");
        assert_eq!(root.dependencies[0].source, "./modules/subnets");
        let providers: Vec<(&str, &str, &str)> = root
            .provider_dependencies
            .iter()
            .map(|p| (p.name.as_str(), p.source.as_str(), p.version.as_str()))
            .collect();
        assert_eq!(
            providers,
            [
                ("aws", "hashicorp/aws", ">= 4.0"),
                ("google", "hashicorp/google", ""),
                ("random", "hashicorp/random", ">= 3.0"),
            ]
        );
        assert_eq!(detail.submodules.len(), 1);
        let subnets = &detail.submodules[0];
        assert_eq!(
            (subnets.path.as_str(), subnets.name.as_str()),
            ("modules/subnets", "subnets")
        );
        assert_eq!(subnets.inputs[0].default, "3");
        assert_eq!(subnets.inputs[0].kind, "");
        assert_eq!(detail.examples.len(), 1);
        assert_eq!(detail.examples[0].path, "examples/simple");
        assert_eq!(detail.examples[0].readme, "simple");
    }

    #[test]
    fn a_module_in_a_subdirectory_is_refused_with_the_reason() {
        let archive = tar_gz(&[("vpc/main.tf", "variable \"x\" {}\n")]);
        assert_eq!(
            parse(archive.as_slice(), "vpc"),
            Err(ConfigError::NoRootConfig)
        );
    }

    #[test]
    fn invalid_hcl_names_the_file() {
        let archive = tar_gz(&[("main.tf", "variable \"x\" {\n"), ("ok.tf", "")]);
        match parse(archive.as_slice(), "vpc") {
            Err(ConfigError::Invalid { file, .. }) => assert_eq!(file, "main.tf"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unsafe_paths_and_garbage_are_refused_without_panic() {
        let archive = tar_gz_raw_names(&[("main.tf", ""), ("../evil.tf", "")]);
        assert!(matches!(
            parse(archive.as_slice(), "m"),
            Err(ConfigError::UnsafePath(_))
        ));
        assert!(matches!(
            parse(&b"not gzip at all"[..], "m"),
            Err(ConfigError::Archive(_))
        ));
        let mut truncated = tar_gz(&[("main.tf", MAIN)]);
        truncated.truncate(truncated.len() / 2);
        assert!(parse(truncated.as_slice(), "m").is_err());
    }

    #[test]
    fn duplicate_variables_are_refused() {
        let archive = tar_gz(&[
            ("a.tf", "variable \"x\" {}\n"),
            ("b.tf", "variable \"x\" {}\n"),
        ]);
        assert!(matches!(
            parse(archive.as_slice(), "m"),
            Err(ConfigError::Invalid { .. })
        ));
    }
}
