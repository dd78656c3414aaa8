"""The directory-account engine (mount type `ad`) through hvac.s activedirectory methods, and
the library through hvac's generic writes (hvac has no library helpers), against the real
OpenLDAP of scripts/services on 127.0.0.1:389 (`ldapwhoami` proves which passwords bind).

Every scenario mounts its own `ad` engine (schema `openldap`) and makes its own
`ou=cairn-ad-<random>` with its own accounts, removed at the end.
"""

from __future__ import annotations

import secrets
import subprocess

import hvac
import hvac.exceptions
import pytest

URL = "ldap://127.0.0.1:389"
BASE = "dc=example,dc=org"
ADMIN = f"cn=admin,{BASE}"
ADMIN_PW = "admin"


def _ldap(tool: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool, "-x", "-H", URL, *args], input=stdin, capture_output=True, text=True, timeout=20
    )


def _binds(dn: str, password: str) -> bool:
    return _ldap("ldapwhoami", "-D", dn, "-w", password).returncode == 0


class Tree:
    """A throwaway subtree with inetOrgPerson accounts."""

    def __init__(self) -> None:
        name = f"cairn-ad-{secrets.token_hex(5)}"
        self.ou = f"ou={name},{BASE}"
        self.dns: list[str] = []
        ldif = f"dn: {self.ou}\nobjectClass: organizationalUnit\nou: {name}\n"
        out = _ldap("ldapadd", "-D", ADMIN, "-w", ADMIN_PW, stdin=ldif)
        assert out.returncode == 0, out.stderr

    def add_user(self, cn: str, password: str) -> str:
        dn = f"cn={cn},{self.ou}"
        ldif = f"dn: {dn}\nobjectClass: inetOrgPerson\ncn: {cn}\nsn: {cn}\nuserPassword: {password}\n"
        out = _ldap("ldapadd", "-D", ADMIN, "-w", ADMIN_PW, stdin=ldif)
        assert out.returncode == 0, out.stderr
        self.dns.append(dn)
        return dn

    def remove(self) -> None:
        for dn in [*self.dns, self.ou]:
            _ldap("ldapdelete", "-D", ADMIN, "-w", ADMIN_PW, dn)


@pytest.fixture
def tree():
    made = Tree()
    yield made
    made.remove()


@pytest.fixture
def mount(vault, tree):
    path = f"ad-{secrets.token_hex(4)}"
    vault.sys.enable_secrets_engine("ad", path=path)
    vault.secrets.activedirectory.configure(
        binddn=ADMIN,
        bindpass=ADMIN_PW,
        url=URL,
        userdn=tree.ou,
        ttl="1h",
        max_ttl="2h",
        schema="openldap",
        mount_point=path,
    )
    yield path
    vault.sys.disable_secrets_engine(path)


def test_configure_and_read_config_without_the_bind_password(vault, mount, tree):
    config = vault.secrets.activedirectory.read_config(mount_point=mount)["data"]
    assert "bindpass" not in config
    assert config["binddn"] == ADMIN
    assert config["userdn"] == tree.ou
    assert config["url"] == URL
    assert config["ttl"] == 3600 and config["max_ttl"] == 7200
    assert config["length"] == 64
    assert config["last_rotation_tolerance"] == 5
    assert config["request_timeout"] == 90
    assert config["schema"] == "openldap"

    # Validation failures are 400s (upstream answers several of them with a 500).
    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        vault.secrets.activedirectory.configure(
            binddn=ADMIN, bindpass=ADMIN_PW, password_policy="p", length=20, mount_point=mount
        )
    assert "cannot set password_policy and either length or formatter" in str(err.value)
    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        vault.secrets.activedirectory.configure(
            binddn=ADMIN, bindpass=ADMIN_PW, ttl=100, max_ttl=10, mount_point=mount
        )
    assert "ttl must be smaller than or equal to max_ttl" in str(err.value)


