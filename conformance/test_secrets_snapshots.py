"""Snapshots of the secrets store through hvac's raft methods, as an operator drives them.

`client.sys.take_raft_snapshot` streams a snapshot, `restore_raft_snapshot` brings back what
was deleted after it (and forgets what was written after it), `force_restore_raft_snapshot`
refuses a corrupt snapshot with a 400. The automated snapshot configuration goes through
`create_or_update_raft_auto_snapshot_config` with upstream's names (`aws-s3`, `aws_s3_*`),
read, list and delete, and the status; schedules run for real on short intervals, to a local
directory and to moto's S3 server on 127.0.0.1:9020 (started by `scripts/services`), pruned
to `retain`. A restore rewinds the whole secrets store, so every scenario restores only a
snapshot it took itself, right before, in the one shared `cairn dev --acl`.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
import urllib.request
import xml.etree.ElementTree as ET

import hvac.exceptions
import pytest

S3_PORT = 9020


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


@pytest.fixture
def kv(vault):
    path = _name("kv")
    vault.sys.enable_secrets_engine("kv", path=path, options={"version": "1"})
    yield path
    vault.sys.disable_secrets_engine(path)


def _wait_for_runs(vault, name: str, runs: int, timeout: float = 15.0) -> dict:
    """Polls the status until `runs` distinct snapshots were recorded; returns the last."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    status: dict = {}
    while time.monotonic() < deadline:
        status = vault.sys.read_raft_auto_snapshot_status(name)["data"]
        assert status["last_snapshot_error"] == "", status
        if status["last_snapshot_url"]:
            seen.add(status["last_snapshot_url"])
        if len(seen) >= runs:
            return status
        time.sleep(0.2)
    raise AssertionError(f"only {len(seen)} snapshots within {timeout}s: {status}")


def test_a_restored_snapshot_brings_back_deleted_secrets_and_forgets_later_ones(vault, kv):
    vault.secrets.kv.v1.create_or_update_secret("kept", {"v": "before"}, mount_point=kv)
    vault.secrets.kv.v1.create_or_update_secret(
        "plain", {"v": "a-distinctive-plaintext-value"}, mount_point=kv
    )
    response = vault.sys.take_raft_snapshot()
    assert response.status_code == 200
    snapshot = response.content
    assert len(snapshot) > 100

    vault.secrets.kv.v1.delete_secret("kept", mount_point=kv)
    vault.secrets.kv.v1.create_or_update_secret("later", {"v": "after"}, mount_point=kv)
    with pytest.raises(hvac.exceptions.InvalidPath):
        vault.secrets.kv.v1.read_secret("kept", mount_point=kv)

    restored = vault.sys.restore_raft_snapshot(snapshot)
    assert restored.status_code == 204

    assert vault.secrets.kv.v1.read_secret("kept", mount_point=kv)["data"] == {"v": "before"}
    with pytest.raises(hvac.exceptions.InvalidPath):
        vault.secrets.kv.v1.read_secret("later", mount_point=kv)
    # Values are in the snapshot as the barrier stores them: encrypted.
    assert b"a-distinctive-plaintext-value" not in snapshot


