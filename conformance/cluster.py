"""A cairn cluster for the conformance scenarios: three etcd members and three `cairn server`s.

Where it sits: used by conftest.py when CAIRN_CONFORMANCE_TARGET=cluster (scripts/test's
`cluster` stage); also runnable alone (`python conformance/cluster.py`) to get a cluster in a
shell until Ctrl-C. Nothing here is a scenario.

What it starts, all on free 127.0.0.1 ports in one temporary directory:
- three members of Debian's etcd (`$ETCD_BIN`, default /usr/bin/etcd) with the transaction
  limits the scheduler needs (--max-txn-ops 10000, --max-request-bytes 32 MiB);
- three `cairn server` processes (`$CAIRN_BIN`) with storage "etcd" under one prefix and
  object_store "dir" on one shared directory, every service on, the registry's and the
  scheduler's ACLs on;
- one `cairn agent` (the scheduler's client, running tasks with raw_exec) polling a follower,
  with no token (a node authenticates with its own secret, as in `cairn dev`), its provider
  `consul` services going to the follower's registry.

The scenarios expect what `cairn dev --acl` gives them: one root token that manages all four
services, and kv version 2 mounted at `secret/`. The launcher makes that true: it picks a
UUID `T`, makes it the registry's initial management token (config), bootstraps the
scheduler's ACLs with `BootstrapSecret = T`, initializes the secrets store once, unseals every
server and creates a root token whose id is `T`, and mounts kv-v2 at `secret/`. The platform
cannot take a chosen token on `cairn server`: its site administrator's token is the one the
first server prints (`platform bootstrap token`), handed out as `tokens["platform"]`.

Invariants: the server the scenarios talk to is a follower (not the leader when the cluster
was ready); every process started is stopped on `stop()` (SIGTERM, then SIGKILL after 20 s),
and the temporary directory is removed; waits poll with generous deadlines.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

READY_TIMEOUT = 60.0
# The agent's node gets ready after its registration is forwarded to the leader and the
# follower holds it; on a machine loaded by other builds that took over 60 s once.
NODE_TIMEOUT = 180.0
SERVICES = ("secrets", "registry", "scheduler", "platform")
PREFIX = "cairn-conformance/"
_SERVICE_LINE = re.compile(r"^\s*(secrets|registry|scheduler|platform)\s+(https?://\S+)\s*$")
_PLATFORM_TOKEN_LINE = re.compile(r"^\s*platform bootstrap token\s+(\S+)\s*$")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _request(method: str, url: str, body=None, headers: dict | None = None, timeout: float = 10.0):
    """One HTTP request; returns (status, parsed JSON or None). Never raises on HTTP errors."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as err:
        raw = err.read()
        status = err.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def _poll(what: str, check, timeout: float = READY_TIMEOUT, every: float = 0.2):
    """Calls `check` until it returns a truthy value (connection errors count as not yet)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except OSError as err:
            last = err
        time.sleep(every)
    raise RuntimeError(f"cluster: {what} not within {timeout:.0f}s (last error: {last})")


@dataclass
class _Proc:
    name: str
    proc: subprocess.Popen
    log: Path


@dataclass
class ServerInfo:
    urls: dict[str, str]
    proc: subprocess.Popen
    log: Path


@dataclass
class Cluster:
    """A running cluster; `urls` are the follower's, `root_token` manages every service but
    the platform, whose administrator's token is `tokens["platform"]`."""

    work: Path
    servers: list[ServerInfo]
    follower: int
    root_token: str
    tokens: dict[str, str]
    procs: list[_Proc] = field(default_factory=list)

    @property
    def urls(self) -> dict[str, str]:
        return self.servers[self.follower].urls

    @property
    def platform_token(self) -> str:
        return self.tokens["platform"]

    def host_port(self, service: str) -> tuple[str, int]:
        parts = urlsplit(self.urls[service])
        assert parts.hostname and parts.port, self.urls[service]
        return parts.hostname, parts.port

    def output(self) -> str:
        """The tail of every process's log, for failure messages."""
        out = []
        for p in self.procs:
            try:
                text = p.log.read_text(errors="replace")[-6000:]
            except OSError:
                text = ""
            out.append(f"---- {p.name} ({p.log}) ----\n{text}")
        return "\n".join(out)

    def stop(self) -> list[str]:
        """Stops everything (agent and servers first, etcd last); returns the names of the
        processes that died before being asked to stop or did not exit 0 on SIGTERM."""
        bad = []
        for p in reversed(self.procs):
            if p.proc.poll() is not None:
                bad.append(f"{p.name} had exited with status {p.proc.returncode}")
                continue
            p.proc.send_signal(signal.SIGTERM)
            try:
                p.proc.wait(20)
            except subprocess.TimeoutExpired:
                p.proc.kill()
                p.proc.wait(5)
                bad.append(f"{p.name} did not exit within 20 s of SIGTERM")
                continue
            if p.proc.returncode not in (0, -signal.SIGTERM) and not p.name.startswith("etcd"):
                bad.append(f"{p.name} exited with status {p.proc.returncode} after SIGTERM")
        shutil.rmtree(self.work, ignore_errors=True)
        return bad


