"""Registry conformance: py-consul 1.8.0 against `cairn dev`'s Consul-compatible registry.

Each scenario drives the registry the way a Consul user does, through py-consul's own calls
(the `consul` fixture carries the root token, which `cairn dev` makes the initial management
token). Raw HTTP (`registry_http`) is used only where py-consul cannot say what is needed or
hides what must be checked; each such place says why.

Scenarios: session lifecycle and fields, unknown ids, KV locks (acquire/release), both
invalidation behaviours, lock-delay, TTL expiry (with renew), invalidation by a critical or
deregistered check and by a deregistered node, blocking reads (KV woken by a write, session
info woken by a destroy), ACL denials (JSON rules through py-consul, HCL rules through raw
HTTP) and the index headers on a KV 404.

Timing: `session_ttl_min` is Consul's 10 s and `cairn dev` has no flag to lower it, so the TTL
scenario waits ~11 s of real time (cairn promises invalidation no earlier than the TTL and
within 1 s after it, docs/design.md §D4). Every other wait here is ~1 s or less.

All scenarios share one `cairn dev`; each works under its own random key prefix and destroys
the sessions it created.
"""

from __future__ import annotations

import threading
import time
import uuid

import consul as py_consul  # the module; `consul` is the fixture (a client)
import pytest
from consul import Check
from consul.exceptions import BadRequest

SERF_HEALTH = "serfHealth"
# py-consul's upstream tests use this as "an id that does not exist".
ONES = "1" * 36


def _deadline_sleep(until: float) -> None:
    delay = until - time.monotonic()
    if delay > 0:
        time.sleep(delay)


@pytest.fixture
def prefix() -> str:
    return f"conformance/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def node_name(registry_http) -> str:
    # Raw HTTP: py-consul 1.8.0's agent.self() sends no token at all, so with ACLs on (default
    # deny) it gets 403 for agent:read from the anonymous token, from Consul as from cairn.
    r = registry_http.request("GET", "/v1/agent/self")
    assert r.status_code == 200, (r.status_code, r.text)
    name = r.json()["Config"]["NodeName"]
    assert isinstance(name, str) and name, name
    return name


@pytest.fixture
def sessions(consul):
    """`sessions.create(**kw)` makes a session through py-consul and remembers it; whatever
    is still alive at teardown is destroyed (destroy is idempotent)."""

    class Sessions:
        def __init__(self) -> None:
            self.ids: list[str] = []

        def create(self, **kwargs) -> str:
            sid = consul.session.create(**kwargs)
            assert isinstance(sid, str), f"session.create({kwargs}) returned {sid!r}"
            uuid.UUID(sid)  # raises if not a UUID
            self.ids.append(sid)
            return sid

    tracker = Sessions()
    yield tracker
    for sid in tracker.ids:
        try:
            consul.session.destroy(sid)
        except py_consul.ConsulException:
            pass


def _holder(entry: dict | None) -> str | None:
    """The session holding a KV entry, or None (Consul omits `Session` when unlocked)."""
    assert entry is not None
    return entry.get("Session") or None


# ------------------------------------------------------------------------------ sessions


def test_session_create_defaults_info_list_node_renew_destroy(consul, sessions, node_name):
    sid = sessions.create()

    index, info = consul.session.info(sid)
    assert int(index) >= 1, index
    assert info is not None, f"session.info({sid}) returned None right after create"
    for field in ("ID", "Name", "Node", "LockDelay", "Behavior", "TTL", "NodeChecks", "CreateIndex", "ModifyIndex"):
        assert field in info, f"session record lacks {field}: {info}"
    assert info["ID"] == sid, info
    assert info["Node"] == node_name, info
    assert info["Behavior"] == "release", info
    assert info["LockDelay"] == 15_000_000_000, info  # 15 s, in nanoseconds
    assert info["TTL"] == "", info
    assert info["NodeChecks"] == [SERF_HEALTH], info
    assert 1 <= info["CreateIndex"] <= info["ModifyIndex"], info

    index, listed = consul.session.list()
    assert int(index) >= 1, index
    assert sid in [s["ID"] for s in listed], listed
    index, on_node = consul.session.node(node_name)
    assert int(index) >= 1, index
    assert sid in [s["ID"] for s in on_node], on_node

    renewed = consul.session.renew(sid)
    assert renewed is not None and renewed["ID"] == sid, renewed
    assert renewed["Node"] == node_name and renewed["Behavior"] == "release", renewed

    assert consul.session.destroy(sid) is True
    assert consul.session.info(sid)[1] is None
    assert sid not in [s["ID"] for s in consul.session.list()[1]]
    assert sid not in [s["ID"] for s in consul.session.node(node_name)[1]]


