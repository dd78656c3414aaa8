"""Scheduler conformance for the client allocation operations: python-nomad 2.1.0 and a
WebSocket client (websocket-client) against `cairn dev --acl`, whose in-process client runs
raw_exec tasks as real processes.

Scenarios: `client.allocation.signal_allocation` with and without a task reaches a shell
`trap` (seen through `client.stream_logs`), and an unknown signal raises with `invalid
signal` (python-nomad's own test expects that text); `client.allocation.restart_allocation`
restarts in place (same allocation ID; Restart Signaled, Terminated, Restarting, Started);
`client.ls`, `client.stat`, `client.cat`, `client.read_at` inside the allocation directory,
a `..` escape refused with a 400; `client.stream_logs` plain and framed; stop's events with a
shutdown delay; and `alloc exec` over a WebSocket: a PTY shell that echoes, sees its resized
terminal and reports its exit code in the last frame, a `ws_handshake` auth frame, and
refusals as close frames.

Waits are polls every 0.2 s with a bound (20 s); each scenario purges its job at teardown
(the `jobs` fixture of test_scheduler.py).
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
import uuid

import pytest
import websocket  # websocket-client
from nomad.api.exceptions import BadRequestNomadException, URLNotFoundNomadException

from test_scheduler import _poll, jobs  # noqa: F401  (the fixture)

TRAPPER = "trap 'echo got-USR1' USR1; trap 'echo got-HUP' HUP; echo started; while :; do sleep 0.1; done"


def _job(job_id: str, script: str, **task_extra) -> dict:
    task = {
        "Name": "t",
        "Driver": "raw_exec",
        "Config": {"command": "/bin/sh", "args": ["-c", script]},
        "KillTimeout": 2_000_000_000,
        "Resources": {"CPU": 100, "MemoryMB": 32},
    }
    task.update(task_extra)
    return {
        "Job": {
            "ID": job_id,
            "Name": job_id,
            "Type": "service",
            "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [task]}],
        }
    }


def _run(nomad, jobs, what: str, script: str, **task_extra) -> str:  # noqa: F811
    job_id = f"conf-ops-{what}-{uuid.uuid4().hex[:8]}"
    jobs.register(_job(job_id, script, **task_extra))
    allocs = _poll(
        lambda: nomad.job.get_allocations(job_id),
        lambda allocs: any(a["ClientStatus"] == "running" and a["DesiredStatus"] == "run" for a in allocs),
        f"{job_id} running",
    )
    return next(a["ID"] for a in allocs if a["ClientStatus"] == "running")


def _types(nomad, alloc_id: str) -> list[str]:
    alloc = nomad.allocation.get_allocation(alloc_id)
    return [e["Type"] for e in alloc["TaskStates"]["t"]["Events"]]


def _stdout(nomad, alloc_id: str) -> str:
    return nomad.client.stream_logs.stream(alloc_id, "t", "stdout", plain=True)


def test_signal_reaches_a_trap_and_an_invalid_signal_is_refused(nomad, jobs):  # noqa: F811
    alloc_id = _run(nomad, jobs, "signal", TRAPPER)
    _poll(lambda: _stdout(nomad, alloc_id), lambda out: "started" in out, "the trap installed")

    assert nomad.client.allocation.signal_allocation(alloc_id, "SIGUSR1", task="t") == {}
    assert nomad.client.allocation.signal_allocation(alloc_id, "SIGHUP") == {}  # "Task": null
    _poll(
        lambda: _stdout(nomad, alloc_id),
        lambda out: "got-USR1" in out and "got-HUP" in out,
        "both signals trapped",
    )
    _poll(lambda: _types(nomad, alloc_id), lambda t: t[-2:] == ["Signaling", "Signaling"], "Signaling events")

    with pytest.raises(BadRequestNomadException) as refused:
        nomad.client.allocation.signal_allocation(alloc_id, "INVALID-SIGNAL")
    assert "invalid signal" in refused.value.nomad_resp.text
    with pytest.raises(URLNotFoundNomadException):
        nomad.client.allocation.signal_allocation(str(uuid.uuid4()), "SIGUSR1")


def test_restart_keeps_the_allocation_and_emits_the_events_in_order(nomad, jobs):  # noqa: F811
    alloc_id = _run(nomad, jobs, "restart", "echo run-$$; while :; do sleep 0.1; done")
    assert nomad.client.allocation.restart_allocation(alloc_id) == {}
    tail = ["Restart Signaled", "Terminated", "Restarting", "Started"]
    _poll(lambda: _types(nomad, alloc_id), lambda t: t[-4:] == tail, "restart events")
    alloc = nomad.allocation.get_allocation(alloc_id)
    assert alloc["ID"] == alloc_id and alloc["ClientStatus"] == "running"
    signaled = alloc["TaskStates"]["t"]["Events"][-4]
    assert signaled["RestartReason"] == "User requested running tasks to restart"
    _poll(lambda: _stdout(nomad, alloc_id), lambda out: out.count("run-") == 2, "two runs logged")
    job_id = alloc["JobID"]
    assert [a["ID"] for a in nomad.job.get_allocations(job_id)] == [alloc_id]


def test_files_and_logs_of_the_allocation(nomad, jobs):  # noqa: F811
    script = "printf 'hello world' > local/greeting; echo out-line; echo err-line >&2; while :; do sleep 0.1; done"
    alloc_id = _run(nomad, jobs, "files", script)
    _poll(lambda: _stdout(nomad, alloc_id), lambda out: out == "out-line\n", "the task's output")

    root = nomad.client.ls.list_files(alloc_id)
    assert sorted(e["Name"] for e in root) == ["alloc", "t"]
    assert all(e["IsDir"] for e in root)
    local = nomad.client.ls.list_files(alloc_id, "/t/local")
    assert [(e["Name"], e["Size"], e["IsDir"]) for e in local] == [("greeting", 11, False)]
    stat = nomad.client.stat.stat_file(alloc_id, "/t/local/greeting")
    assert stat["Name"] == "greeting" and stat["Size"] == 11 and stat["FileMode"] == "-rw-r--r--"
    assert nomad.client.cat.read_file(alloc_id, "/t/local/greeting") == "hello world"
    assert nomad.client.read_at.read_file_offset(alloc_id, 6, 5, "/t/local/greeting") == "world"
    with pytest.raises(BadRequestNomadException):
        nomad.client.ls.list_files(alloc_id, "/../../")
    with pytest.raises(BadRequestNomadException):
        nomad.client.cat.read_file(alloc_id, "/t/../../../etc/passwd")

    assert nomad.client.stream_logs.stream(alloc_id, "t", "stderr", plain=True) == "err-line\n"
    framed = json.loads(nomad.client.stream_logs.stream(alloc_id, "t", "stderr"))
    assert framed["File"] == "alloc/logs/t.stderr.0" and framed["Offset"] == 9
    assert base64.b64decode(framed["Data"]) == b"err-line\n"
    tail = nomad.client.stream_logs.stream(alloc_id, "t", "stdout", offset=5, origin="end", plain=True)
    assert tail == "line\n"
    with pytest.raises(BadRequestNomadException):
        nomad.client.stream_logs.stream(alloc_id, "t", "stdin")


def test_stop_waits_out_the_shutdown_delay_between_killing_and_killed(nomad, jobs):  # noqa: F811
    alloc_id = _run(nomad, jobs, "stop", "while :; do sleep 0.1; done", ShutdownDelay=1_000_000_000)
    nomad.allocation.stop_allocation(alloc_id)
    tail = ["Killing", "Waiting for shutdown delay", "Terminated", "Killed"]
    _poll(lambda: _types(nomad, alloc_id), lambda t: t[-4:] == tail, "stop events")
    events = nomad.allocation.get_allocation(alloc_id)["TaskStates"]["t"]["Events"]
    assert events[-4]["KillTimeout"] == 2_000_000_000
    assert events[-2]["Time"] - events[-3]["Time"] >= 900_000_000


# ------------------------------------------------------------------------------ exec


def _exec_url(cairn, alloc_id: str, command: list[str], **query) -> str:
    base = cairn.urls["scheduler"].rstrip("/").replace("http://", "ws://", 1)
    params = {"task": "t", "command": json.dumps(command), **query}
    return f"{base}/v1/client/allocation/{alloc_id}/exec?{urllib.parse.urlencode(params)}"


def _session(ws) -> dict:
    """Reads frames until the socket closes: output, the exit code, the close code and reason."""
    out = {"stdout": b"", "stderr": b"", "frames": [], "exit_code": None, "close": None}
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        opcode, data = ws.recv_data(control_frame=True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            code = int.from_bytes(data[:2], "big") if len(data) >= 2 else None
            out["close"] = (code, data[2:].decode())
            return out
        if opcode != websocket.ABNF.OPCODE_TEXT:
            continue
        frame = json.loads(data)
        assert out["exit_code"] is None, f"a frame after the exit frame: {frame}"
        out["frames"].append(frame)
        for stream in ("stdout", "stderr"):
            if "data" in frame.get(stream, {}):
                out[stream] += base64.b64decode(frame[stream]["data"])
        if frame.get("exited"):
            out["exit_code"] = frame["result"].get("exit_code", 0)
    pytest.fail(f"the exec session did not end: {out}")


def _stdin(data: bytes) -> str:
    return json.dumps({"stdin": {"data": base64.b64encode(data).decode()}})


def test_exec_a_shell_with_a_tty_over_a_websocket(cairn, nomad, jobs):  # noqa: F811
    alloc_id = _run(nomad, jobs, "exec", "while :; do sleep 0.1; done")
    ws = websocket.create_connection(
        _exec_url(cairn, alloc_id, ["/bin/sh"], tty="true"),
        header=[f"X-Nomad-Token: {cairn.root_token}"],
        timeout=15,
    )
    ws.send(json.dumps({"tty_size": {"height": 33, "width": 101}}))
    ws.send("{}")
    ws.send(_stdin(b"stty size; echo $((6*7)); exit 4\n"))
    out = _session(ws)
    text = out["stdout"].decode(errors="replace")
    assert "33 101\r\n" in text and "42\r\n" in text, text
    assert out["exit_code"] == 4
    assert out["frames"][-1] == {"exited": True, "result": {"exit_code": 4}}
    assert out["close"][0] == 1000


def test_exec_handshake_frame_and_refusals(cairn, nomad, jobs):  # noqa: F811
    alloc_id = _run(nomad, jobs, "exec-auth", "while :; do sleep 0.1; done")
    command = ["/bin/sh", "-c", "echo out; echo err >&2; exit 6"]

    # The token in the first frame (browsers cannot set headers).
    ws = websocket.create_connection(_exec_url(cairn, alloc_id, command, ws_handshake="true"), timeout=15)
    ws.send(json.dumps({"version": 1, "auth_token": cairn.root_token}))
    out = _session(ws)
    assert (out["stdout"], out["stderr"], out["exit_code"]) == (b"out\n", b"err\n", 6)

    refusals = [
        (_exec_url(cairn, alloc_id, command), None, "Permission denied"),
        (_exec_url(cairn, alloc_id, command, task=""), cairn.root_token, "must provide task name"),
        (_exec_url(cairn, alloc_id, []), cairn.root_token, "command is not present"),
        (_exec_url(cairn, str(uuid.uuid4()), command), cairn.root_token, "Unknown allocation"),
    ]
    for url, token, reason in refusals:
        header = [f"X-Nomad-Token: {token}"] if token else []
        ws = websocket.create_connection(url, header=header, timeout=15)
        out = _session(ws)
        assert out["close"] is not None and out["close"][0] == 1008, (reason, out)
        assert reason in out["close"][1], (reason, out)
        assert out["frames"] == []

    ws = websocket.create_connection(_exec_url(cairn, alloc_id, command, ws_handshake="true"), timeout=15)
    ws.send(json.dumps({"version": 7, "auth_token": cairn.root_token}))
    assert _session(ws)["close"] == (1008, "unexpected handshake value: 7")
