"""Consul's ACL bootstrap against `cairn server` (py-consul's `acl.bootstrap()`).

`cairn server` runs the registry with ACLs on, as a Consul server with `acl { enabled = true }`;
with no `initial_management_token` in its config, the operator gets the first management token
from `PUT /v1/acl/bootstrap`, once. Each test starts its own `cairn server` from a minimal config
(the registry only, on 127.0.0.1:0, its data dir in a temporary directory), reads the registry's
address from the banner up to `ready`, and stops it with SIGTERM, which must exit 0.
"""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from consul.exceptions import BadRequest

from conftest import READY_TIMEOUT, STOP_TIMEOUT, _cairn_bin

_REGISTRY_LINE = re.compile(r"^\s*registry\s+(https?://\S+)\s*$")
_RESET_INDEX = re.compile(r"Permission denied: ACL bootstrap no longer allowed \(reset index: (\d+)\)")


class Server:
    """A running `cairn server --config <work>/cairn.hcl` and the registry's address."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.stderr_path = work / "cairn.stderr"
        config = work / "cairn.hcl"
        if not config.exists():
            config.write_text(f'data_dir = "{work / "data"}"\n\nregistry {{\n  address = "127.0.0.1:0"\n}}\n')
        self.cmd = [str(_cairn_bin()), "server", "--config", str(config)]
        with open(self.stderr_path, "ab") as stderr:
            self.proc = subprocess.Popen(
                self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, cwd=work, text=True
            )
        self.stdout: list[str] = []
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.stdout.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, name="cairn-server-stdout", daemon=True).start()
        self.url = None
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._abort(f"did not print `ready` within {READY_TIMEOUT:.0f}s")
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                self.proc.wait(5)
                self._abort(f"exited with status {self.proc.returncode} before printing `ready`")
            if line.strip() == "ready":
                break
            if m := _REGISTRY_LINE.match(line):
                self.url = m.group(1)
        if self.url is None:
            self._abort("printed `ready` without a registry line")

    def output(self) -> str:
        return (
            "---- stdout ----\n" + "".join(self.stdout) + "---- stderr ----\n"
            + self.stderr_path.read_text(errors="replace")[-20000:]
        )  # fmt: skip

    def _abort(self, why: str) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        pytest.fail(f"cairn server {why} (command: {' '.join(self.cmd)})\n{self.output()}", pytrace=False)

    def consul(self, token: str | None = None):
        import consul as py_consul

        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        return py_consul.Consul(host=host, port=int(port), token=token, scheme="http")

    def stop(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"cairn server died with status {self.proc.returncode}\n{self.output()}", pytrace=False)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._abort(f"did not exit within {STOP_TIMEOUT:.0f}s of SIGTERM")
        if self.proc.returncode != 0:
            pytest.fail(f"cairn server exited with status {self.proc.returncode}\n{self.output()}", pytrace=False)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def server(work: Path):
    started = Server(work)
    yield started
    if started.proc.poll() is None:
        started.stop()


def _reset_index(err: Exception) -> int:
    m = _RESET_INDEX.search(str(err))
    assert m, str(err)
    return int(m.group(1))


def test_bootstrap_gives_the_first_management_token_once(server: Server, work: Path):
    import consul as py_consul

    anonymous = server.consul()
    # ACLs are on: before the bootstrap nothing works without a token.
    with pytest.raises(py_consul.ACLPermissionDenied):
        anonymous.kv.put("before-bootstrap", "x")

    token = anonymous.acl.bootstrap()
    assert token["Description"] == "Bootstrap Token (Global Management)"
    assert token["Policies"] == [{"ID": "00000000-0000-0000-0000-000000000001", "Name": "global-management"}]
    assert token["Local"] is False
    assert token["CreateIndex"] == token["ModifyIndex"] > 0
    uuid.UUID(token["AccessorID"])
    secret = token["SecretID"]
    uuid.UUID(secret)

    # The token manages the cluster: ACLs, and everything else.
    manager = server.consul(token=secret)
    policy = manager.acl.policy.create(name="kv-read", rules='key_prefix "" { policy = "read" }')
    assert policy["Name"] == "kv-read"
    accessors = {t["AccessorID"] for t in manager.acl.token.list()}
    assert token["AccessorID"] in accessors
    assert manager.kv.put("after-bootstrap", "x") is True

    # A second bootstrap is refused, naming the index the first happened at.
    with pytest.raises(py_consul.ACLPermissionDenied) as refused:
        anonymous.acl.bootstrap()
    assert _reset_index(refused.value) == token["CreateIndex"]
    with pytest.raises(py_consul.ACLPermissionDenied):
        manager.acl.bootstrap(bootstrap_secret=str(uuid.uuid4()))

    # A restart over the same data dir keeps both the token and the refusal.
    server.stop()
    again = Server(work)
    try:
        assert again.consul(token=secret).acl.token.read_self()["AccessorID"] == token["AccessorID"]
        with pytest.raises(py_consul.ACLPermissionDenied) as refused:
            again.consul().acl.bootstrap()
        assert _reset_index(refused.value) == token["CreateIndex"]
    finally:
        again.stop()


def test_bootstrap_takes_a_chosen_secret(server: Server):
    import consul as py_consul

    anonymous = server.consul()
    with pytest.raises(BadRequest):
        anonymous.acl.bootstrap(bootstrap_secret="not-a-uuid")
    secret = str(uuid.uuid4())
    token = anonymous.acl.bootstrap(bootstrap_secret=secret)
    assert token["SecretID"] == secret
    assert server.consul(token=secret).acl.token.read_self()["AccessorID"] == token["AccessorID"]
