"""Scheduler conformance: python-nomad 2.1.0 against `cairn dev`'s Nomad-compatible scheduler.

Each scenario drives the scheduler the way a python-nomad user does, through the client's own
calls (the `nomad` fixture carries the root token, which `cairn dev` makes the bootstrap
management token). Raw HTTP (`requests`, which python-nomad itself uses) appears only where
python-nomad cannot say what is needed: `versions?diffs=true` (get_versions has no diffs
parameter) and a body that is not JSON.

Scenarios: register and the 404 that `"id" in nomad.job` relies on; read with upstream's
defaults filled and the job reaching `running`; a second version with its structured diff;
a job's allocations and the allocation list options (prefix, filter, resources, task_states);
stopping an allocation, which places a replacement; a purge right after stops, which must
still leave every allocation terminal; the jobs list with prefix, filter and meta; HCL2
parsing with a variable, canonicalized or not; stop and purge, also of a job that could not
be placed; bad input that changes nothing; a batch job that completes; and a client built with `namespace="default"`, which
adds `?namespace=` to every URL (python-nomad's namespace injection).

python-nomad sends booleans as Python's `True`/`False` (`meta=True`, `resources=True`,
`task_states=False`, `purge=True`): the scheduler must read them as booleans.

`cairn dev` runs one in-process client node with the raw_exec driver, so allocations really
run (`/bin/sleep 300` for service jobs). Waits are polls every 0.2 s with a bound (20 s),
never fixed sleeps. All scenarios share one `cairn dev`; each uses its own random job IDs and
purges its jobs at teardown, then waits for their allocations to be terminal (`cairn dev`
leaves running tasks behind when it exits, so nothing may still run at the end).
"""

from __future__ import annotations

import copy
import re
import time
import uuid
from urllib.parse import parse_qs, urlsplit

import nomad as python_nomad  # the module; `nomad` is the fixture (a client)
import pytest
import requests
from nomad.api.exceptions import BadRequestNomadException, URLNotFoundNomadException

POLL = 0.2
WAIT = 20.0
SECOND = 1_000_000_000  # durations are integer nanoseconds
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TERMINAL_CLIENT = {"complete", "failed", "lost"}


def _stem() -> str:
    return uuid.uuid4().hex[:10]


def _job_id(what: str) -> str:
    return f"conf-{what}-{_stem()}"


def _service_job(job_id: str, count: int = 1, meta: dict | None = None) -> dict:
    job = {
        "ID": job_id,
        "Name": job_id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [
            {
                "Name": "g",
                "Count": count,
                "Tasks": [
                    {
                        "Name": "t",
                        "Driver": "raw_exec",
                        "Config": {"command": "/bin/sleep", "args": ["300"]},
                        "Resources": {"CPU": 100, "MemoryMB": 32},
                    }
                ],
            }
        ],
    }
    if meta is not None:
        job["Meta"] = meta
    return {"Job": job}


def _batch_job(job_id: str) -> dict:
    body = _service_job(job_id)
    body["Job"]["Type"] = "batch"
    body["Job"]["TaskGroups"][0]["Tasks"][0]["Config"] = {"command": "/bin/sh", "args": ["-c", "exit 0"]}
    return body


def _short(value, limit: int = 3000) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def _poll(fetch, ok, what: str, timeout: float = WAIT, show=lambda value: value):
    """Call fetch() every POLL seconds until ok(result); fail after `timeout` with the last
    result (passed through `show`)."""
    t0 = time.monotonic()
    while True:
        last = fetch()
        if ok(last):
            return last
        if time.monotonic() - t0 >= timeout:
            pytest.fail(f"{what}: not reached within {timeout:.0f} s; last seen: {_short(show(last))}")
        time.sleep(POLL)


def _summary(allocs: list[dict]) -> list[tuple]:
    return [
        (
            a.get("ID"),
            a.get("DesiredStatus"),
            a.get("ClientStatus"),
            a.get("ClientDescription"),
            a.get("PreviousAllocation"),
        )
        for a in allocs
    ]


