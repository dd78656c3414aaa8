"""`cairn dev` as a drop-in for upstream's dev agents (issue 11, points 1, 2 and 6).

`consul agent -dev` and `nomad agent -dev` run with ACLs off, and scripts written against
them send no token: py-consul and python-nomad with no token work against plain `cairn dev`
(the `cairn_open` fixture), and `cairn dev --acl` (the `cairn` fixture) refuses the very same
requests. The banner's environment lines, printed again by `cairn dev --env`, are what the
clients read: a client built with no arguments at all finds the server through them.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from conftest import _cairn_bin


def _consul(cairn, token=None):
    import consul as py_consul

    host, port = cairn.host_port("registry")
    return py_consul.Consul(host=host, port=port, token=token, scheme="http")


def _nomad(cairn, token=None):
    import nomad as python_nomad

    host, port = cairn.host_port("scheduler")
    return python_nomad.Nomad(host=host, port=port, token=token, secure=False, timeout=10)


def _job(job_id: str) -> dict:
    return {
        "Job": {
            "ID": job_id,
            "Name": job_id,
            "Type": "batch",
            "Datacenters": ["dc1"],
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": 1,
                    "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}}],
                }
            ],
        }
    }


def test_py_consul_needs_no_token_against_plain_dev(cairn_open):
    consul = _consul(cairn_open)
    key = f"dev-open/{uuid.uuid4().hex}"
    assert consul.kv.put(key, "bar") is True
    _, item = consul.kv.get(key)
    assert item["Value"] == b"bar"
    # py-consul sends no token on agent.self() even when given one.
    assert consul.agent.self()["Config"]["NodeName"]
    session = consul.session.create(ttl=30)
    assert consul.kv.put(key, "locked", acquire=session) is True
    assert consul.session.destroy(session) is True


def test_python_nomad_needs_no_token_against_plain_dev(cairn_open):
    nomad = _nomad(cairn_open)
    job_id = f"dev-open-{uuid.uuid4().hex[:8]}"
    registered = nomad.jobs.register_job(_job(job_id))
    assert registered["EvalID"]
    assert any(job["ID"] == job_id for job in nomad.jobs.get_jobs())
    assert nomad.job.get_job(job_id)["ID"] == job_id
    nomad.job.deregister_job(job_id, purge=True)


def test_dev_with_acl_refuses_the_same_requests(cairn):
    import consul as py_consul
    from nomad.api.exceptions import URLNotAuthorizedNomadException

    consul = _consul(cairn)
    with pytest.raises(py_consul.ACLPermissionDenied):
        consul.kv.put(f"dev-acl/{uuid.uuid4().hex}", "bar")
    with pytest.raises(py_consul.ACLPermissionDenied):
        consul.agent.self()
    with pytest.raises(py_consul.ACLPermissionDenied):
        consul.session.create(ttl=30)
    nomad = _nomad(cairn)
    with pytest.raises(URLNotAuthorizedNomadException):
        nomad.jobs.get_jobs()
    with pytest.raises(URLNotAuthorizedNomadException):
        nomad.jobs.register_job(_job(f"dev-acl-{uuid.uuid4().hex[:8]}"))
    # ... and the root token is the management token of both.
    assert _consul(cairn, cairn.root_token).kv.put(f"dev-acl/{uuid.uuid4().hex}", "bar") is True
    assert isinstance(_nomad(cairn, cairn.root_token).jobs.get_jobs(), list)


def _dev_env(cairn) -> dict[str, str]:
    """`cairn dev --env --data-dir DIR`, parsed."""
    out = subprocess.run(
        [str(_cairn_bin()), "dev", "--env", "--data-dir", cairn.data_dir],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    ).stdout
    env = {}
    for line in out.splitlines():
        assert line.startswith("export "), out
        name, _, value = line[len("export ") :].partition("=")
        env[name] = value.strip("'")
    return env


def test_env_lines_lead_unconfigured_clients_to_dev(cairn_open, monkeypatch):
    env = _dev_env(cairn_open)
    assert env["VAULT_ADDR"] == cairn_open.urls["secrets"]
    assert env["VAULT_TOKEN"] == cairn_open.root_token
    assert env["NOMAD_ADDR"] == cairn_open.urls["scheduler"]
    assert env["TFE_ADDRESS"] == cairn_open.urls["platform"]
    assert env["TFE_TOKEN"] == cairn_open.root_token
    assert "CONSUL_HTTP_TOKEN" not in env and "NOMAD_TOKEN" not in env, "ACLs are off"
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    import consul as py_consul
    import hvac
    import nomad as python_nomad

    key = f"dev-env/{uuid.uuid4().hex}"
    assert py_consul.Consul().kv.put(key, "from-env") is True
    assert isinstance(python_nomad.Nomad(timeout=10).jobs.get_jobs(), list)
    vault = hvac.Client()
    assert vault.is_authenticated()
    vault.adapter.close()


def test_env_lines_with_acl_carry_the_consul_and_nomad_tokens(cairn):
    env = _dev_env(cairn)
    assert env["CONSUL_HTTP_TOKEN"] == cairn.root_token
    assert env["NOMAD_TOKEN"] == cairn.root_token