def test_session_create_with_options(consul, sessions, node_name):
    # py-consul sends lowercase keys: {"name", "node", "lockdelay": "5s", "behavior", "ttl": "20s"}.
    sid = sessions.create(name="conf-options", node=node_name, lock_delay=5, behavior="delete", ttl=20)
    _, info = consul.session.info(sid)
    assert info is not None
    assert info["Name"] == "conf-options", info
    assert info["Node"] == node_name, info
    assert info["LockDelay"] == 5_000_000_000, info
    assert info["Behavior"] == "delete", info
    assert info["TTL"] == "20s", info
    # Upstream test_session.py: renew returns the session with its Behavior and TTL.
    renewed = consul.session.renew(sid)
    assert renewed["ID"] == sid and renewed["Behavior"] == "delete" and renewed["TTL"] == "20s", renewed


def test_session_unknown_ids(consul):
    index, info = consul.session.info(ONES)
    assert info is None and int(index) >= 1, (index, info)
    index, info = consul.session.info(str(uuid.uuid4()))
    assert info is None and int(index) >= 1, (index, info)
    with pytest.raises(py_consul.NotFound):
        consul.session.renew(ONES)
    with pytest.raises(py_consul.NotFound):
        consul.session.renew(str(uuid.uuid4()))
    # A well-formed unknown id destroys fine (idempotent, as in Consul: docs/design.md §U7) ...
    assert consul.session.destroy(str(uuid.uuid4())) is True
    # ... and a malformed one is a 400 (docs/design.md §D3).
    with pytest.raises(BadRequest):
        consul.session.destroy("not-a-uuid")


def test_session_create_on_unknown_node_fails(consul):
    # Upstream test: create(node="n2") must raise, not return None (a 404 would).
    with pytest.raises(py_consul.ConsulException):
        consul.session.create(node=f"no-such-node-{uuid.uuid4().hex[:8]}")


# ------------------------------------------------------------------------------ locks


def test_kv_lock_acquire_and_release(consul, sessions, prefix):
    s1 = sessions.create()
    s2 = sessions.create()
    key = f"{prefix}/lock"

    assert consul.kv.put(key, "one", acquire=s1) is True
    _, entry = consul.kv.get(key)
    assert _holder(entry) == s1 and entry["LockIndex"] == 1 and entry["Value"] == b"one", entry

    # Held by another session: false, and nothing changes.
    assert consul.kv.put(key, "two", acquire=s2) is False
    _, entry = consul.kv.get(key)
    assert _holder(entry) == s1 and entry["Value"] == b"one", entry

    # The holder re-acquires: true, the value is updated, LockIndex stays.
    assert consul.kv.put(key, "three", acquire=s1) is True
    _, entry = consul.kv.get(key)
    assert _holder(entry) == s1 and entry["LockIndex"] == 1 and entry["Value"] == b"three", entry

    # Release by a non-holder (another session, or a made-up id) is false and changes nothing.
    assert consul.kv.put(key, "x", release=s2) is False
    assert consul.kv.put(key, "x", release="foo") is False
    _, entry = consul.kv.get(key)
    assert _holder(entry) == s1 and entry["Value"] == b"three", entry

    # Release by the holder: true, the lock is free, LockIndex is kept, the value is written.
    assert consul.kv.put(key, "released", release=s1) is True
    _, entry = consul.kv.get(key)
    assert _holder(entry) is None and entry["LockIndex"] == 1 and entry["Value"] == b"released", entry

    # acquire= with a session that does not exist is an error (upstream: 500; cairn: 400).
    with pytest.raises(py_consul.ConsulException):
        consul.kv.put(key, "x", acquire="foo")

    # Release never sets a lock-delay: another session gets the free lock at once.
    assert consul.kv.put(key, "two", acquire=s2) is True
    _, entry = consul.kv.get(key)
    assert _holder(entry) == s2 and entry["LockIndex"] == 2 and entry["Value"] == b"two", entry


