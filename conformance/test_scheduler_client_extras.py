"""Scheduler conformance for the client's ports, stats, garbage collection and consul services:
python-nomad 2.1.0 and py-consul against `cairn dev --acl`, whose in-process client runs
raw_exec tasks as real processes and registers provider-`consul` services in the session
registry of the same process.

Scenarios: a group's dynamic port is assigned at placement (the allocation read through
`allocation.get_allocation` shows it in `AllocatedResources.Shared.Ports`, and the task's
`NOMAD_PORT_http` says the same, seen through `client.cat`); `client.allocation.
read_allocation_stats` and `client.stats.read_stats` report memory and CPU;
`client.gc_allocation.garbage_collect` refuses a running allocation and collects a stopped
one (its directory is gone: `client.ls` then 404s), and `client.gc_all_allocations` answers;
a service with provider `consul` appears in py-consul's `catalog.service` while the task runs
and is gone after the job is purged.

Waits are polls every 0.2 s with a bound (20 s); each scenario purges its job at teardown
(the `jobs` fixture of test_scheduler.py).
"""

from __future__ import annotations

import uuid

import pytest
from nomad.api.exceptions import BaseNomadException, URLNotFoundNomadException

from test_scheduler import _poll, jobs  # noqa: F401  (the fixture)


def _job(job_id: str, script: str, **group_extra) -> dict:
    group = {
        "Name": "g",
        "Count": 1,
        "Tasks": [
            {
                "Name": "t",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", script]},
                "KillTimeout": 2_000_000_000,
                "Resources": {"CPU": 100, "MemoryMB": 32},
            }
        ],
    }
    group.update(group_extra)
    return {"Job": {"ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"], "TaskGroups": [group]}}


def _run(nomad, jobs, what: str, script: str, **group_extra) -> tuple[str, str]:  # noqa: F811
    job_id = f"conf-extra-{what}-{uuid.uuid4().hex[:8]}"
    jobs.register(_job(job_id, script, **group_extra))
    allocs = _poll(
        lambda: nomad.job.get_allocations(job_id),
        lambda allocs: any(a["ClientStatus"] == "running" for a in allocs),
        f"{job_id} running",
    )
    return job_id, next(a["ID"] for a in allocs if a["ClientStatus"] == "running")


def test_a_dynamic_port_is_assigned_at_placement_and_seen_by_the_task(nomad, jobs):  # noqa: F811
    networks = [{"DynamicPorts": [{"Label": "http", "To": -1}]}]
    _, alloc_id = _run(
        nomad,
        jobs,
        "port",
        'echo "$NOMAD_PORT_http" > "$NOMAD_TASK_DIR/port"; sleep 300',
        Networks=networks,
    )
    alloc = nomad.allocation.get_allocation(alloc_id)
    ports = alloc["AllocatedResources"]["Shared"]["Ports"]
    assert [p["Label"] for p in ports] == ["http"], ports
    port = ports[0]["Value"]
    assert 20000 <= port <= 32000
    assert ports[0]["To"] == port
    seen = _poll(
        lambda: _cat(nomad, alloc_id, "t/local/port"),
        lambda text: text.strip() != "",
        "the task's port file",
    )
    assert seen.strip() == str(port)


def _cat(nomad, alloc_id: str, path: str) -> str:
    try:
        return nomad.client.cat.read_file(alloc_id, path=path)
    except BaseNomadException:
        return ""


def test_allocation_and_host_stats(nomad, jobs):  # noqa: F811
    _, alloc_id = _run(nomad, jobs, "stats", "sleep 300")
    stats = nomad.client.allocation.read_allocation_stats(alloc_id)
    usage = stats["Tasks"]["t"]["ResourceUsage"]
    assert usage["MemoryStats"]["RSS"] > 0, stats
    assert "Percent" in usage["CpuStats"]
    assert stats["Timestamp"] > 0
    host = nomad.client.stats.read_stats()
    assert host["Memory"]["Total"] > 0
    assert host["CPU"], host
    assert host["Uptime"] > 0


def test_gc_refuses_a_running_allocation_and_collects_a_stopped_one(nomad, jobs):  # noqa: F811
    job_id, alloc_id = _run(nomad, jobs, "gc", "sleep 300")
    with pytest.raises(BaseNomadException) as refused:
        nomad.client.gc_allocation.garbage_collect(alloc_id)
    assert "not eligible for GC" in refused.value.nomad_resp.text
    nomad.job.deregister_job(job_id)
    _poll(
        lambda: nomad.allocation.get_allocation(alloc_id)["ClientStatus"],
        lambda status: status == "complete",
        "the allocation complete",
    )

    def collect() -> bool:
        try:
            nomad.client.gc_allocation.garbage_collect(alloc_id)
            return True
        except BaseNomadException:
            return False

    _poll(collect, bool, "the allocation collected")
    with pytest.raises(URLNotFoundNomadException):
        nomad.client.ls.list_files(alloc_id, path="/")
    nomad.client.gc_all_allocations.garbage_collect()


def test_a_consul_service_is_in_the_registry_while_its_task_runs(nomad, consul, jobs):  # noqa: F811
    name = f"conf-web-{uuid.uuid4().hex[:8]}"
    services = [{"Name": name, "PortLabel": "http", "Provider": "consul", "Tags": ["conformance"]}]
    group = {"Networks": [{"DynamicPorts": [{"Label": "http", "To": -1}]}]}
    job_id = f"conf-extra-consul-{uuid.uuid4().hex[:8]}"
    body = _job(job_id, "sleep 300", **group)
    body["Job"]["TaskGroups"][0]["Tasks"][0]["Services"] = services
    jobs.register(body)
    _, entries = _poll(
        lambda: consul.catalog.service(name),
        lambda found: len(found[1]) == 1,
        "the service in the registry",
    )
    entry = entries[0]
    assert entry["ServiceTags"] == ["conformance"]
    assert entry["ServiceID"].startswith("_nomad-task-")
    alloc = nomad.job.get_allocations(job_id)[0]
    ports = nomad.allocation.get_allocation(alloc["ID"])["AllocatedResources"]["Shared"]["Ports"]
    assert entry["ServicePort"] == ports[0]["Value"]
    nomad.job.deregister_job(job_id, purge=True)
    _poll(lambda: consul.catalog.service(name), lambda found: found[1] == [], "the service gone")
