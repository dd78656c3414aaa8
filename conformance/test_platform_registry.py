"""Private module registry conformance: pytfe 1.5's registry-module and OAuth-client methods
against `cairn dev`.

Scenarios, through pytfe's own calls: create a module (pytfe sends snake_case attributes),
create a version through the deprecated path pytfe uses, upload a gzip tarball with
`upload_tar_gzip` (no bearer), read it back `ok` with `read`, `read_version` and
`list_versions`, list with search and filters, read the registry's module detail with
`read_terraform_registry_module` (inputs, outputs, provider dependencies, resources as the
tarball declares them), update `no_code`, and delete a version, a provider and a name through
pytfe's deprecated delete paths. Publishing from VCS: an OAuth client with a token
(`oauth_clients.create`) and `create_with_vcs_connection` over a git repository served by a
small dumb-HTTP server on 127.0.0.1 that requires the token (plain HTTP on loopback), whose
semver tags become versions.

Raw HTTP (httpx, which pytfe uses) appears only for what pytfe has no method for: the registry
protocol's download (204 with X-Terraform-Get, then the archive fetched without a bearer) and
the module's webhook.
"""

from __future__ import annotations

import base64
import functools
import http.server
import io
import os
import subprocess
import tarfile
import threading
import uuid
from pathlib import Path

import httpx
import pytest
from pytfe.errors import NotFound
from pytfe.models import (
    OAuthClientCreateOptions,
    OrganizationCreateOptions,
    RegistryModuleCreateOptions,
    RegistryModuleCreateVersionOptions,
    RegistryModuleCreateWithVCSConnectionOptions,
    RegistryModuleID,
    RegistryModuleListOptions,
    RegistryModuleUpdateOptions,
    RegistryModuleVCSRepoOptions,
    RegistryName,
)
from pytfe.models.oauth_client import ServiceProviderType

MAIN_TF = """terraform {
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
  type = list(string)
}

resource "aws_vpc" "this" {
  cidr_block = var.cidr_block
}

resource "aws_internet_gateway" "this" {
  vpc_id = aws_vpc.this.id
}

output "vpc_id" {
  description = "The VPC's id."
  value       = aws_vpc.this.id
}
"""

FILES = {
    "main.tf": MAIN_TF,
    "README.md": "# VPC\n\nA VPC.\n",
    "modules/subnets/main.tf": 'variable "vpc_id" {\n  type = string\n}\n',
    "examples/basic/main.tf": 'module "vpc" {\n  source = "../.."\n  azs    = ["a"]\n}\n',
}

