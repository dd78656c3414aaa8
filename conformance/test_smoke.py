"""Smoke tests: each service answers its health call through its upstream client."""

from __future__ import annotations

import ipaddress
import re


def test_banner_reports_what_was_asked(cairn):
    # The token and data dir we passed come back in the banner, and every
    # service got its own real (non-zero) port on 127.0.0.1.
    assert cairn.banner[0].strip() == "cairn dev", cairn.output()
    assert cairn.root_token == cairn.requested_token, cairn.output()
    assert cairn.data_dir == cairn.requested_data_dir, cairn.output()
    ports = set()
    for service in ("secrets", "registry", "scheduler", "platform"):
        host, port = cairn.host_port(service)
        assert cairn.urls[service].startswith("http://"), cairn.urls[service]
        assert host == "127.0.0.1", cairn.urls[service]
        assert port > 0
        ports.add(port)
    assert len(ports) == 4, cairn.urls


def test_secrets_health_hvac(vault):
    health = vault.sys.read_health_status(method="GET")
    # hvac's JSON adapter returns a dict on 200 and the raw Response otherwise.
    assert isinstance(health, dict), (
        f"GET /v1/sys/health: HTTP {health.status_code} {health.text!r}"
    )
    assert health["initialized"] is True, health
    assert health["sealed"] is False, health
    assert health["standby"] is False, health


def test_registry_leader_py_consul(consul):
    leader = consul.status.leader()
    assert isinstance(leader, str) and leader, f"status.leader() returned {leader!r}"
    host, _, port = leader.rpartition(":")
    assert host and port.isdigit() and 0 < int(port) < 65536, leader
    ipaddress.ip_address(host.strip("[]"))  # raises if not an IP address


def test_scheduler_agent_health_python_nomad(nomad, cairn):
    # python-nomad 2.1.0 has no method for /v1/agent/health (agent offers
    # get_agent, get_members, get_servers, join_agent, update_servers,
    # force_leave). So this goes through the client's own request path:
    # Agent.request("health") builds /v1/agent/health, sends X-Nomad-Token,
    # and raises the client's exceptions on a non-2xx answer.
    response = nomad.agent.request("health", method="get")
    assert response.request.headers.get("X-Nomad-Token") == cairn.root_token
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["server"]["ok"] is True, body
    assert isinstance(body["server"]["message"], str), body
    # Nomad omits "client" on a server-only agent; when it is there it must be ok.
    if "client" in body:
        assert body["client"]["ok"] is True, body


def test_platform_ping_pytfe(tfe, cairn):
    # pytfe 1.5.0 has no ping method; HTTPTransport.request is the lowest-level
    # call it offers (the one every resource uses). It raises on >= 400.
    response = tfe._transport.request("GET", "/api/v2/ping")
    assert str(response.request.url) == cairn.urls["platform"].rstrip("/") + "/api/v2/ping"
    assert response.request.headers["Authorization"] == f"Bearer {cairn.root_token}"
    assert response.status_code == 204, response.text
    assert response.headers.get("TFP-API-Version") == "2.5", dict(response.headers)
    assert response.headers.get("TFP-AppName"), dict(response.headers)
    limit = response.headers.get("X-RateLimit-Limit")
    assert limit is not None and re.fullmatch(r"\d+(\.\d+)?", limit), dict(response.headers)

