//! Fixtures of the module registry tests (`registry_modules.rs`, `registry_protocol.rs`,
//! `vcs.rs`), on top of `support::TestPlatform` and `fixtures`: a module tarball whose
//! declarations the tests know, and creating modules and versions and uploading them the way
//! pytfe does (snake_case attributes, the deprecated version path, a PUT with no bearer).
//!
//! Each test binary compiles this module separately and uses only part of it.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use serde_json::{Value, json};

use crate::fixtures::{tar_gz, upload};
use crate::support::{Answer, ROOT, TestPlatform};

/// The root module of [`module_files`].
pub(crate) const MAIN_TF: &str = r#"terraform {
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}

variable "cidr_block" {
  type        = string
  default     = "10.0.0.0/16"
  description = "The VPC's CIDR block."
}

variable "azs" {
  type        = list(string)
  description = "Availability zones."
}

variable "tags" {
  type    = map(string)
  default = {}
}

resource "aws_vpc" "this" {
  cidr_block = var.cidr_block
  tags       = var.tags
}

module "subnets" {
  source = "./modules/subnets"
  vpc_id = aws_vpc.this.id
}

output "vpc_id" {
  description = "The VPC's id."
  value       = aws_vpc.this.id
}
"#;

/// The files of a VPC module: the root, a submodule `modules/subnets`, an example
/// `examples/basic` and a README.
pub(crate) fn module_files() -> Vec<(&'static str, &'static [u8])> {
    vec![
        ("main.tf", MAIN_TF.as_bytes()),
        ("README.md", b"# VPC\n\nCreates a VPC with subnets.\n"),
        (
            "modules/subnets/main.tf",
            b"variable \"vpc_id\" {\n  type = string\n}\n\nresource \"aws_subnet\" \"a\" {\n  vpc_id = var.vpc_id\n}\n\nresource \"aws_subnet\" \"b\" {\n  vpc_id = var.vpc_id\n}\n",
        ),
        (
            "examples/basic/main.tf",
            b"module \"vpc\" {\n  source = \"../..\"\n  azs    = [\"a\"]\n}\n",
        ),
    ]
}

/// [`module_files`] as a `.tar.gz` with the module at its root.
pub(crate) fn module_archive() -> Vec<u8> {
    tar_gz(&module_files())
}

/// Creates private module `name`/`provider` in `organization` with pytfe's body.
pub(crate) async fn create_module(
    platform: &TestPlatform,
    organization: &str,
    name: &str,
    provider: &str,
) -> Answer {
    platform
        .post(
            &format!("/api/v2/organizations/{organization}/registry-modules"),
            ROOT,
            json!({"data": {"type": "registry-modules", "attributes": {
                "name": name, "provider": provider, "registry_name": "private", "no_code": false
            }}}),
        )
        .await
}

/// Creates version `version` through the deprecated path pytfe and go-tfe use; the answer.
pub(crate) async fn create_version(
    platform: &TestPlatform,
    organization: &str,
    name: &str,
    provider: &str,
    version: &str,
) -> Answer {
    platform
        .post(
            &format!("/api/v2/registry-modules/{organization}/{name}/{provider}/versions"),
            ROOT,
            json!({"data": {"type": "registry-module-versions", "attributes": {
                "version": version, "commit_sha": "abc123"
            }}}),
        )
        .await
}

/// Creates version `version` and uploads `archive` to it; the upload's answer.
pub(crate) async fn publish_version(
    platform: &TestPlatform,
    organization: &str,
    name: &str,
    provider: &str,
    version: &str,
    archive: Vec<u8>,
) -> Answer {
    let created = create_version(platform, organization, name, provider, version)
        .await
        .expect(201);
    let url = created.body["data"]["links"]["upload"]
        .as_str()
        .expect("links.upload")
        .to_owned();
    upload(platform, &url, archive).await
}

/// Reads the module `organization/name/provider` of the private registry.
pub(crate) async fn read_module(
    platform: &TestPlatform,
    organization: &str,
    name: &str,
    provider: &str,
) -> Value {
    platform
        .get(
            &format!(
                "/api/v2/organizations/{organization}/registry-modules/private/{organization}/{name}/{provider}"
            ),
            ROOT,
        )
        .await
        .expect(200)
        .body
}
