"""Cubbyhole and response wrapping through hvac, unchanged.

hvac 2.4.0 offers `sys.wrap`, `sys.unwrap`, `auth_cubbyhole`, and `wrap_ttl` on `read`,
`write` and `auth.token.create`; it has no method for `sys/wrapping/lookup` or
`sys/wrapping/rewrap`, so those go through `client.write` and `client.adapter`, as hvac users
call them. Every scenario uses its own names (a random suffix) in the one shared `cairn dev`.
"""

from __future__ import annotations

import secrets

import hvac
import hvac.exceptions
import pytest


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


@pytest.fixture
def client_for(cairn):
    """A factory of hvac clients carrying another token; closed at teardown."""
    made = []

    def make(token: str | None) -> hvac.Client:
        client = hvac.Client(url=cairn.urls["secrets"], token=token, timeout=10)
        made.append(client)
        return client

    yield make
    for client in made:
        client.adapter.close()


@pytest.fixture
def kv_mount(vault):
    path = _name("wrapped-kv")
    vault.sys.enable_secrets_engine("kv", path=path, options={"version": "1"})
    vault.write(f"{path}/app", password="hunter2")
    yield path
    vault.sys.disable_secrets_engine(path)


def _default_token(vault) -> str:
    """A fresh child token holding only the `default` policy (cubbyhole and unwrap)."""
    return vault.auth.token.create(policies=["default"], ttl="10m")["auth"]["client_token"]


def _assert_only_wrap_info(response: dict, ttl: int, creation_path: str) -> dict:
    info = response["wrap_info"]
    assert info["token"] and info["accessor"], response
    assert info["ttl"] == ttl, response
    assert info["creation_path"] == creation_path, response
    assert info["creation_time"].endswith("Z"), response
    assert response["data"] is None and response["auth"] is None, response
    return info


# ---- sys/wrapping -------------------------------------------------------------------------


def test_wrap_then_unwrap_once(vault):
    payload = {"user": "alice", "numbers": [1, 2, 3]}
    wrapped = vault.sys.wrap(payload=payload, ttl=60)
    info = _assert_only_wrap_info(wrapped, 60, "sys/wrapping/wrap")

    unwrapped = vault.sys.unwrap(token=info["token"])
    assert unwrapped["data"] == payload, unwrapped
    assert unwrapped["wrap_info"] is None, unwrapped

    with pytest.raises(hvac.exceptions.InvalidRequest) as second:
        vault.sys.unwrap(token=info["token"])
    assert "wrapping token is not valid or does not exist" in str(second.value)


def test_wrap_needs_a_wrap_ttl(vault):
    with pytest.raises(hvac.exceptions.InvalidRequest) as refused:
        vault.write("sys/wrapping/wrap", secret="x")
    assert "endpoint requires response wrapping to be used" in str(refused.value)


def test_lookup_is_unauthenticated_and_spends_nothing(vault, client_for):
    info = vault.sys.wrap(payload={"k": "v"}, ttl="90s")["wrap_info"]
    anonymous = client_for(None)
    looked = anonymous.adapter.post("/v1/sys/wrapping/lookup", json={"token": info["token"]})
    assert looked["data"] == {
        "creation_ttl": 90,
        "creation_time": info["creation_time"],
        "creation_path": "sys/wrapping/wrap",
    }, looked
    again = vault.write("sys/wrapping/lookup", token=info["token"])
    assert again["data"]["creation_ttl"] == 90, again
    assert vault.sys.unwrap(token=info["token"])["data"] == {"k": "v"}


def test_rewrap_moves_the_response_to_a_new_token(vault):
    first = vault.sys.wrap(payload={"k": "v"}, ttl=120)["wrap_info"]
    rewrapped = vault.write("sys/wrapping/rewrap", token=first["token"])
    second = _assert_only_wrap_info(rewrapped, 120, "sys/wrapping/wrap")
    assert second["token"] != first["token"]
    with pytest.raises(hvac.exceptions.InvalidRequest):
        vault.sys.unwrap(token=first["token"])
    assert vault.sys.unwrap(token=second["token"])["data"] == {"k": "v"}


# ---- wrapping any response ----------------------------------------------------------------


def test_kv_read_with_wrap_ttl_is_unwrapped_by_the_wrapping_token(vault, kv_mount, client_for):
    wrapped = vault.read(f"{kv_mount}/app", wrap_ttl="5m")
    info = _assert_only_wrap_info(wrapped, 300, f"{kv_mount}/app")

    holder = client_for(info["token"])
    unwrapped = holder.sys.unwrap()
    assert unwrapped["data"] == {"password": "hunter2"}, unwrapped
    with pytest.raises(hvac.exceptions.InvalidRequest):
        holder.sys.unwrap()