def test_a_corrupt_snapshot_is_refused_even_when_forced(vault, kv):
    vault.secrets.kv.v1.create_or_update_secret("x", {"v": "1"}, mount_point=kv)
    snapshot = bytearray(vault.sys.take_raft_snapshot().content)
    snapshot[len(snapshot) // 2] ^= 0x55
    with pytest.raises(hvac.exceptions.InvalidRequest) as refused:
        vault.sys.force_restore_raft_snapshot(bytes(snapshot))
    assert "checksum" in str(refused.value)
    assert vault.secrets.kv.v1.read_secret("x", mount_point=kv)["data"] == {"v": "1"}


def test_local_schedules_run_prune_to_retain_and_read_back_without_surprises(vault, tmp_path):
    name = _name("local")
    prefix = _name("snap")
    vault.sys.create_or_update_raft_auto_snapshot_config(
        name,
        interval="1s",
        storage_type="local",
        retain=2,
        path_prefix=str(tmp_path),
        file_prefix=prefix,
        local_max_space=50_000_000,
    )
    try:
        config = vault.sys.read_raft_auto_snapshot_config(name)["data"]
        assert config["interval"] == 1
        assert config["retain"] == 2
        assert config["storage_type"] == "local"
        assert config["path_prefix"] == str(tmp_path)
        assert config["file_prefix"] == prefix
        assert config["local_max_space"] == 50_000_000
        assert name in vault.sys.list_raft_auto_snapshot_configs()["data"]["keys"]

        status = _wait_for_runs(vault, name, runs=3)
        assert status["last_snapshot_url"].startswith("file://")
        assert status["last_snapshot_url"].endswith(".snap")
        assert status["last_snapshot_start"] != "0001-01-01T00:00:00Z"
        # Give the pruning of the last run a moment, then at most `retain` files remain.
        time.sleep(0.5)
        files = sorted(f for f in os.listdir(tmp_path) if f.startswith(prefix + "-"))
        assert 1 <= len(files) <= 2, files
        for file in files:
            assert file[len(prefix) + 1 : -len(".snap")].isdigit(), file
    finally:
        vault.sys.delete_raft_auto_snapshot_config(name)
    with pytest.raises(hvac.exceptions.InvalidPath):
        vault.sys.read_raft_auto_snapshot_config(name)


def _s3_objects(bucket: str, prefix: str) -> list[str]:
    url = f"http://127.0.0.1:{S3_PORT}/{bucket}?list-type=2&prefix={prefix}"
    with urllib.request.urlopen(url, timeout=10) as response:
        tree = ET.fromstring(response.read())
    return sorted(el.text for el in tree.iter() if el.tag.endswith("}Key") or el.tag == "Key")


def test_s3_schedules_with_upstream_names_write_to_moto_and_never_echo_credentials(vault):
    try:
        socket.create_connection(("127.0.0.1", S3_PORT), timeout=2).close()
    except OSError:
        pytest.fail(f"moto is not listening on 127.0.0.1:{S3_PORT}: run scripts/services")
    bucket = _name("cairn-conf")
    request = urllib.request.Request(f"http://127.0.0.1:{S3_PORT}/{bucket}", method="PUT")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    name = _name("s3")
    vault.sys.create_or_update_raft_auto_snapshot_config(
        name,
        interval="1s",
        storage_type="aws-s3",
        retain=1,
        path_prefix="conformance",
        file_prefix="store",
        aws_s3_bucket=bucket,
        aws_s3_region="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="very-secret",
        aws_s3_endpoint=f"127.0.0.1:{S3_PORT}",
        aws_s3_disable_tls=True,
        aws_s3_force_path_style=True,
    )
    try:
        config = vault.sys.read_raft_auto_snapshot_config(name)["data"]
        assert config["storage_type"] == "aws-s3"
        assert config["aws_s3_bucket"] == bucket
        assert "very-secret" not in str(config)
        assert "aws_secret_access_key" not in config

        status = _wait_for_runs(vault, name, runs=2)
        assert status["last_snapshot_url"].startswith(f"s3://{bucket}/conformance/store-")
        time.sleep(0.5)
        keys = _s3_objects(bucket, "conformance/")
        assert 1 <= len(keys) <= 2, keys  # retain 1, plus at most one run in flight
        assert all(k.startswith("conformance/store-") and k.endswith(".snap") for k in keys)
    finally:
        vault.sys.delete_raft_auto_snapshot_config(name)


def test_bad_schedules_are_400s(vault):
    with pytest.raises(hvac.exceptions.InvalidRequest) as refused:
        vault.sys.create_or_update_raft_auto_snapshot_config(
            _name("gcs"),
            interval="1h",
            storage_type="google-gcs",
            path_prefix="no-trailing-slash",
            google_gcs_bucket="b",
        )
    assert "slash" in str(refused.value)
    with pytest.raises(hvac.exceptions.InvalidRequest) as refused:
        vault.sys.create_or_update_raft_auto_snapshot_config(
            _name("local"), interval="1h", storage_type="local", path_prefix="/tmp/x"
        )
    assert "local_max_space" in str(refused.value)