def _wait_job_status(nomad, job_id: str, status: str) -> dict:
    return _poll(
        lambda: nomad.job.get_job(job_id),
        lambda job: job.get("Status") == status,
        f"job {job_id} Status {status!r}",
        show=lambda job: {k: job.get(k) for k in ("ID", "Status", "StatusDescription", "Stop", "Version")},
    )


def _wait_running_allocs(nomad, job_id: str, count: int) -> list[dict]:
    """Wait until the job has exactly `count` allocations meant to run, all ClientStatus running."""

    def ok(allocs: list[dict]) -> bool:
        live = [a for a in allocs if a.get("DesiredStatus") == "run"]
        return len(live) == count and all(a.get("ClientStatus") == "running" for a in live)

    allocs = _poll(
        lambda: nomad.job.get_allocations(job_id),
        ok,
        f"{count} running allocation(s) of {job_id}",
        show=_summary,
    )
    return [a for a in allocs if a.get("DesiredStatus") == "run"]


@pytest.fixture
def jobs(nomad):
    """`jobs.register(body)` registers through python-nomad and remembers the ID; every job
    still there at teardown is purged (which stops its allocations)."""

    class Jobs:
        def __init__(self) -> None:
            self.ids: list[str] = []

        def register(self, body: dict, client=None) -> dict:
            if body["Job"]["ID"] not in self.ids:
                self.ids.append(body["Job"]["ID"])
            resp = (client or nomad).jobs.register_job(body)
            assert isinstance(resp, dict), resp
            assert UUID_RE.match(resp.get("EvalID") or ""), f"register response lacks an EvalID: {resp}"
            assert isinstance(resp.get("JobModifyIndex"), int) and resp["JobModifyIndex"] > 0, resp
            return resp

    tracker = Jobs()
    yield tracker
    # Purge what the scenario left, then wait until those allocations are terminal: a process
    # still running when `cairn dev` exits would outlive it. (A scenario that purges a job
    # itself checks its allocations.)
    allocs: list[str] = []
    for job_id in tracker.ids:
        if job_id in nomad.job:
            allocs += [a["ID"] for a in nomad.job.get_allocations(job_id)]
            nomad.job.deregister_job(job_id, purge=True)

    def statuses() -> dict[str, str | None]:
        seen = {}
        for alloc_id in allocs:
            try:
                seen[alloc_id] = nomad.allocation.get_allocation(alloc_id).get("ClientStatus")
            except URLNotFoundNomadException:
                seen[alloc_id] = None  # gone with the purge
        return seen

    _poll(
        statuses,
        lambda seen: all(s is None or s in TERMINAL_CLIENT for s in seen.values()),
        "allocations of purged jobs terminal",
    )


@pytest.fixture
def nomad_http(cairn):
    """Raw HTTP to the scheduler with the root token in X-Nomad-Token (python-nomad's header)."""
    base = cairn.urls["scheduler"].rstrip("/")
    with requests.Session() as session:
        session.headers["X-Nomad-Token"] = cairn.root_token

        def request(method: str, path: str, **kwargs) -> requests.Response:
            kwargs.setdefault("timeout", 10)
            return session.request(method, base + path, **kwargs)

        yield request


# ------------------------------------------------------------------------------ jobs


def test_register_then_membership_uses_the_404(nomad, jobs):
    job_id = _job_id("member")
    jobs.register(_service_job(job_id))

    assert job_id in nomad.job
    assert nomad.job[job_id]["ID"] == job_id
    # `in` and `[]` turn a 404 into False / KeyError; anything else would raise.
    assert f"{job_id}-missing" not in nomad.job
    with pytest.raises(KeyError):
        nomad.job[f"{job_id}-missing"]
    with pytest.raises(URLNotFoundNomadException):
        nomad.job.get_job(f"{job_id}-missing")
    # `in nomad.jobs` walks the jobs list instead.
    assert job_id in nomad.jobs
    assert f"{job_id}-missing" not in nomad.jobs