def test_destroy_with_behavior_release_keeps_the_key(consul, sessions, prefix):
    sid = sessions.create()
    key = f"{prefix}/release"
    assert consul.kv.put(key, "kept", acquire=sid) is True
    assert consul.session.destroy(sid) is True
    _, entry = consul.kv.get(key)
    assert entry is not None, "behavior=release must keep the key"
    assert _holder(entry) is None and entry["Value"] == b"kept" and entry["LockIndex"] == 1, entry


def test_destroy_with_behavior_delete_removes_the_key(consul, sessions, prefix):
    sid = sessions.create(behavior="delete")
    key = f"{prefix}/delete"
    assert consul.kv.put(key, "gone", acquire=sid) is True
    assert consul.kv.get(key)[1] is not None
    assert consul.session.destroy(sid) is True
    index, entry = consul.kv.get(key)
    assert entry is None, f"behavior=delete must remove the key, found {entry}"
    assert int(index) >= 1, index


def test_lock_delay_after_invalidation(consul, sessions, prefix):
    s1 = sessions.create(lock_delay=1)  # py-consul sends {"lockdelay": "1s"}
    s2 = sessions.create()
    key = f"{prefix}/delayed"
    assert consul.kv.put(key, "v", acquire=s1) is True

    t_destroy = time.monotonic()
    assert consul.session.destroy(s1) is True
    t_destroyed = time.monotonic()

    assert consul.kv.put(key, "v", acquire=s2) is False, "acquire right after invalidation must hit the lock-delay"
    refused_at = time.monotonic() - t_destroy
    assert refused_at < 0.9, f"too slow to test the 1 s lock-delay: first acquire answered after {refused_at:.2f} s"

    # Poll until the delay is over; it must not end before 1 s after the destroy was sent,
    # and must end soon after 1 s after it returned.
    acquired_at = None
    while time.monotonic() < t_destroyed + 3.0:
        t_ask = time.monotonic()
        if consul.kv.put(key, "v", acquire=s2) is True:
            acquired_at = time.monotonic()
            break
        assert t_ask < t_destroyed + 1.5, f"still refused {t_ask - t_destroyed:.2f} s after a 1 s lock-delay"
        time.sleep(0.05)
    assert acquired_at is not None, "acquire never succeeded after the 1 s lock-delay"
    assert acquired_at - t_destroy >= 1.0, f"lock-delay ended after only {acquired_at - t_destroy:.2f} s"
    _, entry = consul.kv.get(key)
    assert _holder(entry) == s2, entry


# ------------------------------------------------------------------------------ TTL


