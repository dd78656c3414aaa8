"""kv version 2 through hvac, unchanged: the dev server's `secret/` mount (hvac's default
`secrets.kv` is version 2 and its default mount point is `secret`), versions and their
metadata, check-and-set failures as hvac raises them, soft delete, undelete, destroy, metadata
and its settings, `max_versions` pruning, the mount configuration, patch, subkeys, ACL paths
under `data/` and `metadata/`, and mounting or tuning a kv mount to version 2.

Scenarios that change a mount-wide setting (`config`) use a version 2 mount of their own; the
others use `secret/` with keys under a random prefix, so they are independent of each other and
of order within the one shared `cairn dev`.
"""

from __future__ import annotations

import re
import secrets

import hvac
import hvac.exceptions
import pytest

# Go's RFC3339Nano in UTC: fraction optional, trailing zeros trimmed.
RFC3339_NANO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


@pytest.fixture
def kv(vault):
    """hvac's default kv accessor (version 2 unless told otherwise)."""
    return vault.secrets.kv


@pytest.fixture
def prefix() -> str:
    return _name("kv2")


@pytest.fixture
def v2_mount(vault):
    path = _name("kv2-mount")
    vault.sys.enable_secrets_engine("kv", path=path, options={"version": "2"})
    yield path
    vault.sys.disable_secrets_engine(path)


@pytest.fixture
def client_for(cairn):
    made = []

    def make(token: str) -> hvac.Client:
        client = hvac.Client(url=cairn.urls["secrets"], token=token, timeout=10)
        made.append(client)
        return client

    yield make
    for client in made:
        client.adapter.close()


def _read(kv, path, **kwargs):
    return kv.read_secret_version(path=path, raise_on_deleted_version=True, **kwargs)


# ---- the dev mount ------------------------------------------------------------------------


def test_dev_server_mounts_kv_version_2_at_secret(vault, kv):
    assert kv.default_kv_version == "2"
    mounts = vault.sys.list_mounted_secrets_engines()["data"]
    assert mounts["secret/"]["type"] == "kv", mounts["secret/"]
    assert mounts["secret/"]["options"] == {"version": "2"}, mounts["secret/"]


# ---- versions -----------------------------------------------------------------------------


def test_each_write_is_a_new_version_readable_by_number(kv, prefix):
    path = f"{prefix}/db"
    first = kv.create_or_update_secret(path=path, secret={"user": "alice", "port": 5432})
    meta = first["data"]
    assert meta["version"] == 1, first
    assert RFC3339_NANO.match(meta["created_time"]), meta
    assert meta["deletion_time"] == "" and meta["destroyed"] is False, meta
    assert meta["custom_metadata"] is None, meta
    assert kv.create_or_update_secret(path=path, secret={"user": "bob"})["data"]["version"] == 2

    latest = _read(kv, path)["data"]
    assert latest["data"] == {"user": "bob"}, latest
    assert latest["metadata"]["version"] == 2, latest
    old = _read(kv, path, version=1)["data"]
    assert old["data"] == {"user": "alice", "port": 5432}, old
    assert old["metadata"]["created_time"] == meta["created_time"], old
    with pytest.raises(hvac.exceptions.InvalidPath):
        _read(kv, path, version=7)
    with pytest.raises(hvac.exceptions.InvalidPath):
        _read(kv, f"{prefix}/never-written")


def test_check_and_set_failures_are_invalid_requests(kv, prefix):
    path = f"{prefix}/cas"
    assert kv.create_or_update_secret(path=path, secret={"v": 1}, cas=0)["data"]["version"] == 1
    with pytest.raises(hvac.exceptions.InvalidRequest) as stale:
        kv.create_or_update_secret(path=path, secret={"v": 2}, cas=0)
    assert "did not match the current version" in str(stale.value)
    with pytest.raises(hvac.exceptions.InvalidRequest):
        kv.create_or_update_secret(path=path, secret={"v": 2}, cas=-1)
    assert kv.create_or_update_secret(path=path, secret={"v": 2}, cas=1)["data"]["version"] == 2

    kv.update_metadata(path=path, cas_required=True)
    with pytest.raises(hvac.exceptions.InvalidRequest) as required:
        kv.create_or_update_secret(path=path, secret={"v": 3})
    assert "check-and-set parameter required for this call" in str(required.value)
    with pytest.raises(hvac.exceptions.InvalidRequest) as unparsable:
        kv.create_or_update_secret(path=path, secret={"v": 3}, cas="x")
    assert "error parsing check-and-set parameter" in str(unparsable.value)