def test_read_job_fills_defaults_and_reaches_running(nomad, jobs):
    job_id = _job_id("read")
    jobs.register(_service_job(job_id))

    job = nomad.job.get_job(job_id)
    assert job["ID"] == job_id and job["Name"] == job_id, job
    assert job["Type"] == "service", job
    assert job["Priority"] == 50, job
    assert job["Region"] == "global", job
    assert job["Namespace"] == "default", job
    assert job["NodePool"] == "default", job
    assert job["Datacenters"] == ["dc1"], job
    assert job["Version"] == 0, job
    assert job["Stop"] is False, job
    assert job["Status"] in ("pending", "running"), job
    assert isinstance(job["SubmitTime"], int) and job["SubmitTime"] > 1_600_000_000 * SECOND, job
    assert 0 < job["CreateIndex"] <= job["ModifyIndex"], job
    assert 0 < job["JobModifyIndex"] <= job["ModifyIndex"], job

    group = job["TaskGroups"][0]
    assert group["Name"] == "g" and group["Count"] == 1, group
    # Upstream's service-job defaults.
    assert group["RestartPolicy"] == {
        **group["RestartPolicy"],
        "Attempts": 2,
        "Interval": 30 * 60 * SECOND,
        "Delay": 15 * SECOND,
        "Mode": "fail",
    }, group["RestartPolicy"]
    assert group["ReschedulePolicy"] == {
        **group["ReschedulePolicy"],
        "Delay": 30 * SECOND,
        "DelayFunction": "exponential",
        "MaxDelay": 3600 * SECOND,
        "Unlimited": True,
    }, group["ReschedulePolicy"]
    assert group["EphemeralDisk"]["SizeMB"] == 300, group["EphemeralDisk"]

    task = group["Tasks"][0]
    assert task["Name"] == "t" and task["Driver"] == "raw_exec", task
    assert task["Config"] == {"command": "/bin/sleep", "args": ["300"]}, task
    assert task["Resources"]["CPU"] == 100 and task["Resources"]["MemoryMB"] == 32, task["Resources"]
    assert task["KillTimeout"] == 5 * SECOND, task
    assert task["LogConfig"]["MaxFiles"] == 10 and task["LogConfig"]["MaxFileSizeMB"] == 10, task["LogConfig"]

    running = _wait_job_status(nomad, job_id, "running")
    assert running["Version"] == 0, running


def test_update_makes_a_new_version_with_a_count_diff(nomad, jobs, nomad_http):
    job_id = _job_id("versions")
    first = jobs.register(_service_job(job_id, count=1))
    # The update goes through the other register call, POST /v1/job/<id>.
    second = nomad.job.register_job(job_id, _service_job(job_id, count=2))
    assert UUID_RE.match(second.get("EvalID") or ""), second
    assert second["JobModifyIndex"] > first["JobModifyIndex"], (first, second)

    assert nomad.job.get_job(job_id)["Version"] == 1

    versions = nomad.job.get_versions(job_id)
    listed = versions["Versions"]
    assert [v["Version"] for v in listed] == [1, 0], [v["Version"] for v in listed]
    assert [v["TaskGroups"][0]["Count"] for v in listed] == [2, 1]
    assert all(v["ID"] == job_id for v in listed)
    assert versions.get("Diffs") is None, versions.get("Diffs")  # not asked for

    # Raw HTTP: python-nomad's get_versions cannot pass diffs=true.
    r = nomad_http("GET", f"/v1/job/{job_id}/versions", params={"diffs": "true"})
    assert r.status_code == 200, (r.status_code, r.text)
    body = r.json()
    assert [v["Version"] for v in body["Versions"]] == [1, 0]
    diffs = body["Diffs"]
    assert isinstance(diffs, list) and len(diffs) == 1, diffs  # one diff per consecutive pair
    diff = diffs[0]
    assert diff["Type"] == "Edited" and diff["ID"] == job_id, diff
    groups = {g["Name"]: g for g in diff["TaskGroups"] or []}
    assert "g" in groups, diff
    assert groups["g"]["Type"] == "Edited", groups["g"]
    count_fields = [f for f in groups["g"]["Fields"] or [] if f["Name"] == "Count"]
    assert len(count_fields) == 1, groups["g"]
    assert count_fields[0]["Type"] == "Edited", count_fields[0]
    assert (count_fields[0]["Old"], count_fields[0]["New"]) == ("1", "2"), count_fields[0]

    # The scheduler acts on version 1: two allocations end up running.
    _wait_running_allocs(nomad, job_id, 2)