def _spawn(procs: list[_Proc], name: str, cmd: list[str], work: Path, env: dict, stdout=None) -> _Proc:
    log = work / f"{name}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=stdout if stdout is not None else err,
            stderr=err,
            env=env,
            cwd=work,
            text=stdout is not None,
            bufsize=1 if stdout is not None else -1,
        )
    p = _Proc(name, proc, log)
    procs.append(p)
    return p


def _start_etcd(procs: list[_Proc], work: Path, env: dict) -> list[str]:
    etcd = os.environ.get("ETCD_BIN", "/usr/bin/etcd")
    members = [(f"m{i}", free_port(), free_port()) for i in range(3)]
    initial = ",".join(f"{n}=http://127.0.0.1:{peer}" for n, _, peer in members)
    cluster_token = f"cairn-conformance-{uuid.uuid4().hex[:8]}"
    for name, client, peer in members:
        _spawn(procs, f"etcd-{name}", [
            etcd, "--name", name, "--data-dir", str(work / f"etcd-{name}"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", initial,
            "--initial-cluster-token", cluster_token,
            "--initial-cluster-state", "new",
            # A loaded machine: elections tolerate slow heartbeats.
            "--heartbeat-interval", "200", "--election-timeout", "2000",
            # The scheduler commits a writer batch as one transaction.
            "--max-txn-ops", "10000", "--max-request-bytes", "33554432",
        ], work, env)  # fmt: skip
    endpoints = [f"http://127.0.0.1:{client}" for _, client, _ in members]
    for endpoint in endpoints:
        _poll(
            f"etcd {endpoint} healthy",
            lambda e=endpoint: (_request("GET", e + "/health")[1] or {}).get("health") == "true",
        )
    return endpoints


def _server_config(work: Path, index: int, endpoints: list[str], token: str) -> Path:
    eps = ", ".join(f'"{e}"' for e in endpoints)
    text = f"""data_dir = "{work / f"server{index}"}"
secrets {{ address = "127.0.0.1:{free_port()}" }}
registry {{
  address = "127.0.0.1:{free_port()}"
  acl {{
    enabled = true
    initial_management_token = "{token}"
  }}
}}
scheduler {{ address = "127.0.0.1:{free_port()}" }}
platform {{
  address = "127.0.0.1:{free_port()}"
  encryption_password = "cairn-conformance-password"
}}
storage "etcd" {{
  endpoints = [{eps}]
  prefix    = "{PREFIX}"
}}
object_store "dir" {{
  path = "{work / "blobs"}"
}}
"""
    path = work / f"server{index}.hcl"
    path.write_text(text)
    return path


def _start_server(procs: list[_Proc], work: Path, env: dict, binary: str, index: int, config: Path):
    """Starts one server and reads its banner up to `ready`: (urls, platform token or None)."""
    p = _spawn(procs, f"server{index}", [binary, "server", "--config", str(config)], work, env, stdout=subprocess.PIPE)
    lines: queue.Queue[str | None] = queue.Queue()
    stdout_log = work / f"server{index}.stdout"

    def pump() -> None:
        assert p.proc.stdout is not None
        with open(stdout_log, "a") as out:
            for line in p.proc.stdout:
                out.write(line)
                out.flush()
                lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name=f"cairn-server{index}-stdout", daemon=True).start()
    urls: dict[str, str] = {}
    platform_token = None
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RuntimeError(f"cluster: server{index} did not print `ready` within {READY_TIMEOUT:.0f}s")
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        if line is None:
            p.proc.wait(5)
            raise RuntimeError(f"cluster: server{index} exited with {p.proc.returncode} before `ready`")
        text = line.rstrip("\n")
        if text.strip() == "ready":
            break
        if m := _SERVICE_LINE.match(text):
            urls[m.group(1)] = m.group(2).rstrip("/")
        elif m := _PLATFORM_TOKEN_LINE.match(text):
            platform_token = m.group(1)
    missing = [s for s in SERVICES if s not in urls]
    if missing:
        raise RuntimeError(f"cluster: server{index}'s banner lacks {missing}")
    return ServerInfo(urls=urls, proc=p.proc, log=p.log), platform_token