def test_session_ttl_expiry_and_renew(consul, sessions, prefix):
    # Two TTL sessions run side by side so one ~11 s wait covers both: `expiring` is never
    # renewed and must be gone by TTL + 1 s; `renewed` is renewed at ~6 s and must outlive it.
    key = f"{prefix}/ttl"
    t0 = time.monotonic()
    expiring = sessions.create(ttl=10)
    renewed = sessions.create(ttl=10)
    t1 = time.monotonic()
    assert consul.kv.put(key, "held", acquire=expiring) is True

    _deadline_sleep(t0 + 6.0)
    r = consul.session.renew(renewed)
    assert r is not None and r["ID"] == renewed, r
    assert r["TTL"].endswith("s") and float(r["TTL"][:-1]) >= 10, r  # may be higher under load

    _deadline_sleep(t0 + 9.5)
    _, info = consul.session.info(expiring)
    assert info is not None, f"TTL 10 s session gone after only {time.monotonic() - t0:.2f} s"

    gone_at = None
    while time.monotonic() < t1 + 11.5:
        t_ask = time.monotonic()
        _, info = consul.session.info(expiring)
        if info is None:
            gone_at = time.monotonic()
            assert gone_at - t0 >= 10.0, f"TTL 10 s session expired early, at {gone_at - t0:.2f} s"
            break
        time.sleep(0.1)
    assert gone_at is not None, f"TTL 10 s session still alive {time.monotonic() - t0:.2f} s after create"
    assert t_ask <= t1 + 11.2, f"TTL 10 s session expired late: seen alive at {t_ask - t1:.2f} s"

    # Expiry applied behavior=release to the held key.
    _, entry = consul.kv.get(key)
    assert entry is not None and _holder(entry) is None and entry["Value"] == b"held", entry
    # The renewed one (renewed at ~6 s, so due at ~16 s) is still alive.
    _, info = consul.session.info(renewed)
    assert info is not None, f"session renewed at 6 s gone at {time.monotonic() - t0:.2f} s"


# ------------------------------------------------------------------------------ checks


def _register_passing_ttl_check(consul, node_name: str) -> str:
    check_id = f"conf-ttl-{uuid.uuid4().hex[:8]}"
    assert consul.agent.check.register(check_id, check=Check.ttl("60s"), check_id=check_id) is True
    assert consul.agent.check.ttl_pass(check_id, notes="conformance") is True
    _, checks = consul.health.node(node_name)
    by_id = {c["CheckID"]: c for c in checks}
    assert check_id in by_id and by_id[check_id]["Status"] == "passing", checks
    assert by_id.get(SERF_HEALTH, {}).get("Status") == "passing", checks
    return check_id


def _wait_session_gone(consul, sid: str, what: str) -> None:
    """Consul invalidates in the same write as the check update; allow up to 2 s, but say
    when it was not immediate."""
    t0 = time.monotonic()
    if consul.session.info(sid)[1] is None:
        return
    while time.monotonic() < t0 + 2.0:
        time.sleep(0.05)
        if consul.session.info(sid)[1] is None:
            pytest.fail(f"session survived {what} for {time.monotonic() - t0:.2f} s (expected: gone at once)")
    pytest.fail(f"session still alive 2 s after {what}")


def test_failing_check_invalidates_session_and_releases_lock(consul, sessions, prefix, node_name):
    check_id = _register_passing_ttl_check(consul, node_name)
    try:
        sid = sessions.create(checks=[SERF_HEALTH, check_id])
        _, info = consul.session.info(sid)
        bound = (info.get("Checks") or []) + (info.get("NodeChecks") or [])
        assert check_id in bound and SERF_HEALTH in bound, info
        key = f"{prefix}/checked"
        assert consul.kv.put(key, "v", acquire=sid) is True

        assert consul.agent.check.ttl_fail(check_id, notes="conformance") is True
        _wait_session_gone(consul, sid, "its check going critical")
        _, entry = consul.kv.get(key)
        assert entry is not None and _holder(entry) is None and entry["Value"] == b"v", entry

        # A session cannot be bound to a critical check.
        with pytest.raises(py_consul.ConsulException):
            consul.session.create(checks=[SERF_HEALTH, check_id])
    finally:
        consul.agent.check.deregister(check_id)


def test_deregistered_check_invalidates_session(consul, sessions, node_name):
    check_id = _register_passing_ttl_check(consul, node_name)
    sid = sessions.create(checks=[SERF_HEALTH, check_id])
    assert consul.agent.check.deregister(check_id) is True
    _wait_session_gone(consul, sid, "its check being deregistered")