# ------------------------------------------------------------------------------ allocations


def test_job_allocations_run_and_the_list_options(nomad, jobs):
    job_id = _job_id("allocs")
    jobs.register(_service_job(job_id, count=2))
    allocs = _wait_running_allocs(nomad, job_id, 2)

    for alloc in allocs:
        assert UUID_RE.match(alloc["ID"]), alloc
        assert alloc["JobID"] == job_id and alloc["TaskGroup"] == "g", alloc
        assert alloc["Namespace"] == "default", alloc
        assert alloc["NodeID"], alloc
    assert sorted(a["Name"] for a in allocs) == [f"{job_id}.g[0]", f"{job_id}.g[1]"], _summary(allocs)

    alloc_id = allocs[0]["ID"]
    prefix = alloc_id[:4]
    by_prefix = nomad.allocations.get_allocations(prefix=prefix)
    assert alloc_id in [a["ID"] for a in by_prefix], _summary(by_prefix)
    assert all(a["ID"].startswith(prefix) for a in by_prefix), _summary(by_prefix)

    mine = f'JobID == "{job_id}"'
    plain = nomad.allocations.get_allocations(filter_=mine)
    assert sorted(a["ID"] for a in plain) == sorted(a["ID"] for a in allocs), _summary(plain)
    for alloc in plain:
        assert not alloc.get("AllocatedResources"), alloc  # only when asked for
        states = alloc.get("TaskStates") or {}
        assert states.get("t", {}).get("State") == "running", states  # task_states defaults to true

    with_resources = nomad.allocations.get_allocations(filter_=mine, resources=True)
    assert len(with_resources) == 2, _summary(with_resources)
    for alloc in with_resources:
        resources = alloc.get("AllocatedResources")
        assert resources, f"resources=True but no AllocatedResources: {alloc}"
        task = resources["Tasks"]["t"]
        assert task["Cpu"]["CpuShares"] == 100 and task["Memory"]["MemoryMB"] == 32, resources

    without_states = nomad.allocations.get_allocations(filter_=mine, task_states=False)
    assert len(without_states) == 2, _summary(without_states)
    for alloc in without_states:
        assert alloc.get("TaskStates") is None, alloc["TaskStates"]
        assert alloc["ClientStatus"] == "running", alloc

    full = nomad.allocation.get_allocation(alloc_id)
    assert full["ID"] == alloc_id, full
    assert isinstance(full.get("Job"), dict) and full["Job"]["ID"] == job_id, full.get("Job")
    assert full["DesiredStatus"] == "run" and full["ClientStatus"] == "running", full
    assert full["TaskStates"]["t"]["State"] == "running", full["TaskStates"]
    assert "Started" in [e["Type"] for e in full["TaskStates"]["t"]["Events"]], full["TaskStates"]
    assert full["Metrics"]["NodesEvaluated"] >= 1, full["Metrics"]
    assert alloc_id in nomad.allocation

    # Single-allocation reads take the full UUID only.
    with pytest.raises(URLNotFoundNomadException):
        nomad.allocation.get_allocation(alloc_id[:8])
    with pytest.raises(URLNotFoundNomadException):
        nomad.allocation.get_allocation(str(uuid.uuid4()))