def test_kv_v2_read_with_the_wrap_header_through_the_adapter(vault, client_for):
    path = _name("wrapped")
    vault.secrets.kv.v2.create_or_update_secret(path=path, secret={"v2": "yes"})
    wrapped = vault.adapter.get(f"/v1/secret/data/{path}", wrap_ttl=60)
    info = _assert_only_wrap_info(wrapped, 60, f"secret/data/{path}")
    unwrapped = client_for(info["token"]).sys.unwrap()
    assert unwrapped["data"]["data"] == {"v2": "yes"}, unwrapped


def test_wrapped_token_create_and_auth_cubbyhole(vault, client_for):
    wrapped = vault.auth.token.create(policies=["default"], ttl="1h", wrap_ttl="2m")
    info = _assert_only_wrap_info(wrapped, 120, "auth/token/create")
    assert info["wrapped_accessor"], info

    client = client_for(None)
    login = client.auth_cubbyhole(info["token"])
    assert login["auth"]["accessor"] == info["wrapped_accessor"], login
    assert client.is_authenticated() is True
    assert client.auth.token.lookup_self()["data"]["accessor"] == info["wrapped_accessor"]


def test_a_wrapping_token_can_only_unwrap(vault, kv_mount, client_for):
    info = vault.sys.wrap(payload={"k": "v"}, ttl=60)["wrap_info"]
    holder = client_for(info["token"])
    with pytest.raises(hvac.exceptions.Forbidden):
        holder.read(f"{kv_mount}/app")
    with pytest.raises(hvac.exceptions.Forbidden):
        holder.auth.token.lookup_self()
    assert holder.sys.unwrap()["data"] == {"k": "v"}


def test_policy_wrapping_bounds(vault, kv_mount, client_for):
    policy = _name("wrapped-only")
    rules = f"""
path "{kv_mount}/*" {{
  capabilities = ["read"]
  min_wrapping_ttl = "1m"
  max_wrapping_ttl = "1h"
}}
"""
    vault.sys.create_or_update_acl_policy(name=policy, policy=rules)
    try:
        token = vault.auth.token.create(policies=[policy], ttl="10m")["auth"]["client_token"]
        reader = client_for(token)
        with pytest.raises(hvac.exceptions.Forbidden):
            reader.read(f"{kv_mount}/app")
        for outside in ("30s", "2h"):
            with pytest.raises(hvac.exceptions.Forbidden):
                reader.read(f"{kv_mount}/app", wrap_ttl=outside)
        wrapped = reader.read(f"{kv_mount}/app", wrap_ttl="5m")
        unwrapped = reader.sys.unwrap(token=wrapped["wrap_info"]["token"])
        assert unwrapped["data"] == {"password": "hunter2"}, unwrapped
    finally:
        vault.sys.delete_acl_policy(policy)


# ---- cubbyhole ----------------------------------------------------------------------------


def test_cubbyhole_is_mounted_as_vault_mounts_it(vault):
    mounts = vault.sys.list_mounted_secrets_engines()["data"]
    entry = mounts["cubbyhole/"]
    assert entry["type"] == "cubbyhole", entry
    assert entry["description"] == "per-token private secret storage", entry
    assert entry["local"] is True, entry
    with pytest.raises(hvac.exceptions.InvalidRequest):
        vault.sys.disable_secrets_engine("cubbyhole")


def test_cubbyhole_is_private_to_each_token(vault, client_for):
    name = _name("note")
    mine = client_for(_default_token(vault))
    theirs = client_for(_default_token(vault))

    response = mine.write(f"cubbyhole/{name}", secret="only mine")
    assert response.status_code == 204
    assert mine.read(f"cubbyhole/{name}")["data"] == {"secret": "only mine"}
    assert mine.list("cubbyhole")["data"]["keys"] == [name]

    assert theirs.read(f"cubbyhole/{name}") is None
    assert theirs.list("cubbyhole") is None

    mine.delete(f"cubbyhole/{name}")
    assert mine.read(f"cubbyhole/{name}") is None


def test_cubbyhole_goes_with_its_token(vault, client_for):
    client = client_for(_default_token(vault))
    client.write("cubbyhole/x", v="1")
    client.auth.token.revoke_self()
    assert client.is_authenticated() is False
    with pytest.raises(hvac.exceptions.Forbidden):
        client.read("cubbyhole/x")