def test_node_deregistration_invalidates_session(consul, sessions, prefix):
    node = f"conf-node-{uuid.uuid4().hex[:8]}"
    assert consul.catalog.register(node, "127.0.0.2") is True
    try:
        # checks=[] (sent as "checks": []) binds the session to no health check at all.
        sid = sessions.create(node=node, checks=[])
        _, info = consul.session.info(sid)
        assert info["Node"] == node and not info.get("NodeChecks") and not info.get("Checks"), info
        _, on_node = consul.session.node(node)
        assert [s["ID"] for s in on_node] == [sid], on_node
        key = f"{prefix}/node-held"
        assert consul.kv.put(key, "v", acquire=sid) is True
    finally:
        assert consul.catalog.deregister(node) is True
    _wait_session_gone(consul, sid, "its node being deregistered")
    _, entry = consul.kv.get(key)
    assert entry is not None and _holder(entry) is None, entry


# ------------------------------------------------------------------------------ blocking


def test_blocking_kv_read_woken_by_write(consul, consul_client, prefix):
    key = f"{prefix}/watched"
    assert consul.kv.put(key, "v1") is True
    index, entry = consul.kv.get(key)
    assert entry["Value"] == b"v1", entry

    # Upstream test_kv.py: nothing changes, a short wait returns the same index.
    same, entry = consul.kv.get(key, index=index, wait="20ms")
    assert same == index and entry["Value"] == b"v1", (index, same, entry)

    # The blocked read runs on its own client in a thread; the main thread writes.
    watcher = consul_client()
    result: dict = {}

    def blocked_read() -> None:
        try:
            result["value"] = watcher.kv.get(key, index=index, wait="10s")
        except Exception as exc:  # reported by the main thread
            result["error"] = exc
        result["at"] = time.monotonic()

    thread = threading.Thread(target=blocked_read, name="blocking-kv-get", daemon=True)
    t_start = time.monotonic()
    thread.start()
    time.sleep(0.5)
    assert thread.is_alive(), f"blocking read returned after {result.get('at', 0) - t_start:.2f} s with no write: {result}"

    t_put = time.monotonic()
    assert consul.kv.put(key, "v2") is True
    thread.join(5.0)
    assert not thread.is_alive(), "blocking read not woken 5 s after the write"
    assert "error" not in result, result
    woke_after = result["at"] - t_put
    assert woke_after < 1.0, f"blocking read woke {woke_after:.2f} s after the write"
    new_index, entry = result["value"]
    assert int(new_index) > int(index), (index, new_index)
    assert entry["Value"] == b"v2", entry


def test_blocking_session_info_woken_by_destroy(consul, consul_client, sessions):
    sid = sessions.create()
    index, info = consul.session.info(sid)
    assert info is not None
    watcher = consul_client()
    result: dict = {}

    def blocked_info() -> None:
        try:
            result["value"] = watcher.session.info(sid, index=index, wait="10s")
        except Exception as exc:  # reported by the main thread
            result["error"] = exc
        result["at"] = time.monotonic()

    thread = threading.Thread(target=blocked_info, name="blocking-session-info", daemon=True)
    thread.start()
    time.sleep(0.5)
    assert thread.is_alive(), f"blocking session.info returned with no change: {result}"
    t_destroy = time.monotonic()
    assert consul.session.destroy(sid) is True
    thread.join(5.0)
    assert not thread.is_alive(), "blocking session.info not woken 5 s after the destroy"
    assert "error" not in result, result
    assert result["at"] - t_destroy < 1.0, f"woke {result['at'] - t_destroy:.2f} s after the destroy"
    new_index, info = result["value"]
    assert info is None and int(new_index) > int(index), (index, new_index, info)


# ------------------------------------------------------------------------------ ACL


