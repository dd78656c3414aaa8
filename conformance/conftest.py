"""Start `cairn dev` for the pytest session and hand out upstream clients.

Two servers at most: `cairn` runs `cairn dev --acl` (every service enforces
tokens; most scenarios use it with the root token), `cairn_open` runs plain
`cairn dev` (the registry and the scheduler open, as upstream's dev agents).
The binary comes from $CAIRN_BIN (default <repo>/target/debug/cairn). Every
listener binds 127.0.0.1:0; the real addresses and the root token are read from
the banner cairn prints on stdout, up to its line `ready` (the environment
lines after it are kept in `banner`). On teardown cairn gets SIGTERM and must
exit 0: an unclean shutdown fails the run.

CAIRN_CONFORMANCE_TARGET=cluster (default `dev`) runs the scenarios against a cluster instead:
three etcd members and three `cairn server`s started by cluster.py, every client pointed at a
server that does not lead (a follower), with one scheduler client agent polling it. Only the
files in CLUSTER_SUITES run then; every other file is named in CLUSTER_LEFT_OUT with the
reason, and single scenarios in CLUSTER_LEFT_OUT_SCENARIOS: nothing is left out silently (a
test file in neither list fails the collection). `cairn` is then the cluster (its `urls` the
follower's, `root_token` the token cluster.py made manage the secrets store, the registry and
the scheduler, `platform_token` the platform administrator's); `cairn_open` is not available.
"""

from __future__ import annotations

import os
import queue
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0
SERVICES = ("secrets", "registry", "scheduler", "platform")

# The clients read these from the environment, and some let the environment win
# over explicit arguments: py-consul takes CONSUL_HTTP_TOKEN over token=, and
# python-nomad takes NOMAD_ADDR over host/port. Nothing from a developer's shell
# may redirect the tests to a real server.
for _name in list(os.environ):
    if _name.startswith(("VAULT_", "CONSUL_", "NOMAD_", "TFE_")):
        del os.environ[_name]
# Loopback never goes through a proxy (requests and httpx both honour *_proxy).
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

TARGET = os.environ.get("CAIRN_CONFORMANCE_TARGET", "dev")
if TARGET not in ("dev", "cluster"):
    raise SystemExit(f"CAIRN_CONFORMANCE_TARGET must be dev or cluster, not {TARGET!r}")

# Cluster mode: the files that run through a follower (the registry, secrets kv, the
# scheduler with a client agent, the platform), and why every other file does not.
CLUSTER_SUITES = (
    "test_registry.py",
    "test_secrets.py",
    "test_secrets_kv2.py",
    "test_secrets_database.py",
    "test_secrets_wrapping.py",
    "test_secrets_pki.py",
    "test_secrets_ssh.py",
    "test_secrets_mfa.py",
    "test_secrets_ad.py",
    "test_secrets_snapshots.py",
    "test_scheduler.py",
    "test_scheduler_alloc_ops.py",
    "test_scheduler_client_extras.py",
    "test_scheduler_runtime.py",
    "test_platform.py",
    "test_platform_admin.py",
    "test_platform_registry.py",
)
CLUSTER_LEFT_OUT = {
    "test_dev_defaults.py": "about `cairn dev` itself (its banner, --env lines, open ACLs)",
    "test_smoke.py": "about `cairn dev` itself (startup, banner, data dir)",
    "test_metrics.py": "per-process metrics of one `cairn dev`, not cluster behaviour",
    "test_registry_bootstrap.py": "needs a registry with ACLs not yet bootstrapped (`cairn_open`)",
}
# Single scenarios of CLUSTER_SUITES that cannot pass through a follower (node id: why).
CLUSTER_LEFT_OUT_SCENARIOS: dict[str, str] = {
    "test_secrets.py::test_health_and_seal_status": "sys/health on a standby answers 429, "
    "as Vault's standbys do (hvac then returns the response, the scenario expects the active 200)",
}

_SERVICE_LINE = re.compile(r"^\s*(secrets|registry|scheduler|platform)\s+(https?://\S+)\s*$")
_DATA_DIR_LINE = re.compile(r"^\s*data dir\s+(.+?)(\s+\(removed on exit\))?\s*$")
_TOKEN_LINE = re.compile(r"^\s*root token\s+(\S+)\s*$")


@dataclass
class Cairn:
    """A running `cairn dev` and what its banner said."""

    proc: subprocess.Popen
    urls: dict[str, str]
    root_token: str
    data_dir: str
    banner: list[str]
    requested_token: str
    requested_data_dir: str
    stderr_path: Path
    _stdout: list[str] = field(default_factory=list)

    def host_port(self, service: str) -> tuple[str, int]:
        parts = urlsplit(self.urls[service])
        assert parts.hostname and parts.port, self.urls[service]
        return parts.hostname, parts.port

    @property
    def platform_token(self) -> str:
        """The platform's site administrator token: the root token in `cairn dev`."""
        return self.root_token

    def output(self) -> str:
        """Everything cairn printed so far, stdout then stderr, for failure messages."""
        try:
            err = self.stderr_path.read_text(errors="replace")
        except OSError:
            err = ""
        return "---- stdout ----\n" + "".join(self._stdout) + "---- stderr ----\n" + err[-20000:]