def test_stop_allocation_places_a_replacement(nomad, jobs):
    job_id = _job_id("stop")
    jobs.register(_service_job(job_id))
    (old,) = _wait_running_allocs(nomad, job_id, 1)

    stopped = nomad.allocation.stop_allocation(old["ID"])
    assert UUID_RE.match(stopped.get("EvalID") or ""), stopped
    assert isinstance(stopped.get("Index"), int) and stopped["Index"] > 0, stopped

    def replaced(allocs: list[dict]) -> bool:
        new = [a for a in allocs if a.get("PreviousAllocation") == old["ID"]]
        return len(new) == 1 and new[0].get("ClientStatus") == "running"

    allocs = _poll(
        lambda: nomad.job.get_allocations(job_id), replaced, f"a running replacement of {old['ID']}", show=_summary
    )
    (new,) = [a for a in allocs if a.get("PreviousAllocation") == old["ID"]]
    assert new["ID"] != old["ID"], new
    assert new["Name"] == old["Name"], (old["Name"], new["Name"])  # same slot, g[0]

    final = _poll(
        lambda: nomad.allocation.get_allocation(old["ID"]),
        lambda a: a.get("ClientStatus") in TERMINAL_CLIENT,
        f"stopped allocation {old['ID']} terminal",
    )
    assert final["DesiredStatus"] == "stop", final
    assert final["ClientStatus"] == "complete", final
    assert final["NextAllocation"] == new["ID"], final
    # The job keeps one allocation meant to run.
    live = [a for a in nomad.job.get_allocations(job_id) if a["DesiredStatus"] == "run"]
    assert [a["ID"] for a in live] == [new["ID"]], _summary(live)


def test_purge_right_after_stop_leaves_every_allocation_terminal(nomad, jobs):
    # Stopping allocations places replacements; purging the job at once must still end with
    # every allocation, replacements included, stopped and "complete" (killed, not failed), as
    # upstream's client does for an allocation that is stopped before it runs.
    job_id = _job_id("stoppurge")
    jobs.register(_service_job(job_id, count=3))
    allocs = _wait_running_allocs(nomad, job_id, 3)
    for alloc in allocs:
        nomad.allocation.stop_allocation(alloc["ID"])
    nomad.job.deregister_job(job_id, purge=True)
    assert job_id not in nomad.job

    final = _poll(
        lambda: nomad.allocations.get_allocations(filter_=f'JobID == "{job_id}"', task_states=False),
        lambda allocs: all(a.get("ClientStatus") in TERMINAL_CLIENT for a in allocs),
        f"every allocation of purged job {job_id} terminal",
        show=_summary,
    )
    assert {a["ID"] for a in allocs} <= {a["ID"] for a in final}, _summary(final)
    for alloc in final:
        assert alloc["DesiredStatus"] == "stop", _summary(final)
        assert alloc["ClientStatus"] == "complete", _summary(final)


# ------------------------------------------------------------------------------ jobs list


LIST_ENTRY_FIELDS = (
    "ID", "Name", "Type", "Priority", "Status", "JobSummary", "CreateIndex", "ModifyIndex", "JobModifyIndex",
)  # fmt: skip


def test_jobs_list_prefix_filter_and_meta(nomad, jobs):
    stem = f"conf-list-{_stem()}"
    a, b, other = f"{stem}-a", f"{stem}-b", f"conf-other-{_stem()}"
    jobs.register(_service_job(a, meta={"team": "conf"}))
    jobs.register(_service_job(b))
    jobs.register(_service_job(other))

    listed = nomad.jobs.get_jobs(prefix=stem)
    assert sorted(j["ID"] for j in listed) == [a, b], [j["ID"] for j in listed]
    for entry in listed:
        for field in LIST_ENTRY_FIELDS:
            assert field in entry, f"jobs list entry lacks {field}: {entry}"
        assert entry["Type"] == "service" and entry["Priority"] == 50, entry
        assert entry["JobSummary"]["JobID"] == entry["ID"], entry["JobSummary"]
        assert not entry.get("Meta"), entry  # only with meta=True

    with_meta = {j["ID"]: j for j in nomad.jobs.get_jobs(prefix=stem, meta=True)}
    assert set(with_meta) == {a, b}, list(with_meta)
    assert with_meta[a].get("Meta") == {"team": "conf"}, with_meta[a]
    assert not with_meta[b].get("Meta"), with_meta[b]

    # The filter sees the whole job, not just the list entry.
    by_id = nomad.jobs.get_jobs(filter_=f'ID == "{a}"')
    assert [j["ID"] for j in by_id] == [a], [j["ID"] for j in by_id]
    by_meta = nomad.jobs.get_jobs(prefix=stem, filter_='Meta.team == "conf"')
    assert [j["ID"] for j in by_meta] == [a], [j["ID"] for j in by_meta]

    _wait_job_status(nomad, a, "running")
    running = nomad.jobs.get_jobs(filter_='Status == "running"')
    assert a in [j["ID"] for j in running], [j["ID"] for j in running]
    assert all(j["Status"] == "running" for j in running), [(j["ID"], j["Status"]) for j in running]
    assert nomad.jobs.get_jobs(prefix=stem, filter_='Status == "no-such-status"') == []

    with pytest.raises(BadRequestNomadException) as bad:
        nomad.jobs.get_jobs(filter_='Status ==')
    assert "failed to read filter expression" in str(bad.value), str(bad.value)


