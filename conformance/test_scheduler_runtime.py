"""Scheduler conformance for the runtime of allocations: services, checks and schedule pauses,
against `cairn dev --acl`, whose in-process client runs raw_exec tasks as real processes.

python-nomad 2.1.0 registers the jobs and reads allocations and their task events; it has no
call for `/v1/allocation/:id/services`, `/checks`, `/v1/service/:name` or the pause endpoint
(Enterprise), so those go through raw HTTP (`requests`, as python-nomad itself uses).

Scenarios: a provider-"nomad" service gets a dynamic port from 20000-32000 that the task
listens on ($NOMAD_PORT_http), its HTTP, TCP and script checks fail until the task listens
and writes its ready file, then pass with upstream's outputs, and the services disappear when
the job is purged; a task scheduled outside its window is paused (`Pausing`,
`scheduled_pause`), runs after `run` (`Running`, `force_run`), stops after `pause`
(`force_pause`) and follows its schedule again after `scheduled`; a bad pause state is a 400.

Waits are polls every 0.2 s with a bound (20 s); each scenario purges its job at teardown
(the `jobs` fixture of test_scheduler.py).
"""

from __future__ import annotations

import sys
import time
import uuid

from test_scheduler import _poll, jobs, nomad_http  # noqa: F401  (the fixtures)

SECOND = 1_000_000_000