def test_a_write_without_data_is_an_invalid_request(vault, prefix):
    with pytest.raises(hvac.exceptions.InvalidRequest) as missing:
        vault.adapter.post(f"/v1/secret/data/{prefix}/x", json={"options": {}})
    assert "no data provided" in str(missing.value)


def test_patch_adds_to_the_current_version(kv, prefix):
    path = f"{prefix}/patched"
    kv.create_or_update_secret(path=path, secret={"a": "1", "b": "2"})
    patched = kv.patch(path=path, secret={"b": "two", "c": "3"})
    assert patched["data"]["version"] == 2, patched
    assert _read(kv, path)["data"]["data"] == {"a": "1", "b": "two", "c": "3"}
    with pytest.raises(hvac.exceptions.InvalidPath) as missing:
        kv.patch(path=f"{prefix}/absent", secret={"a": "1"})
    assert "patch only works on existing data" in str(missing.value)


# ---- soft delete, undelete, destroy -------------------------------------------------------


def test_deleting_the_latest_version_hides_it_until_undeleted(kv, prefix):
    path = f"{prefix}/soft"
    for n in (1, 2):
        kv.create_or_update_secret(path=path, secret={"n": n})
    deleted = kv.delete_latest_version_of_secret(path=path)
    assert deleted.status_code == 204, deleted.text

    with pytest.raises(hvac.exceptions.InvalidPath):
        _read(kv, path)
    shown = kv.read_secret_version(path=path, raise_on_deleted_version=False)
    assert shown["data"]["data"] is None, shown
    assert shown["data"]["metadata"]["version"] == 2, shown
    assert RFC3339_NANO.match(shown["data"]["metadata"]["deletion_time"]), shown
    assert _read(kv, path, version=1)["data"]["data"] == {"n": 1}

    versions = kv.read_secret_metadata(path=path)["data"]["versions"]
    assert versions["1"]["deletion_time"] == "", versions
    assert versions["2"]["deletion_time"] != "", versions

    undeleted = kv.undelete_secret_versions(path=path, versions=[2])
    assert undeleted.status_code == 204, undeleted.text
    assert _read(kv, path)["data"]["data"] == {"n": 2}


def test_deleting_and_destroying_listed_versions(kv, prefix):
    path = f"{prefix}/listed"
    for n in range(1, 5):
        kv.create_or_update_secret(path=path, secret={"n": n})
    assert kv.delete_secret_versions(path=path, versions=[1, 3, 9]).status_code == 204
    versions = kv.read_secret_metadata(path=path)["data"]["versions"]
    assert [versions[str(n)]["deletion_time"] != "" for n in range(1, 5)] == [True, False, True, False]

    assert kv.destroy_secret_versions(path=path, versions=[2, 4]).status_code == 204
    versions = kv.read_secret_metadata(path=path)["data"]["versions"]
    assert [versions[str(n)]["destroyed"] for n in range(1, 5)] == [False, True, False, True]
    # A destroyed version is gone even for raise_on_deleted_version=False (no deletion_time).
    with pytest.raises(hvac.exceptions.InvalidPath):
        kv.read_secret_version(path=path, version=4, raise_on_deleted_version=False)
    # Undelete brings back deleted versions, never destroyed ones.
    kv.undelete_secret_versions(path=path, versions=[1, 2])
    assert _read(kv, path, version=1)["data"]["data"] == {"n": 1}
    with pytest.raises(hvac.exceptions.InvalidPath):
        _read(kv, path, version=2)