def _cairn_bin() -> Path:
    path = Path(os.environ.get("CAIRN_BIN", REPO / "target" / "debug" / "cairn"))
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.exit(
            f"cairn binary not found or not executable: {path} "
            "(build it with `cargo build -p cairn` or set CAIRN_BIN)",
            returncode=2,
        )
    return path


def pytest_collection_modifyitems(config, items):
    """Cluster mode: keep CLUSTER_SUITES' scenarios, deselect the rest by the lists."""
    if TARGET != "cluster":
        return
    files = {Path(str(item.fspath)).name for item in items}
    unlisted = sorted(f for f in files if f not in CLUSTER_SUITES and f not in CLUSTER_LEFT_OUT)
    if unlisted:
        raise pytest.UsageError(
            f"conftest.py: {', '.join(unlisted)} in neither CLUSTER_SUITES nor CLUSTER_LEFT_OUT"
        )
    keep, drop = [], []
    for item in items:
        name = Path(str(item.fspath)).name
        if name in CLUSTER_SUITES and item.nodeid not in CLUSTER_LEFT_OUT_SCENARIOS:
            keep.append(item)
        else:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config):
    if TARGET == "cluster":
        return [
            "target: cluster (3 etcd members, 3 cairn servers, clients on a follower)",
            "cluster suites: " + ", ".join(CLUSTER_SUITES),
            "left out: " + "; ".join(f"{f}: {why}" for f, why in CLUSTER_LEFT_OUT.items()),
        ] + [f"left out scenario {n}: {why}" for n, why in CLUSTER_LEFT_OUT_SCENARIOS.items()]
    return None


@pytest.fixture(scope="session")
def cairn(tmp_path_factory: pytest.TempPathFactory):
    """`cairn dev --acl`: tokens required everywhere, the root token manages all (in cluster
    mode: the cluster, through a follower)."""
    if TARGET == "cluster":
        yield from _run_cluster(tmp_path_factory)
        return
    yield from _run_cairn(tmp_path_factory, ["--acl"])


@pytest.fixture(scope="session")
def cairn_open(tmp_path_factory: pytest.TempPathFactory):
    """Plain `cairn dev`: the registry and the scheduler need no token."""
    if TARGET == "cluster":
        pytest.fail("cairn_open is not available in cluster mode (see CLUSTER_LEFT_OUT)", pytrace=False)
    yield from _run_cairn(tmp_path_factory, [])


def _run_cluster(tmp_path_factory: pytest.TempPathFactory):
    import cluster as launcher

    try:
        running = launcher.start(str(_cairn_bin()), tmp_path_factory.mktemp("cluster"))
    except RuntimeError as err:
        pytest.fail(str(err), pytrace=False)
    yield running
    problems = running.stop()
    if problems:
        pytest.fail("cluster teardown: " + "; ".join(problems), pytrace=False)