# ------------------------------------------------------------------------------ parse

PARSE_HCL = """
variable "greeting" {
  type    = string
  default = "hello"
}

job "conf-parse" {
  datacenters = ["dc1"]

  meta {
    greeting = "${var.greeting}-world"
  }

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["300", "${var.greeting}"]
      }
    }
  }
}
"""


def test_parse_hcl2_with_a_variable(nomad, jobs):
    parsed = nomad.jobs.parse(PARSE_HCL)
    assert parsed["ID"] == "conf-parse" and parsed["Name"] == "conf-parse", parsed
    assert parsed["Meta"] == {"greeting": "hello-world"}, parsed
    task = parsed["TaskGroups"][0]["Tasks"][0]
    assert task["Driver"] == "raw_exec", task
    assert task["Config"] == {"command": "/bin/sleep", "args": ["300", "hello"]}, task
    # Not canonicalized: nothing the file did not say is filled in.
    assert parsed.get("Priority") is None and parsed.get("Region") is None, parsed
    assert parsed["TaskGroups"][0].get("Count") is None, parsed["TaskGroups"][0]

    canonical = nomad.jobs.parse(PARSE_HCL, canonicalize=True)
    assert canonical["ID"] == "conf-parse", canonical
    assert canonical["Type"] == "service", canonical
    assert canonical["Priority"] == 50 and canonical["Region"] == "global", canonical
    assert canonical["Namespace"] == "default", canonical
    group = canonical["TaskGroups"][0]
    assert group["Count"] == 1, group
    assert group["RestartPolicy"]["Attempts"] == 2 and group["RestartPolicy"]["Mode"] == "fail", group
    ctask = group["Tasks"][0]
    assert ctask["Resources"]["CPU"] == 100 and ctask["Resources"]["MemoryMB"] == 300, ctask["Resources"]
    assert ctask["KillTimeout"] == 5 * SECOND, ctask
    assert "conf-parse" not in nomad.job  # parsing registers nothing

    # What parse returns is a job register accepts (the CLI's `job run` does exactly this).
    job_id = _job_id("parsed")
    body = {"Job": {**copy.deepcopy(canonical), "ID": job_id, "Name": job_id}}
    jobs.register(body)
    stored = nomad.job.get_job(job_id)
    assert stored["Meta"] == {"greeting": "hello-world"}, stored
    assert stored["TaskGroups"][0]["Tasks"][0]["Config"]["args"] == ["300", "hello"], stored

    with pytest.raises(BadRequestNomadException):
        nomad.jobs.parse('job "broken" {\n  group "g" {\n')
    with pytest.raises(BadRequestNomadException):
        nomad.jobs.parse('job "unset" {\n  datacenters = [var.nope]\n}\n')


# ------------------------------------------------------------------------------ stop and purge