def test_deleting_metadata_removes_every_version(kv, prefix):
    path = f"{prefix}/gone"
    kv.create_or_update_secret(path=path, secret={"n": 1})
    kv.create_or_update_secret(path=path, secret={"n": 2})
    assert kv.delete_metadata_and_all_versions(path=path).status_code == 204
    with pytest.raises(hvac.exceptions.InvalidPath):
        kv.read_secret_metadata(path=path)
    with pytest.raises(hvac.exceptions.InvalidPath):
        _read(kv, path, version=1)
    # Deleting what does not exist is fine, and a new write starts again at version 1.
    assert kv.delete_metadata_and_all_versions(path=path).status_code == 204
    assert kv.create_or_update_secret(path=path, secret={"n": 3})["data"]["version"] == 1


# ---- metadata and listing -----------------------------------------------------------------


def test_list_secrets_lists_keys_and_folders(kv, prefix):
    for path in ("a/one", "a/two", "a/deeper/three"):
        kv.create_or_update_secret(path=f"{prefix}/{path}", secret={"v": path})
    assert kv.list_secrets(path=f"{prefix}/a")["data"]["keys"] == ["deeper/", "one", "two"]
    assert kv.list_secrets(path=prefix)["data"]["keys"] == ["a/"]
    with pytest.raises(hvac.exceptions.InvalidPath):
        kv.list_secrets(path=f"{prefix}/nothing")


def test_metadata_settings_are_written_and_read_back(kv, prefix):
    path = f"{prefix}/settings"
    kv.create_or_update_secret(path=path, secret={"v": 1})
    updated = kv.update_metadata(
        path=path,
        max_versions=5,
        cas_required=False,
        delete_version_after="30s",
        custom_metadata={"team": "blue", "tier": "gold"},
    )
    assert updated.status_code == 204, updated.text
    meta = kv.read_secret_metadata(path=path)["data"]
    assert meta["max_versions"] == 5, meta
    assert meta["cas_required"] is False, meta
    assert meta["delete_version_after"] == "30s", meta
    assert meta["custom_metadata"] == {"team": "blue", "tier": "gold"}, meta
    assert meta["current_version"] == 1 and meta["oldest_version"] == 0, meta
    assert RFC3339_NANO.match(meta["created_time"]) and RFC3339_NANO.match(meta["updated_time"]), meta
    assert set(meta["versions"]) == {"1"}, meta
    # Versions show the key's custom metadata too.
    assert _read(kv, path)["data"]["metadata"]["custom_metadata"] == {"team": "blue", "tier": "gold"}
    with pytest.raises(hvac.exceptions.InvalidRequest) as invalid:
        kv.update_metadata(path=path, custom_metadata={"empty": ""})
    assert "custom_metadata validation failed" in str(invalid.value)


def test_subkeys_show_the_shape_without_values(vault, kv, prefix):
    path = f"{prefix}/shape"
    kv.create_or_update_secret(path=path, secret={"user": "u", "db": {"host": "h", "port": 1}})
    subkeys = vault.read(f"secret/subkeys/{path}")["data"]
    assert subkeys["subkeys"] == {"user": None, "db": {"host": None, "port": None}}, subkeys
    assert subkeys["metadata"]["version"] == 1, subkeys


# ---- mount configuration and pruning (a mount of its own) ---------------------------------