def _run_cairn(tmp_path_factory: pytest.TempPathFactory, extra_args: list[str]):
    binary = _cairn_bin()
    work = tmp_path_factory.mktemp("cairn")
    data_dir = str(work / "data")
    token = "root-" + secrets.token_hex(16)
    stderr_path = work / "cairn.stderr"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    # The per-user environment file `cairn dev --env` reads stays in the work dir.
    env["CAIRN_DEV_ENV_FILE"] = str(work / "dev.env")
    cmd = [
        str(binary), "dev",
        "--data-dir", data_dir,
        "--root-token", token,
        "--secrets-addr", "127.0.0.1:0",
        "--registry-addr", "127.0.0.1:0",
        "--scheduler-addr", "127.0.0.1:0",
        "--platform-addr", "127.0.0.1:0",
        *extra_args,
    ]  # fmt: skip
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            cwd=work,
            text=True,
            bufsize=1,
        )

    # Read stdout on a thread (so a silent cairn can't hang us) and keep
    # draining it afterwards (so a chatty one can't block on a full pipe).
    lines: queue.Queue[str | None] = queue.Queue()
    captured: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            captured.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="cairn-stdout", daemon=True).start()

    def output() -> str:
        return (
            "---- stdout ----\n" + "".join(captured) + "---- stderr ----\n"
            + stderr_path.read_text(errors="replace")[-20000:]
        )  # fmt: skip

    def abort(why: str) -> None:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        pytest.fail(f"cairn dev {why} (command: {' '.join(cmd)})\n{output()}", pytrace=False)

    urls: dict[str, str] = {}
    seen_data_dir = seen_token = None
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            abort(f"did not print `ready` within {READY_TIMEOUT:.0f}s")
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        if line is None:
            proc.wait(5)
            abort(f"exited with status {proc.returncode} before printing `ready`")
        text = line.rstrip("\n")
        if text.strip() == "ready":
            break
        if m := _SERVICE_LINE.match(text):
            urls[m.group(1)] = m.group(2)
        elif m := _DATA_DIR_LINE.match(text):
            seen_data_dir = m.group(1)
        elif m := _TOKEN_LINE.match(text):
            seen_token = m.group(1)

    missing = [s for s in SERVICES if s not in urls]
    if missing or seen_token is None or seen_data_dir is None:
        abort(
            "printed `ready` but the banner lacks "
            + ", ".join(missing + [n for n, v in (("root token", seen_token), ("data dir", seen_data_dir)) if v is None])
        )

    handle = Cairn(
        proc=proc,
        urls=urls,
        root_token=seen_token,
        data_dir=seen_data_dir,
        banner=list(captured),
        requested_token=token,
        requested_data_dir=data_dir,
        stderr_path=stderr_path,
        _stdout=captured,
    )
    yield handle

    # Teardown: a graceful shutdown is part of the contract.
    if proc.poll() is not None:
        pytest.fail(f"cairn dev died during the tests with status {proc.returncode}\n{output()}", pytrace=False)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        pytest.fail(f"cairn dev did not exit within {STOP_TIMEOUT:.0f}s of SIGTERM\n{output()}", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"cairn dev exited with status {proc.returncode} after SIGTERM\n{output()}", pytrace=False)
    shutil.rmtree(work / "data", ignore_errors=True)


@pytest.fixture
def root_token(cairn: Cairn) -> str:
    return cairn.root_token


@pytest.fixture
def vault(cairn: Cairn):
    import hvac

    client = hvac.Client(url=cairn.urls["secrets"], token=cairn.root_token, timeout=10)
    yield client
    client.adapter.close()


@pytest.fixture
def consul(cairn: Cairn):
    import consul as py_consul

    host, port = cairn.host_port("registry")
    return py_consul.Consul(host=host, port=port, token=cairn.root_token, scheme="http")


@pytest.fixture
def nomad(cairn: Cairn):
    import nomad as python_nomad

    host, port = cairn.host_port("scheduler")
    return python_nomad.Nomad(host=host, port=port, token=cairn.root_token, secure=False, timeout=10)


@pytest.fixture
def tfe(cairn: Cairn):
    # pytfe's address is the bare origin: HTTPTransport joins it with paths that
    # already start with /api/v2/ (urljoin(address, path.lstrip("/"))), plain
    # http:// works, and TFEClient() makes no request when it is built (there is
    # no ping call). The platform rate-limits like TFE (30 requests/s per user) and
    # the whole suite shares the root token, so pytfe must do what it does against
    # TFE: retry a 429 after Retry-After. max_retries=3 keeps a real 5xx failing
    # after a few seconds of backoff rather than ~15 s.
    from pytfe import TFEClient, TFEConfig

    client = TFEClient(
        TFEConfig(address=cairn.urls["platform"], token=cairn.platform_token, timeout=10, max_retries=3, ca_bundle=None)
    )
    yield client
    client.close()


@pytest.fixture
def consul_client(cairn: Cairn):
    """A factory of extra py-consul clients for the registry: `consul_client(token)`.

    With no argument the client carries the root token, like the `consul` fixture. Tests use
    it for a second token (ACL scenarios) and for a client owned by another thread (blocking
    reads), so no `requests` session is shared across threads. Every client made is closed
    at teardown.
    """
    import consul as py_consul

    host, port = cairn.host_port("registry")
    made = []

    def make(token: str | None = None):
        client = py_consul.Consul(
            host=host, port=port, token=cairn.root_token if token is None else token, scheme="http"
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.http.session.close()


@dataclass
class RegistryHTTP:
    """Raw HTTP to the registry, for what py-consul cannot express or hides (status codes,
    headers, HCL rule bodies). Carries the root token unless told otherwise."""

    base: str
    token: str
    session: object

    def request(self, method: str, path: str, token: str | None = None, **kwargs):
        headers = dict(kwargs.pop("headers", None) or {})
        headers.setdefault("X-Consul-Token", self.token if token is None else token)
        kwargs.setdefault("timeout", 30)
        return self.session.request(method, self.base + path, headers=headers, **kwargs)


@pytest.fixture
def registry_http(cairn: Cairn):
    import requests

    with requests.Session() as session:
        yield RegistryHTTP(base=cairn.urls["registry"].rstrip("/"), token=cairn.root_token, session=session)