TOKEN = "conformance-vcs-token"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _tarball(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def org(tfe) -> str:
    name = _name("reg")
    tfe.organizations.create(OrganizationCreateOptions(name=name, email=f"ops@{name}.example.com"))
    yield name
    tfe.organizations.delete(name)


def _module_id(org: str, name: str = "vpc", provider: str = "aws") -> RegistryModuleID:
    return RegistryModuleID(organization=org, name=name, provider=provider)


def _publish(tfe, org: str, version: str, name: str = "vpc", provider: str = "aws"):
    created = tfe.registry_modules.create_version(
        _module_id(org, name, provider), RegistryModuleCreateVersionOptions(version=version)
    )
    assert created.status.value == "pending"
    assert "/object/" in created.links["upload"]
    tfe.registry_modules.upload_tar_gzip(created.links["upload"], io.BytesIO(_tarball(FILES)))
    return created


def test_module_created_uploaded_read_listed_and_updated(tfe, org):
    module = tfe.registry_modules.create(org, RegistryModuleCreateOptions(name="vpc", provider="aws"))
    assert module.id.startswith("mod-")
    assert module.namespace == org
    assert module.registry_name == RegistryName.PRIVATE
    assert module.status.value == "pending"
    assert module.version_statuses == []

    version = _publish(tfe, org, "1.2.3-alpha+feature")
    assert version.registry_module.id == module.id
    read = tfe.registry_modules.read(_module_id(org))
    assert read.status.value == "setup_complete"
    assert [(s.version, s.status.value) for s in read.version_statuses] == [("1.2.3-alpha+feature", "ok")]
    assert tfe.registry_modules.read(RegistryModuleID(id=module.id)).name == "vpc"
    one = tfe.registry_modules.read_version(_module_id(org), "1.2.3-alpha+feature")
    assert one.status.value == "ok" and one.id == version.id
    _publish(tfe, org, "1.3.0")
    versions = [v.version for v in tfe.registry_modules.list_versions(_module_id(org))]
    assert versions == ["1.3.0", "1.2.3-alpha+feature"]

    tfe.registry_modules.create(org, RegistryModuleCreateOptions(name="dns", provider="google"))
    listed = [m.name for m in tfe.registry_modules.list(org, RegistryModuleListOptions(search="vp"))]
    assert listed == ["vpc"]
    by_provider = tfe.registry_modules.list(
        org, RegistryModuleListOptions(provider="google", registry_name=RegistryName.PRIVATE)
    )
    assert [m.name for m in by_provider] == ["dns"]

    updated = tfe.registry_modules.update(_module_id(org), RegistryModuleUpdateOptions(no_code=True))
    assert updated.no_code is True


def test_registry_module_detail_and_download_match_the_tarball(tfe, org, cairn):
    tfe.registry_modules.create(org, RegistryModuleCreateOptions(name="vpc", provider="aws"))
    _publish(tfe, org, "1.0.0")
    detail = tfe.registry_modules.read_terraform_registry_module(
        RegistryModuleID(namespace=org, name="vpc", provider="aws", registry_name=RegistryName.PRIVATE), "1.0.0"
    )
    assert detail.id == f"{org}/vpc/aws/1.0.0"
    assert detail.root.name == "vpc"
    assert detail.root.empty is False
    assert detail.root.readme == FILES["README.md"]
    inputs = {i.name: i for i in detail.root.inputs}
    assert set(inputs) == {"azs", "cidr_block"}
    assert inputs["cidr_block"].default == '"10.0.0.0/16"' and not inputs["cidr_block"].required
    assert inputs["azs"].type == "list(string)" and inputs["azs"].required
    assert [o.name for o in detail.root.outputs] == ["vpc_id"]
    assert [(p.name, p.source, p.version) for p in detail.root.provider_dependencies] == [
        ("aws", "hashicorp/aws", ">= 5.0")
    ]
    assert sorted(r.type for r in detail.root.resources) == ["aws_internet_gateway", "aws_vpc"]
    assert detail.versions == ["1.0.0"]

    # The registry protocol's download: 204 + X-Terraform-Get, fetched with no bearer.
    base = cairn.urls["platform"]
    headers = {"Authorization": f"Bearer {cairn.platform_token}"}
    answer = httpx.get(f"{base}/api/registry/v1/modules/{org}/vpc/aws/1.0.0/download", headers=headers)
    assert answer.status_code == 204
    location = answer.headers["X-Terraform-Get"]
    assert location.endswith(".tar.gz")
    archive = httpx.get(location)
    assert archive.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
        assert tar.extractfile("main.tf").read().decode() == MAIN_TF
    versions = httpx.get(f"{base}/api/registry/v1/modules/{org}/vpc/aws/versions", headers=headers).json()
    assert versions["modules"][0]["versions"][0]["submodules"][0]["path"] == "modules/subnets"


def test_deletes_through_pytfes_paths(tfe, org):
    for provider in ("aws", "google"):
        tfe.registry_modules.create(org, RegistryModuleCreateOptions(name="vpc", provider=provider))
    _publish(tfe, org, "1.0.0")
    _publish(tfe, org, "1.1.0")
    tfe.registry_modules.delete_version(_module_id(org), "1.1.0")
    assert [s.version for s in tfe.registry_modules.read(_module_id(org)).version_statuses] == ["1.0.0"]
    tfe.registry_modules.delete_provider(_module_id(org))
    with pytest.raises(NotFound):
        tfe.registry_modules.read(_module_id(org))
    tfe.registry_modules.delete_by_name(_module_id(org, provider="google"))
    assert list(tfe.registry_modules.list(org)) == []
    tfe.registry_modules.create(org, RegistryModuleCreateOptions(name="dns", provider="aws"))
    tfe.registry_modules.delete(org, "dns")
    assert list(tfe.registry_modules.list(org)) == []


def _git(cwd: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Test",
        "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "Test",
        "GIT_COMMITTER_EMAIL": "test@example.com",
    }
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, env=env)