def test_deregister_stops_then_purge_removes(nomad, jobs):
    job_id = _job_id("dereg")
    jobs.register(_service_job(job_id))
    (alloc,) = _wait_running_allocs(nomad, job_id, 1)

    resp = nomad.job.deregister_job(job_id)
    assert UUID_RE.match(resp.get("EvalID") or ""), resp

    job = nomad.job.get_job(job_id)
    assert job["Stop"] is True, job
    assert job_id in nomad.job  # a stopped job is still readable
    dead = _wait_job_status(nomad, job_id, "dead")
    assert dead["Stop"] is True, dead
    stopped = _poll(
        lambda: nomad.allocation.get_allocation(alloc["ID"]),
        lambda a: a.get("ClientStatus") in TERMINAL_CLIENT,
        f"allocation {alloc['ID']} of the stopped job terminal",
    )
    assert stopped["DesiredStatus"] == "stop" and stopped["ClientStatus"] == "complete", stopped

    nomad.job.deregister_job(job_id, purge=True)
    assert job_id not in nomad.job
    assert job_id not in [j["ID"] for j in nomad.jobs.get_jobs(prefix=job_id)]
    # Allocations outlive the purge (until garbage collection) and keep their own copy of the
    # job ("copy of the job when the allocation was created or updated").
    kept = nomad.allocation.get_allocation(alloc["ID"])
    assert kept["ClientStatus"] == "complete", kept
    job_copy = kept.get("Job")
    assert isinstance(job_copy, dict) and job_copy["ID"] == job_id, f"Job of {alloc['ID']}: {job_copy!r}"


def test_deregister_of_an_unplaceable_job_ends_dead(nomad, jobs):
    # No node is in datacenter "nowhere": the placement is blocked and the job stays pending.
    # Stopping it must still end "dead" (the successful deregister evaluation cancels the
    # blocked one, as upstream's state store does).
    job_id = _job_id("blocked")
    body = _service_job(job_id)
    body["Job"]["Datacenters"] = ["nowhere"]
    jobs.register(body)
    assert nomad.job.get_job(job_id)["Status"] == "pending"
    assert nomad.job.get_allocations(job_id) == []

    nomad.job.deregister_job(job_id)
    dead = _wait_job_status(nomad, job_id, "dead")
    assert dead["Stop"] is True, dead


# ------------------------------------------------------------------------------ bad input