def test_configuration_and_max_versions_pruning(kv, v2_mount):
    assert kv.read_configuration(mount_point=v2_mount)["data"] == {
        "max_versions": 0,
        "cas_required": False,
        "delete_version_after": "0s",
    }
    configured = kv.configure(max_versions=2, delete_version_after="30m", mount_point=v2_mount)
    assert configured.status_code == 204, configured.text
    config = kv.read_configuration(mount_point=v2_mount)["data"]
    assert config["max_versions"] == 2 and config["delete_version_after"] == "30m0s", config

    for n in (1, 2, 3):
        written = kv.create_or_update_secret(path="pruned", secret={"n": n}, mount_point=v2_mount)
        assert written["data"]["deletion_time"] != "", written  # 30 minutes later
    meta = kv.read_secret_metadata(path="pruned", mount_point=v2_mount)["data"]
    assert sorted(meta["versions"]) == ["2", "3"], meta
    assert meta["oldest_version"] == 2 and meta["current_version"] == 3, meta
    with pytest.raises(hvac.exceptions.InvalidPath):
        kv.read_secret_version(
            path="pruned", version=1, mount_point=v2_mount, raise_on_deleted_version=True
        )

    kv.configure(max_versions=10, cas_required=True, delete_version_after="0s", mount_point=v2_mount)
    with pytest.raises(hvac.exceptions.InvalidRequest) as required:
        kv.create_or_update_secret(path="pruned", secret={"n": 4}, mount_point=v2_mount)
    assert "check-and-set parameter required" in str(required.value)


# ---- mounting and tuning ------------------------------------------------------------------


def test_kv_v2_alias_and_tuning_a_version_1_mount_to_version_2(vault):
    alias = _name("kv-alias")
    vault.sys.enable_secrets_engine("kv-v2", path=alias)
    legacy = _name("kv-legacy")
    vault.sys.enable_secrets_engine("kv", path=legacy, options={"version": "1"})
    try:
        mounts = vault.sys.list_mounted_secrets_engines()["data"]
        assert mounts[f"{alias}/"]["type"] == "kv", mounts[f"{alias}/"]
        assert mounts[f"{alias}/"]["options"] == {"version": "2"}, mounts[f"{alias}/"]

        vault.secrets.kv.v1.create_or_update_secret("app/db", {"user": "a"}, mount_point=legacy)
        vault.sys.tune_mount_configuration(legacy, options={"version": "2"})
        upgraded = vault.secrets.kv.v2.read_secret_version(
            path="app/db", mount_point=legacy, raise_on_deleted_version=True
        )
        assert upgraded["data"]["data"] == {"user": "a"}, upgraded
        assert upgraded["data"]["metadata"]["version"] == 1, upgraded
        with pytest.raises(hvac.exceptions.InvalidRequest) as downgrade:
            vault.sys.tune_mount_configuration(legacy, options={"version": "1"})
        assert "cannot downgrade mount from version 2" in str(downgrade.value)
    finally:
        vault.sys.disable_secrets_engine(alias)
        vault.sys.disable_secrets_engine(legacy)


# ---- policies -----------------------------------------------------------------------------


def test_policies_use_the_data_and_metadata_prefixes(vault, kv, prefix, client_for):
    policy = _name("kv2-reader")
    vault.sys.create_or_update_acl_policy(
        name=policy,
        policy=(
            f'path "secret/data/{prefix}/*" {{ capabilities = ["read"] }}\n'
            f'path "secret/metadata/{prefix}/*" {{ capabilities = ["list"] }}\n'
        ),
    )
    kv.create_or_update_secret(path=f"{prefix}/visible", secret={"v": 1})
    token = vault.auth.token.create(policies=[policy], ttl="1h")["auth"]["client_token"]
    reader = client_for(token).secrets.kv

    assert _read(reader, f"{prefix}/visible")["data"]["data"] == {"v": 1}
    assert reader.list_secrets(path=prefix)["data"]["keys"] == ["visible"]
    with pytest.raises(hvac.exceptions.Forbidden):
        reader.create_or_update_secret(path=f"{prefix}/visible", secret={"v": 2})
    with pytest.raises(hvac.exceptions.Forbidden):
        reader.read_secret_metadata(path=f"{prefix}/visible")
    with pytest.raises(hvac.exceptions.Forbidden):
        reader.delete_latest_version_of_secret(path=f"{prefix}/visible")
    assert _read(kv, f"{prefix}/visible")["data"]["data"] == {"v": 1}