def _web_job(job_id: str) -> dict:
    script = (
        'sleep 3; touch "$NOMAD_TASK_DIR/ready"; '
        f'exec {sys.executable} -m http.server "$NOMAD_PORT_http" --bind 127.0.0.1'
    )
    checks = [
        {"Name": "http-alive", "Type": "http", "Path": "/", "Interval": SECOND // 2, "Timeout": SECOND},
        {"Name": "tcp-alive", "Type": "tcp", "Interval": SECOND // 2, "Timeout": SECOND},
        {
            "Name": "ready-file",
            "Type": "script",
            "Command": "/bin/sh",
            "Args": ["-c", 'test -e "$NOMAD_TASK_DIR/ready"'],
            "Interval": SECOND // 2,
            "Timeout": SECOND,
        },
    ]
    return {
        "Job": {
            "ID": job_id,
            "Name": job_id,
            "Type": "service",
            "Datacenters": ["dc1"],
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": 1,
                    "Networks": [{"DynamicPorts": [{"Label": "http", "To": -1}]}],
                    "Tasks": [
                        {
                            "Name": "t",
                            "Driver": "raw_exec",
                            "Config": {"command": "/bin/sh", "args": ["-c", script]},
                            "KillTimeout": 2 * SECOND,
                            "Resources": {"CPU": 100, "MemoryMB": 32},
                            "Services": [
                                {
                                    "Name": job_id,
                                    "PortLabel": "http",
                                    "Tags": ["v1"],
                                    "Provider": "nomad",
                                    "Checks": checks,
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    }


def _checks(nomad_http, alloc_id: str) -> dict:  # noqa: F811
    resp = nomad_http("GET", f"/v1/allocation/{alloc_id}/checks")
    assert resp.status_code == 200, resp.text
    return {check["Check"]: check for check in resp.json().values()}


def test_a_service_gets_a_dynamic_port_its_checks_flip_and_it_goes_with_the_job(nomad, jobs, nomad_http):  # noqa: F811
    job_id = f"conf-web-{uuid.uuid4().hex[:8]}"
    jobs.register(_web_job(job_id))
    allocs = _poll(
        lambda: nomad.job.get_allocations(job_id),
        lambda allocs: any(a["ClientStatus"] == "running" for a in allocs),
        f"{job_id} running",
    )
    alloc_id = next(a["ID"] for a in allocs if a["ClientStatus"] == "running")

    services = _poll(
        lambda: nomad_http("GET", f"/v1/allocation/{alloc_id}/services").json(),
        lambda services: len(services) == 1,
        "the service registered",
    )
    service = services[0]
    assert 20000 <= service["Port"] <= 32000, service
    assert service["ServiceName"] == job_id and service["Tags"] == ["v1"]
    assert service["AllocID"] == alloc_id and service["JobID"] == job_id
    assert service["ID"] == f"_nomad-task-{alloc_id}-t-{job_id}-http"
    assert service["Address"] and service["Namespace"] == "default"
    by_name = nomad_http("GET", f"/v1/service/{job_id}").json()
    assert [s["ID"] for s in by_name] == [service["ID"]]
    listed = nomad_http("GET", "/v1/services").json()
    assert any(
        entry["Namespace"] == "default" and {"ServiceName": job_id, "Tags": ["v1"]} in entry["Services"]
        for entry in listed
    ), listed

    _poll(
        lambda: _checks(nomad_http, alloc_id),
        lambda checks: len(checks) == 3 and all(c["Status"] == "failure" for c in checks.values()),
        "every check failing before the task listens",
    )
    checks = _poll(
        lambda: _checks(nomad_http, alloc_id),
        lambda checks: all(c["Status"] == "success" for c in checks.values()),
        "every check passing once it listens",
    )
    assert checks["http-alive"]["Output"] == "nomad: http ok"
    assert checks["http-alive"]["StatusCode"] == 200
    assert checks["tcp-alive"]["Output"] == "nomad: tcp ok"
    assert checks["tcp-alive"]["Mode"] == "healthiness"
    assert checks["tcp-alive"]["Group"] == f"{job_id}.g[0]"
    assert checks["ready-file"]["Timestamp"] > time.time() - 60

    nomad.job.deregister_job(job_id, purge=True)
    _poll(
        lambda: (
            nomad_http("GET", f"/v1/service/{job_id}").json(),
            nomad_http("GET", f"/v1/allocation/{alloc_id}/checks").json()
            if nomad_http("GET", f"/v1/allocation/{alloc_id}/checks").status_code == 200
            else {},
        ),
        lambda seen: seen == ([], {}),
        "the service and its checks gone",
    )


def _daytime_zone() -> tuple[str, int, int]:
    """A fixed-offset zone where it is now between 03:00 and 20:59, and its hour and minute."""
    now = time.gmtime()
    offset = next(o for o in range(-12, 15) if 3 <= (now.tm_hour + o) % 24 <= 20)
    zone = "UTC" if offset == 0 else (f"Etc/GMT-{offset}" if offset > 0 else f"Etc/GMT+{-offset}")
    return zone, (now.tm_hour + offset) % 24, now.tm_min


def _pause_state(nomad_http, alloc_id: str) -> str:  # noqa: F811
    resp = nomad_http("GET", f"/v1/client/allocation/{alloc_id}/pause", params={"task": "t"})
    assert resp.status_code == 200, resp.text
    return resp.json()["ScheduleState"]


def _set_pause(nomad_http, alloc_id: str, state: str) -> None:  # noqa: F811
    resp = nomad_http("POST", f"/v1/client/allocation/{alloc_id}/pause", json={"Task": "t", "ScheduleState": state})
    assert resp.status_code == 200, resp.text
    assert isinstance(resp.json()["Index"], int)


def _types(nomad, alloc_id: str) -> list[str]:
    alloc = nomad.allocation.get_allocation(alloc_id)
    return [e["Type"] for e in alloc["TaskStates"].get("t", {}).get("Events") or []]


def test_a_scheduled_task_pauses_outside_its_window_and_obeys_the_pause_endpoint(nomad, jobs, nomad_http):  # noqa: F811
    zone, hour, minute = _daytime_zone()
    job_id = f"conf-sched-{uuid.uuid4().hex[:8]}"
    body = {
        "Job": {
            "ID": job_id,
            "Name": job_id,
            "Type": "service",
            "Datacenters": ["dc1"],
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": 1,
                    "Tasks": [
                        {
                            "Name": "t",
                            "Driver": "raw_exec",
                            "Config": {"command": "/bin/sh", "args": ["-c", "while :; do sleep 0.1; done"]},
                            "KillTimeout": 2 * SECOND,
                            "Resources": {"CPU": 100, "MemoryMB": 32},
                            # A window two hours from now.
                            "Schedule": {
                                "Cron": {
                                    "Start": f"{minute} {hour + 2} * * * *",
                                    "End": f"{minute} {hour + 3}",
                                    "Timezone": zone,
                                }
                            },
                        }
                    ],
                }
            ],
        }
    }
    jobs.register(body)
    allocs = _poll(lambda: nomad.job.get_allocations(job_id), lambda allocs: len(allocs) == 1, "placed")
    alloc_id = allocs[0]["ID"]
    _poll(lambda: _types(nomad, alloc_id), lambda t: t == ["Received", "Pausing"], "paused by its schedule")
    _poll(lambda: _pause_state(nomad_http, alloc_id), lambda s: s == "scheduled_pause", "scheduled_pause")

    _set_pause(nomad_http, alloc_id, "run")
    _poll(lambda: _types(nomad, alloc_id), lambda t: t[-3:] == ["Running", "Task Setup", "Started"], "run")
    _poll(lambda: _pause_state(nomad_http, alloc_id), lambda s: s == "force_run", "force_run")

    _set_pause(nomad_http, alloc_id, "pause")
    _poll(lambda: _types(nomad, alloc_id), lambda t: t[-2:] == ["Pausing", "Terminated"], "paused")
    _poll(lambda: _pause_state(nomad_http, alloc_id), lambda s: s == "force_pause", "force_pause")
    assert nomad.allocation.get_allocation(alloc_id)["TaskStates"]["t"]["Restarts"] == 0

    _set_pause(nomad_http, alloc_id, "scheduled")
    _poll(lambda: _pause_state(nomad_http, alloc_id), lambda s: s == "scheduled_pause", "back to the schedule")

    resp = nomad_http("POST", f"/v1/client/allocation/{alloc_id}/pause", json={"Task": "t", "ScheduleState": "nap"})
    assert resp.status_code == 400 and "Not a valid task schedule state" in resp.text