def test_bad_input_is_a_400_and_changes_nothing(nomad, jobs, nomad_http):
    stem = f"conf-bad-{_stem()}"

    unknown = _service_job(f"{stem}-unknown")
    unknown["Job"]["Bogus"] = 1
    with pytest.raises(BadRequestNomadException) as bad:
        nomad.jobs.register_job(unknown)
    assert "Bogus" in str(bad.value), str(bad.value)

    nested = _service_job(f"{stem}-nested")
    nested["Job"]["TaskGroups"][0]["Tasks"][0]["Bogus"] = 1
    with pytest.raises(BadRequestNomadException) as bad:
        nomad.jobs.register_job(nested)
    assert "Bogus" in str(bad.value), str(bad.value)

    huge = _service_job(f"{stem}-huge", count=100_000_000)
    with pytest.raises(BadRequestNomadException) as bad:
        nomad.jobs.register_job(huge)
    assert "count" in str(bad.value).lower(), str(bad.value)

    constraint = _service_job(f"{stem}-constraint")
    constraint["Job"]["Constraints"] = [{"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "bogus-op"}]
    with pytest.raises(BadRequestNomadException):
        nomad.jobs.register_job(constraint)

    # Raw HTTP: python-nomad always sends valid JSON.
    r = nomad_http("POST", "/v1/jobs", data=b'{"Job": {"ID": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 400, (r.status_code, r.text)

    for suffix in ("unknown", "nested", "huge", "constraint"):
        assert f"{stem}-{suffix}" not in nomad.job
    assert nomad.jobs.get_jobs(prefix=stem) == []

    # A bad update of an existing job leaves it at its version.
    job_id = f"{stem}-good"
    jobs.register(_service_job(job_id))
    with pytest.raises(BadRequestNomadException):
        nomad.job.register_job(job_id, _service_job(job_id, count=100_000_000))
    versions = nomad.job.get_versions(job_id)["Versions"]
    assert [v["Version"] for v in versions] == [0], [v["Version"] for v in versions]
    assert nomad.job.get_job(job_id)["TaskGroups"][0]["Count"] == 1


# ------------------------------------------------------------------------------ batch


def test_batch_job_completes(nomad, jobs):
    job_id = _job_id("batch")
    jobs.register(_batch_job(job_id))

    job = nomad.job.get_job(job_id)
    group = job["TaskGroups"][0]
    # Upstream's batch-job defaults differ from the service ones.
    assert group["RestartPolicy"]["Attempts"] == 3, group["RestartPolicy"]
    assert group["RestartPolicy"]["Interval"] == 24 * 3600 * SECOND, group["RestartPolicy"]
    assert group["ReschedulePolicy"]["Attempts"] == 1, group["ReschedulePolicy"]
    assert group["ReschedulePolicy"]["Unlimited"] is False, group["ReschedulePolicy"]

    allocs = _poll(
        lambda: nomad.job.get_allocations(job_id),
        lambda allocs: len(allocs) == 1 and allocs[0].get("ClientStatus") in TERMINAL_CLIENT,
        f"the allocation of batch job {job_id} terminal",
        show=_summary,
    )
    alloc = nomad.allocation.get_allocation(allocs[0]["ID"])
    assert alloc["ClientStatus"] == "complete", alloc
    state = alloc["TaskStates"]["t"]
    assert state["State"] == "dead" and state["Failed"] is False, state
    terminated = [e for e in state["Events"] if e["Type"] == "Terminated"]
    assert terminated, [e["Type"] for e in state["Events"]]
    assert terminated[-1]["ExitCode"] == 0, terminated[-1]

    _wait_job_status(nomad, job_id, "dead")


# ------------------------------------------------------------------------------ namespace injection


def test_namespace_query_parameter_is_accepted_everywhere(cairn, jobs):
    # Nomad(namespace=...) adds ?namespace= to every job, jobs, allocation and allocations URL
    # (python-nomad's _required_namespace). The hook records what was really sent.
    sent: list[str] = []
    session = requests.Session()
    session.hooks["response"].append(lambda r, *args, **kwargs: sent.append(r.request.url))
    host, port = cairn.host_port("scheduler")
    client = python_nomad.Nomad(
        host=host, port=port, token=cairn.root_token, timeout=10, namespace="default", session=session
    )
    try:
        job_id = _job_id("ns")
        jobs.register(_service_job(job_id), client=client)
        assert client.job.get_job(job_id)["Namespace"] == "default"
        assert job_id in client.job
        assert [v["Version"] for v in client.job.get_versions(job_id)["Versions"]] == [0]
        assert [j["ID"] for j in client.jobs.get_jobs(prefix=job_id)] == [job_id]
        assert client.jobs.parse(PARSE_HCL)["ID"] == "conf-parse"

        (alloc,) = _wait_running_allocs(client, job_id, 1)
        assert alloc["ID"] in [a["ID"] for a in client.allocations.get_allocations(prefix=alloc["ID"][:2])]
        assert client.allocation.get_allocation(alloc["ID"])["JobID"] == job_id
        assert UUID_RE.match(client.allocation.stop_allocation(alloc["ID"]).get("EvalID") or "")
        _poll(
            lambda: client.job.get_allocations(job_id),
            lambda allocs: any(
                a.get("PreviousAllocation") == alloc["ID"] and a.get("ClientStatus") == "running" for a in allocs
            ),
            f"a running replacement of {alloc['ID']}",
            show=_summary,
        )
        assert UUID_RE.match(client.job.deregister_job(job_id, purge=True).get("EvalID") or "")
        assert job_id not in client.job
        _poll(
            lambda: client.allocations.get_allocations(filter_=f'JobID == "{job_id}"', task_states=False),
            lambda allocs: len(allocs) == 2 and all(a.get("ClientStatus") in TERMINAL_CLIENT for a in allocs),
            f"both allocations of purged job {job_id} terminal",
            show=_summary,
        )

        assert sent, "the session hook saw no request"
        for url in sent:
            assert parse_qs(urlsplit(url).query).get("namespace") == ["default"], url
    finally:
        session.close()