def start(binary: str, work: Path | None = None) -> Cluster:
    """Starts the cluster and returns it ready for the scenarios (see the module's doc)."""
    binary = str(Path(binary).resolve())
    work = Path(work or tempfile.mkdtemp(prefix="cairn-cluster-"))
    (work / "blobs").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    token = str(uuid.uuid4())
    procs: list[_Proc] = []
    cluster = Cluster(work=work, servers=[], follower=0, root_token=token, tokens={}, procs=procs)
    try:
        _finish_start(cluster, binary, env, token)
    except BaseException:
        print(cluster.output())
        cluster.stop()
        raise
    return cluster


def _finish_start(cluster: Cluster, binary: str, env: dict, token: str) -> None:
    work, procs = cluster.work, cluster.procs
    endpoints = _start_etcd(procs, work, env)
    platform_token = None
    for index in range(3):
        server, printed = _start_server(procs, work, env, binary, index, _server_config(work, index, endpoints, token))
        cluster.servers.append(server)
        platform_token = platform_token or printed
    if platform_token is None:
        raise RuntimeError("cluster: no server printed the platform bootstrap token")

    # Secrets: init once, unseal everywhere, a root token whose id is the shared token.
    first = cluster.servers[0].urls["secrets"]
    status, init = _request("PUT", first + "/v1/sys/init", {"secret_shares": 1, "secret_threshold": 1})
    if status != 200:
        raise RuntimeError(f"cluster: sys/init answered {status}: {init}")
    key = init["keys_base64"][0]
    for server in cluster.servers:
        url = server.urls["secrets"] + "/v1/sys/unseal"
        _poll(
            f"unseal {url}",
            lambda u=url: (lambda r: r[0] == 200 and r[1].get("sealed") is False)(_request("PUT", u, {"key": key})),
        )
    auth = {"X-Vault-Token": init["root_token"]}
    status, body = _request(
        "POST", first + "/v1/auth/token/create", {"id": token, "policies": ["root"], "display_name": "root"}, auth
    )
    if status != 200:
        raise RuntimeError(f"cluster: creating the root token answered {status}: {body}")
    status, body = _request(
        "POST", first + "/v1/sys/mounts/secret", {"type": "kv", "options": {"version": "2"}}, {"X-Vault-Token": token}
    )
    if status not in (200, 204):
        raise RuntimeError(f"cluster: mounting secret/ answered {status}: {body}")

    # The follower: a server that does not lead (by the registry's status/leader).
    def leader_address():
        status, body = _request("GET", cluster.servers[0].urls["registry"] + "/v1/status/leader")
        return body if status == 200 and body else None

    leader = _poll("a known cluster leader", leader_address)
    followers = [i for i, s in enumerate(cluster.servers) if urlsplit(s.urls["registry"]).netloc != leader]
    if len(followers) != 2:
        raise RuntimeError(f"cluster: leader {leader} is not exactly one of the servers")
    cluster.follower = followers[0]
    urls = cluster.urls

    # Scheduler: ACL bootstrap with the shared token as its secret (through the follower).
    status, body = _request("POST", urls["scheduler"] + "/v1/acl/bootstrap", {"BootstrapSecret": token})
    if status != 200:
        raise RuntimeError(f"cluster: scheduler ACL bootstrap answered {status}: {body}")
    cluster.tokens = {s: token for s in SERVICES}
    cluster.tokens["platform"] = platform_token

    # The scheduler's client: one agent polling the follower, services into its registry.
    agent_dir = work / "agent"
    agent_dir.mkdir()
    _spawn(procs, "agent", [
        binary, "agent", "--servers", urls["scheduler"], "--data-dir", str(agent_dir),
        "--node-name", "cluster-agent",
        "--consul-addr", urls["registry"], "--consul-token", token,
    ], work, env)  # fmt: skip

    def node_ready():
        status, nodes = _request("GET", urls["scheduler"] + "/v1/nodes", headers={"X-Nomad-Token": token})
        return status == 200 and any(n.get("Status") == "ready" for n in nodes or [])

    _poll("the agent's node ready", node_ready, timeout=NODE_TIMEOUT)


if __name__ == "__main__":
    repo = Path(__file__).resolve().parent.parent
    running = start(os.environ.get("CAIRN_BIN", str(repo / "target" / "debug" / "cairn")))
    print(json.dumps({"urls": running.urls, "tokens": running.tokens, "work": str(running.work)}, indent=2), flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    for problem in running.stop():
        print(problem)
