"""Prometheus metrics (issue 11, point 5) at each service's upstream path.

- secrets: `GET /v1/sys/metrics` through hvac unchanged (hvac 2.4 has no metrics call, so its
  own adapter makes the request): the go-metrics JSON summary by default, the Prometheus text
  with `format=prometheus`, a token with `read` on `sys/metrics` required (403 otherwise).
- registry: `GET /v1/agent/metrics` (py-consul 1.8 has no metrics call: plain requests, as
  for Consul): `agent:read` with ACLs on, open on plain `cairn dev`.
- scheduler: `GET /v1/metrics` through python-nomad's `metrics.get_metrics()` (the JSON
  summary), and `?format=prometheus` over plain requests; no token needed, as Nomad.
- platform: `GET /api/v2/metrics` (TFE has none; cairn's own path), the site administrator's
  token (the root token of `cairn dev`), 401 without one.

Every Prometheus answer is the text format 0.0.4 and carries the store's figures
(`cairn_store_*`), the service's request counts and latencies per matched route
(`cairn_http_*`, never a raw URI), and the service's own gauges.
"""

from __future__ import annotations

import re
import uuid

import hvac
import hvac.exceptions
import pytest
import requests

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def _samples(text: str) -> dict[str, float]:
    """`name{labels}` → value for every sample line of a Prometheus text answer."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples


def _check_prometheus(response, service: str, gauges: list[str]) -> dict[str, float]:
    """Asserts what every service's Prometheus answer carries; returns its samples."""
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == PROMETHEUS_CONTENT_TYPE
    text = response.text
    assert "# TYPE cairn_http_requests_total counter" in text, text
    assert "# TYPE cairn_http_request_duration_seconds histogram" in text, text
    samples = _samples(text)
    assert samples["cairn_store_commits_total"] > 0, text
    assert samples["cairn_store_commit_batch_size_count"] == samples["cairn_store_commits_total"]
    assert 'cairn_store_commit_duration_seconds_bucket{le="+Inf"}' in samples, text
    requests_seen = [name for name in samples if name.startswith("cairn_http_requests_total{")]
    assert requests_seen, text
    assert all(f'service="{service}"' in name for name in requests_seen), requests_seen
    for gauge in gauges:
        assert any(name == gauge or name.startswith(gauge + "{") for name in samples), (gauge, text)
    return samples


def _check_json_summary(summary: dict) -> None:
    assert set(summary) >= {"Timestamp", "Gauges", "Points", "Counters", "Samples"}, summary
    assert all({"Name", "Value", "Labels"} <= set(gauge) for gauge in summary["Gauges"]), summary
    assert all(
        {"Name", "Count", "Sum", "Min", "Max", "Mean", "Stddev", "Labels"} <= set(sample)
        for sample in summary["Counters"] + summary["Samples"]
    ), summary


# ---- secrets (Vault) ------------------------------------------------------------------------


def test_vault_sys_metrics_json_and_prometheus_through_hvac(vault):
    path = f"metrics-{uuid.uuid4().hex[:8]}"
    vault.secrets.kv.v2.create_or_update_secret(path=path, secret={"a": "b"})

    summary = vault.adapter.get("/v1/sys/metrics")
    assert isinstance(summary, dict), summary
    _check_json_summary(summary)
    assert any(gauge["Name"] == "cairn_secrets_sealed" and gauge["Value"] == 0 for gauge in summary["Gauges"])

    response = vault.adapter.get("/v1/sys/metrics", params={"format": "prometheus"})
    samples = _check_prometheus(response, "secrets", ["cairn_secrets_sealed", "cairn_secrets_leases"])
    assert samples["cairn_secrets_sealed"] == 0
    assert samples["cairn_secrets_tokens"] >= 1
    assert path not in response.text, "raw URIs are never labels"


def test_vault_sys_metrics_refuses_an_unknown_format(vault):
    with pytest.raises(hvac.exceptions.InvalidRequest):
        vault.adapter.get("/v1/sys/metrics", params={"format": "xml"})


