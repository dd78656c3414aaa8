"""Platform conformance: pytfe 1.5 against `cairn dev`'s Terraform Enterprise-compatible API.

Each scenario drives the platform the way a pytfe user does, through pytfe's own calls (the
`tfe` fixture carries the root token, a user token of the site administrator). Raw HTTP
(httpx, which pytfe itself uses) appears only where pytfe cannot say what is needed or hides
what must be checked; each such place says why.

Scenarios: organizations (create, read, list), memberships (invite into the owners team,
list with filters), workspaces (create, read by name and id, list with search, update, lock
and unlock, delete), configuration versions (create with auto-queue-runs off, upload of a
directory packed by pytfe, status `uploaded` with timestamps, read, list, download of the
exact bytes, ingress attributes, archive of a superseded version, the 409 for the current
one, the errored status of a corrupt upload), and runs (the run an upload queues, create,
read, list with a status filter, cancel and discard).

All scenarios share one `cairn dev`; each works in its own randomly named organization.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import httpx
import pytest
from pytfe.errors import NotFound, TFEError
from pytfe.models import (
    ConfigurationVersionCreateOptions,
    OrganizationCreateOptions,
    OrganizationMembershipCreateOptions,
    OrganizationMembershipListOptions,
    RunCreateOptions,
    RunListOptions,
    Team,
    Workspace,
    WorkspaceCreateOptions,
    WorkspaceListOptions,
    WorkspaceLockOptions,
    WorkspaceUpdateOptions,
)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def org(tfe) -> str:
    name = _name("conf")
    created = tfe.organizations.create(OrganizationCreateOptions(name=name, email=f"ops@{name}.example.com"))
    assert created.name == name
    yield name
    tfe.organizations.delete(name)


@pytest.fixture
def workspace(tfe, org) -> Workspace:
    return tfe.workspaces.create(org, WorkspaceCreateOptions(name=_name("ws")))


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    (tmp_path / "main.tf").write_text('resource "null_resource" "one" {}\n')
    (tmp_path / "modules" / "net").mkdir(parents=True)
    (tmp_path / "modules" / "net" / "main.tf").write_text("# a module\n")
    return tmp_path


def _upload_dir(tfe, workspace_id: str, path: Path, auto_queue_runs: bool = False):
    cv = tfe.configuration_versions.create(
        workspace_id, ConfigurationVersionCreateOptions(auto_queue_runs=auto_queue_runs)
    )
    assert cv.status.value == "pending"
    assert cv.upload_url and "/object/" in cv.upload_url
    tfe.configuration_versions.upload(cv.upload_url, str(path))
    return cv


def test_organization_create_read_and_list(tfe, org):
    read = tfe.organizations.read(org)
    assert read.name == org
    assert org in [o.name for o in tfe.organizations.list()]


def test_membership_invite_and_list(tfe, org):
    owners = next(team for team in tfe.teams.list(org) if team.name == "owners")
    email = f"{_name('invitee')}@example.com"
    membership = tfe.organization_memberships.create(
        org, OrganizationMembershipCreateOptions(email=email, teams=[Team(id=owners.id)])
    )
    assert membership.id.startswith("ou-")
    assert membership.status.value == "invited"
    invited = list(
        tfe.organization_memberships.list(
            org, OrganizationMembershipListOptions(status="invited", emails=[email], page_size=2)
        )
    )
    assert [m.id for m in invited] == [membership.id]
    everyone = list(tfe.organization_memberships.list(org))
    assert membership.id in [m.id for m in everyone]
    assert len(everyone) == 2  # the creator (active) and the invitee


def test_workspace_create_read_update_list_delete(tfe, org):
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name="web-app", description="front end", auto_apply=True))
    assert ws.id.startswith("ws-")
    assert ws.name == "web-app"
    assert ws.auto_apply is True
    assert ws.locked is False
    assert ws.organization is not None and ws.organization.id == org

    by_name = tfe.workspaces.read("web-app", organization=org)
    by_id = tfe.workspaces.read_by_id(ws.id)
    assert by_name.id == by_id.id == ws.id
    assert by_id.description == "front end"

    tfe.workspaces.create(org, WorkspaceCreateOptions(name="db"))
    names = [w.name for w in tfe.workspaces.list(org)]
    assert names == ["db", "web-app"]
    assert [w.name for w in tfe.workspaces.list(org, WorkspaceListOptions(search="web"))] == ["web-app"]

    updated = tfe.workspaces.update_by_id(ws.id, WorkspaceUpdateOptions(name="frontend", auto_apply=False))
    assert updated.name == "frontend"
    assert updated.auto_apply is False
    with pytest.raises(NotFound):
        tfe.workspaces.read("web-app", organization=org)

    tfe.workspaces.delete("frontend", organization=org)
    with pytest.raises(NotFound):
        tfe.workspaces.read_by_id(ws.id)


def test_workspace_lock_and_unlock(tfe, workspace):
    locked = tfe.workspaces.lock(workspace.id, WorkspaceLockOptions(reason="maintenance"))
    assert locked.locked is True
    assert locked.locked_by is not None and locked.locked_by.user is not None
    with pytest.raises(TFEError) as conflict:
        tfe.workspaces.lock(workspace.id, WorkspaceLockOptions(reason="again"))
    assert "already locked" in str(conflict.value)
    unlocked = tfe.workspaces.unlock(workspace.id)
    assert unlocked.locked is False


def test_configuration_version_upload_read_list_download(tfe, workspace, config_dir):
    cv = _upload_dir(tfe, workspace.id, config_dir)
    read = tfe.configuration_versions.read(cv.id)
    assert read.status.value == "uploaded"
    assert read.upload_url is None
    assert read.source.value == "tfe-api"
    assert read.auto_queue_runs is False
    assert set(read.status_timestamps) >= {"started-at", "finished-at", "uploaded-at"}
    assert [v.id for v in tfe.configuration_versions.list(workspace.id)] == [cv.id]
    assert tfe.configuration_versions.ingress_attributes(cv.id) is None

    archive = tfe.configuration_versions.download(cv.id)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        names = sorted(tar.getnames())
    assert names == ["main.tf", "modules/net/main.tf"]

    current = tfe.workspaces.read_by_id(workspace.id)
    assert current.current_configuration_version is not None
    assert current.current_configuration_version.id == cv.id


def test_configuration_version_archive(tfe, workspace, config_dir):
    old = _upload_dir(tfe, workspace.id, config_dir)
    with pytest.raises(TFEError) as conflict:
        tfe.configuration_versions.archive(old.id)
    assert "because it is current" in str(conflict.value)
    _upload_dir(tfe, workspace.id, config_dir)
    tfe.configuration_versions.archive(old.id)
    assert tfe.configuration_versions.read(old.id).status.value == "archived"
    with pytest.raises(NotFound):
        tfe.configuration_versions.download(old.id)


def test_configuration_version_corrupt_upload_errors(tfe, workspace):
    cv = tfe.configuration_versions.create(workspace.id, ConfigurationVersionCreateOptions(auto_queue_runs=False))
    with pytest.raises(TFEError) as refused:
        tfe.configuration_versions.upload_tar_gzip(cv.upload_url, io.BytesIO(b"not a tarball"))
    assert "gzip" in str(refused.value)
    read = tfe.configuration_versions.read(cv.id)
    assert read.status.value == "errored"
    assert read.error == "archive_not_gzip"
    assert read.error_message


def test_upload_url_needs_no_bearer_and_repeats_idempotently(tfe, workspace, config_dir):
    # Raw HTTP: pytfe gives no way to PUT the same bytes twice and see both answers.
    cv = tfe.configuration_versions.create(workspace.id, ConfigurationVersionCreateOptions(auto_queue_runs=False))
    body = io.BytesIO()
    with tarfile.open(fileobj=body, mode="w:gz") as tar:
        tar.add(config_dir / "main.tf", arcname="main.tf")
    headers = {"Content-Type": "application/octet-stream"}
    with httpx.Client(timeout=10) as client:
        assert client.put(cv.upload_url, content=body.getvalue(), headers=headers).status_code == 200
        assert client.put(cv.upload_url, content=body.getvalue(), headers=headers).status_code == 200
        assert client.put(cv.upload_url, content=b"\x1f\x8bother", headers=headers).status_code == 409
    assert tfe.configuration_versions.read(cv.id).status.value == "uploaded"


def test_auto_queued_run_and_run_actions(tfe, workspace, config_dir):
    cv = _upload_dir(tfe, workspace.id, config_dir, auto_queue_runs=True)
    runs = list(tfe.runs.list(workspace.id))
    assert len(runs) == 1
    queued = runs[0]
    assert queued.status.value == "plan_queued"
    assert queued.configuration_version is not None and queued.configuration_version.id == cv.id

    second = tfe.runs.create(RunCreateOptions(workspace=Workspace(id=workspace.id), message="second"))
    assert second.id.startswith("run-")
    assert second.status.value == "pending"
    assert second.message == "second"

    pending = list(tfe.runs.list(workspace.id, RunListOptions(status="pending")))
    assert [r.id for r in pending] == [second.id]

    tfe.runs.cancel(queued.id)
    assert tfe.runs.read(queued.id).status.value == "canceled"
    assert tfe.runs.read(second.id).status.value == "plan_queued"
    tfe.runs.cancel(second.id)
    with pytest.raises(TFEError):
        tfe.runs.discard(second.id)

    third = tfe.runs.create(RunCreateOptions(workspace=Workspace(id=workspace.id)))
    fourth = tfe.runs.create(RunCreateOptions(workspace=Workspace(id=workspace.id)))
    tfe.runs.discard(fourth.id)
    assert tfe.runs.read(fourth.id).status.value == "discarded"
    assert tfe.runs.read(third.id).status.value == "plan_queued"