def test_acl_denial_with_json_rules_via_py_consul(consul, consul_client, prefix):
    # py-consul's acl.policy.create sends `rules` as json.dumps(rules): Consul's JSON rule form.
    policy = consul.acl.policy.create(
        name=f"conf-json-{uuid.uuid4().hex[:8]}",
        rules={"key_prefix": {f"{prefix}/allowed/": {"policy": "write"}}},
    )
    assert policy and policy.get("ID"), policy
    token = consul.acl.token.create(policies_id=[policy["ID"]], description="conformance json rules")
    assert token and token.get("SecretID") and token.get("AccessorID"), token
    try:
        limited = consul_client(token["SecretID"])
        assert limited.kv.put(f"{prefix}/allowed/x", "ok") is True
        assert limited.kv.get(f"{prefix}/allowed/x")[1]["Value"] == b"ok"
        with pytest.raises(py_consul.ACLPermissionDenied):
            limited.kv.put(f"{prefix}/denied/x", "no")
        with pytest.raises(py_consul.ACLPermissionDenied):
            limited.kv.get(f"{prefix}/denied/y")
        with pytest.raises(py_consul.ACLPermissionDenied):
            limited.session.create()  # no session rule: session:write denied
        assert consul.kv.get(f"{prefix}/denied/x")[1] is None, "a denied write must change nothing"
    finally:
        consul.acl.token.delete(token["AccessorID"])
        consul.acl.policy.delete(policy["ID"])


def test_acl_denial_with_hcl_rules_via_raw_http(consul, consul_client, registry_http, prefix):
    # Raw HTTP because py-consul json.dumps()es `rules`, so it cannot send HCL rules, the
    # form most Consul users write.
    rules = f'key_prefix "{prefix}/allowed/" {{ policy = "write" }}\nsession_prefix "" {{ policy = "write" }}\n'
    r = registry_http.request("PUT", "/v1/acl/policy", json={"Name": f"conf-hcl-{uuid.uuid4().hex[:8]}", "Rules": rules})
    assert r.status_code == 200, (r.status_code, r.text)
    policy = r.json()
    r = registry_http.request("PUT", "/v1/acl/token", json={"Policies": [{"ID": policy["ID"]}], "Description": "conformance hcl"})
    assert r.status_code == 200, (r.status_code, r.text)
    token = r.json()
    try:
        limited = consul_client(token["SecretID"])
        sid = limited.session.create()  # session_prefix "" write
        try:
            assert limited.kv.put(f"{prefix}/allowed/lock", "v", acquire=sid) is True
            with pytest.raises(py_consul.ACLPermissionDenied):
                limited.kv.put(f"{prefix}/denied/lock", "v", acquire=sid)
            with pytest.raises(py_consul.ACLPermissionDenied):
                limited.kv.delete(f"{prefix}/denied/lock")
        finally:
            assert limited.session.destroy(sid) is True
        assert consul.kv.get(f"{prefix}/denied/lock")[1] is None

        # An unknown token is refused too (403 "ACL not found").
        with pytest.raises(py_consul.ACLPermissionDenied):
            consul_client(str(uuid.uuid4())).kv.put(f"{prefix}/allowed/y", "v")
    finally:
        registry_http.request("DELETE", f"/v1/acl/token/{token['AccessorID']}")
        registry_http.request("DELETE", f"/v1/acl/policy/{policy['ID']}")


# ------------------------------------------------------------------------------ headers


def test_kv_404_carries_index_headers(consul, registry_http, prefix):
    key = f"{prefix}/missing"
    # py-consul reads X-Consul-Index even on a 404 and raises "Missing index header" without it.
    index, entry = consul.kv.get(key)
    assert entry is None and int(index) >= 1, (index, entry)

    # Raw HTTP because py-consul hides the status and the other headers.
    r = registry_http.request("GET", f"/v1/kv/{key}")
    assert r.status_code == 404, (r.status_code, r.text)
    h = r.headers
    for name in ("X-Consul-Index", "X-Registry-Index", "X-Consul-KnownLeader", "X-Consul-LastContact"):
        assert name in h, f"404 lacks {name}: {dict(h)}"
    assert h["X-Consul-Index"] == h["X-Registry-Index"] and int(h["X-Consul-Index"]) >= 1, dict(h)
    assert h["X-Consul-KnownLeader"] == "true", dict(h)