def test_role_credentials_bind_and_rotation_retires_the_old_password(vault, mount, tree):
    dn = tree.add_user("svc", "initial-secret")
    ad = vault.secrets.activedirectory
    response = ad.create_or_update_role("app", service_account_name="svc", ttl="30m", mount_point=mount)
    assert response.status_code == 204
    role = ad.read_role("app", mount_point=mount)["data"]
    assert role["service_account_name"] == "svc" and role["ttl"] == 1800
    assert ad.list_roles(mount_point=mount)["data"]["keys"] == ["app"]

    creds = ad.generate_credentials("app", mount_point=mount)["data"]
    assert creds["username"] == "svc"
    first = creds["current_password"]
    assert first.startswith("?@09AZ") and len(first) == 64
    assert _binds(dn, first)
    assert not _binds(dn, "initial-secret")
    assert ad.generate_credentials("app", mount_point=mount)["data"]["current_password"] == first

    # Rotation through hvac's LDAP class on the ad mount, as its docs suggest.
    vault.secrets.ldap.rotate_static_credentials("app", mount_point=mount)
    creds = ad.generate_credentials("app", mount_point=mount)["data"]
    assert creds["last_password"] == first
    assert creds["current_password"] != first
    assert _binds(dn, creds["current_password"])
    assert not _binds(dn, first)

    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        ad.create_or_update_role("ghost", service_account_name="nobody", mount_point=mount)
    assert "unable to find service account named nobody" in str(err.value)
    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        ad.create_or_update_role("long", service_account_name="svc", ttl="3h", mount_point=mount)
    assert "is over the max ttl" in str(err.value)

    assert ad.delete_role("app", mount_point=mount).status_code == 204
    with pytest.raises(hvac.exceptions.InvalidPath):
        ad.read_role("app", mount_point=mount)


def test_rotate_root_changes_the_bind_password(vault, tree):
    binder = tree.add_user("binder", "bind-secret")
    tree.add_user("svc", "initial-secret")
    path = f"ad-{secrets.token_hex(4)}"
    vault.sys.enable_secrets_engine("ad", path=path)
    try:
        vault.secrets.activedirectory.configure(
            binddn=binder, bindpass="bind-secret", url=URL, userdn=tree.ou, schema="openldap", mount_point=path
        )
        assert vault.secrets.ldap.rotate_root(mount_point=path).status_code == 204
        assert not _binds(binder, "bind-secret")
        # The engine binds with the new password to find accounts.
        vault.secrets.activedirectory.create_or_update_role("app", service_account_name="svc", mount_point=path)
    finally:
        vault.sys.disable_secrets_engine(path)


def test_library_check_out_check_in_and_status(vault, mount, tree, cairn):
    dn1 = tree.add_user("lib1", "initial-1")
    dn2 = tree.add_user("lib2", "initial-2")
    resp = vault.write(
        f"{mount}/library/team", service_account_names=["lib1", "lib2"], ttl="10h", max_ttl="20h"
    )
    assert resp.status_code == 204
    assert not _binds(dn1, "initial-1"), "joining a set rotates the password"
    assert vault.read(f"{mount}/library/team")["data"] == {
        "service_account_names": ["lib1", "lib2"],
        "ttl": 36000,
        "max_ttl": 72000,
        "disable_check_in_enforcement": False,
    }
    assert vault.list(f"{mount}/library")["data"]["keys"] == ["team"]

    # A second caller with its own token.
    other_token = vault.auth.token.create(policies=["root"])["auth"]["client_token"]
    other = hvac.Client(url=cairn.urls["secrets"], token=other_token, timeout=10)

    out = vault.write(f"{mount}/library/team/check-out", ttl="1h")
    assert out["renewable"] is True and out["lease_duration"] == 3600
    name, password = out["data"]["service_account_name"], out["data"]["password"]
    assert name == "lib1" and _binds(dn1, password)
    out2 = other.write(f"{mount}/library/team/check-out")
    assert out2["lease_duration"] == 36000 and out2["data"]["service_account_name"] == "lib2"

    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        vault.write(f"{mount}/library/team/check-out")
    assert "No service accounts available for check-out." in str(err.value)

    status = vault.read(f"{mount}/library/team/status")["data"]
    assert status["lib1"]["available"] is False
    root_accessor = vault.auth.token.lookup_self()["data"]["accessor"]
    assert status["lib1"]["borrower_client_token"] == root_accessor

    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        other.write(f"{mount}/library/team/check-in", service_account_names=["lib1"])
    assert "wasn't checked out by the caller" in str(err.value)
    checked_in = vault.write(f"{mount}/library/team/check-in")["data"]["check_ins"]
    assert checked_in == ["lib1"]
    assert not _binds(dn1, password), "check-in rotated the password"

    renewed = vault.sys.renew_lease(out2["lease_id"], increment=60)
    assert renewed["lease_duration"] > 0
    # Revoking the lease checks the account in.
    vault.sys.revoke_lease(out2["lease_id"])
    assert vault.read(f"{mount}/library/team/status")["data"]["lib2"] == {"available": True}
    assert not _binds(dn2, out2["data"]["password"])

    # The manage path checks in for anyone.
    out3 = other.write(f"{mount}/library/team/check-out")
    forced = vault.write(f"{mount}/library/manage/team/check-in")["data"]["check_ins"]
    assert forced == [out3["data"]["service_account_name"]]

    vault.delete(f"{mount}/library/team")
    assert vault.read(f"{mount}/library/team") is None