def test_vault_sys_metrics_needs_read_on_sys_metrics(vault, cairn):
    suffix = uuid.uuid4().hex[:8]
    vault.sys.create_or_update_policy(name=f"scraper-{suffix}", policy='path "sys/metrics" { capabilities = ["read"] }')
    vault.sys.create_or_update_policy(name=f"other-{suffix}", policy='path "secret/*" { capabilities = ["read"] }')
    scraper = vault.auth.token.create(policies=[f"scraper-{suffix}"])["auth"]["client_token"]
    other = vault.auth.token.create(policies=[f"other-{suffix}"])["auth"]["client_token"]

    allowed = hvac.Client(url=cairn.urls["secrets"], token=scraper, timeout=10)
    denied = hvac.Client(url=cairn.urls["secrets"], token=other, timeout=10)
    anonymous = hvac.Client(url=cairn.urls["secrets"], timeout=10)
    try:
        response = allowed.adapter.get("/v1/sys/metrics", params={"format": "prometheus"})
        _check_prometheus(response, "secrets", ["cairn_secrets_tokens"])
        for client in (denied, anonymous):
            with pytest.raises(hvac.exceptions.Forbidden):
                client.adapter.get("/v1/sys/metrics")
    finally:
        for client in (allowed, denied, anonymous):
            client.adapter.close()


# ---- registry (Consul) ----------------------------------------------------------------------


def test_consul_agent_metrics_need_agent_read_with_acls_on(consul, registry_http):
    key = f"metrics/{uuid.uuid4().hex}"
    assert consul.kv.put(key, "v") is True

    response = registry_http.request("GET", "/v1/agent/metrics", params={"format": "prometheus"})
    samples = _check_prometheus(
        response,
        "registry",
        ["cairn_registry_nodes", "cairn_registry_services", "cairn_registry_checks", "cairn_registry_sessions"],
    )
    assert samples["cairn_registry_nodes"] >= 1
    assert samples['cairn_http_requests_total{service="registry",route="/v1/kv/{*key}",method="PUT",status="200"}'] >= 1
    assert key not in response.text, "raw URIs are never labels"

    summary = registry_http.request("GET", "/v1/agent/metrics")
    assert summary.status_code == 200 and summary.headers["Content-Type"] == "application/json"
    _check_json_summary(summary.json())

    refused = registry_http.request("GET", "/v1/agent/metrics", token="")
    assert refused.status_code == 403, refused.text


def test_consul_agent_metrics_are_open_on_plain_dev(cairn_open):
    base = cairn_open.urls["registry"]
    assert requests.get(base + "/v1/catalog/nodes", timeout=10).status_code == 200
    response = requests.get(base + "/v1/agent/metrics?format=prometheus", timeout=10)
    _check_prometheus(response, "registry", ["cairn_registry_checks"])


# ---- scheduler (Nomad) ----------------------------------------------------------------------


def test_nomad_metrics_through_python_nomad_and_prometheus(nomad, cairn):
    nomad.jobs.get_jobs()
    summary = nomad.metrics.get_metrics()
    _check_json_summary(summary)
    assert any(gauge["Name"] == "cairn_scheduler_jobs" for gauge in summary["Gauges"]), summary

    # Nomad's metrics need no token.
    response = requests.get(cairn.urls["scheduler"] + "/v1/metrics", params={"format": "prometheus"}, timeout=10)
    samples = _check_prometheus(
        response,
        "scheduler",
        ["cairn_scheduler_jobs", "cairn_scheduler_allocations", "cairn_scheduler_evaluations", "cairn_scheduler_nodes"],
    )
    assert samples['cairn_scheduler_nodes{status="ready"}'] >= 1, "cairn dev runs a client"
    assert samples['cairn_http_requests_total{service="scheduler",route="/v1/jobs",method="GET",status="200"}'] >= 1


def test_nomad_metrics_without_a_token_on_plain_dev(cairn_open):
    import nomad as python_nomad

    host, port = cairn_open.host_port("scheduler")
    client = python_nomad.Nomad(host=host, port=port, secure=False, timeout=10)
    _check_json_summary(client.metrics.get_metrics())


# ---- platform (TFE) -------------------------------------------------------------------------


def test_platform_metrics_for_the_site_administrator(tfe, cairn):
    list(tfe.organizations.list())
    url = cairn.urls["platform"] + "/api/v2/metrics"
    response = requests.get(url, headers={"Authorization": f"Bearer {cairn.root_token}"}, timeout=10)
    samples = _check_prometheus(
        response, "platform", ["cairn_platform_organizations", "cairn_platform_workspaces", "cairn_platform_runs"]
    )
    listed = 'cairn_http_requests_total{service="platform",route="/api/v2/organizations",method="GET",status="200"}'
    assert samples[listed] >= 1

    anonymous = requests.get(url, timeout=10)
    assert anonymous.status_code == 401, anonymous.text
    wrong = requests.get(url, headers={"Authorization": "Bearer not-a-token"}, timeout=10)
    assert wrong.status_code == 401, wrong.text