class _GitHost(http.server.SimpleHTTPRequestHandler):
    """Git's dumb HTTP protocol: static files, for requests carrying the OAuth token only."""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        expected = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def git_host(tmp_path: Path):
    """A repository `team/terraform-aws-vpc` with tags v1.0.0 and 1.1.0 and a non-semver tag,
    served on 127.0.0.1; yields (base URL, work tree, bare repository)."""
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    for path, text in FILES.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "vpc")
    _git(work, "tag", "v1.0.0")
    _git(work, "tag", "latest")
    (work / "versions.tf").write_text('terraform {\n  required_version = ">= 1.5"\n}\n')
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "require 1.5")
    _git(work, "tag", "-a", "1.1.0", "-m", "1.1.0")
    served = tmp_path / "served"
    bare = served / "team" / "terraform-aws-vpc.git"
    bare.parent.mkdir(parents=True)
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    _git(bare, "update-server-info")
    handler = functools.partial(_GitHost, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", work, bare
    server.shutdown()
    thread.join()


def test_publish_from_vcs_tags_through_an_oauth_client(tfe, org, git_host):
    url, work, bare = git_host
    client = tfe.oauth_clients.create(
        org,
        OAuthClientCreateOptions(
            name="git", api_url=url, http_url=url, oauth_token=TOKEN, service_provider=ServiceProviderType.GITHUB
        ),
    )
    assert client.id.startswith("oc-")
    assert client.service_provider == ServiceProviderType.GITHUB
    token_id = client.oauth_tokens[0]["id"]
    tokens = list(tfe.oauth_tokens.list(org))
    assert [t.id for t in tokens] == [token_id]

    module = tfe.registry_modules.create_with_vcs_connection(
        RegistryModuleCreateWithVCSConnectionOptions(
            vcs_repo=RegistryModuleVCSRepoOptions(
                identifier="team/terraform-aws-vpc",
                display_identifier="team/terraform-aws-vpc",
                oauth_token_id=token_id,
                organization_name=org,
            )
        )
    )
    assert (module.name, module.provider, module.namespace) == ("vpc", "aws", org)
    assert module.status.value == "setup_complete"
    assert [(s.version, s.status.value) for s in module.version_statuses] == [("1.1.0", "ok"), ("1.0.0", "ok")]
    assert module.vcs_repo.oauth_token_id == token_id
    assert module.publishing_mechanism.value == "git_tag"

    # A new tag, pushed, reaches the module through its webhook.
    (work / "outputs.tf").write_text('output "region" {\n  value = "eu"\n}\n')
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "region")
    _git(work, "tag", "v2.0.0")
    _git(work, "push", "-q", str(bare), "v2.0.0")
    _git(bare, "update-server-info")
    hook = httpx.post(module.vcs_repo.webhook_url, json={"ref": "refs/tags/v2.0.0"})
    assert hook.status_code == 200 and hook.json() == {"published": ["2.0.0"]}
    detail = tfe.registry_modules.read_terraform_registry_module(
        RegistryModuleID(namespace=org, name="vpc", provider="aws"), "2.0.0"
    )
    assert [o.name for o in detail.root.outputs] == ["region", "vpc_id"]
    assert detail.tag == "v2.0.0"
