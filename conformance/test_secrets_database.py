"""The database engine through hvac's database methods, against the real MariaDB and Redis on
127.0.0.1 (the `mysql` and `redis-cli` tools prove who can log in).

Every scenario mounts its own `database` engine and uses its own user names in the one shared
`cairn dev`; users it creates are dropped at the end.
"""

from __future__ import annotations

import secrets
import subprocess

import hvac.exceptions
import pytest


def _name(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(4)}"


def _mysql(user: str, password: str | None, sql: str = "SELECT 1") -> bool:
    args = ["mysql", "-h127.0.0.1", "-P3306", f"-u{user}", "-e", sql]
    if password:
        args.insert(4, f"-p{password}")
    return subprocess.run(args, capture_output=True, timeout=20).returncode == 0


def _redis_auth(user: str, password: str) -> bool:
    """Whether `user` authenticates and may read (redis-cli goes on as `default` after a failed
    AUTH, so its messages tell)."""
    out = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "--user", user, "--pass", password, "--no-auth-warning", "GET", "k"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    said = out.stdout + out.stderr
    return out.returncode == 0 and "AUTH failed" not in said and "NOPERM" not in said


@pytest.fixture
def mount(vault):
    path = _name("database-")
    vault.sys.enable_secrets_engine("database", path=path)
    yield path
    vault.sys.disable_secrets_engine(path)


def test_mysql_dynamic_credentials_log_in_until_the_lease_is_revoked(vault, mount):
    vault.secrets.database.configure(
        name="maria",
        plugin_name="mysql-database-plugin",
        allowed_roles=["reader"],
        connection_url="{{username}}:{{password}}@tcp(127.0.0.1:3306)/",
        username="root",
        password="",
        mount_point=mount,
    )
    conn = vault.secrets.database.read_connection("maria", mount_point=mount)["data"]
    assert conn["plugin_name"] == "mysql-database-plugin"
    assert conn["allowed_roles"] == ["reader"]
    assert "password" not in conn["connection_details"]
    assert vault.secrets.database.list_connections(mount_point=mount)["data"]["keys"] == ["maria"]

    vault.secrets.database.create_role(
        name="reader",
        db_name="maria",
        creation_statements=["CREATE USER '{{name}}'@'%' IDENTIFIED BY '{{password}}';"],
        default_ttl="1h",
        max_ttl="2h",
        mount_point=mount,
    )
    role = vault.secrets.database.read_role("reader", mount_point=mount)["data"]
    assert role["default_ttl"] == 3600 and role["max_ttl"] == 7200

    creds = vault.secrets.database.generate_credentials("reader", mount_point=mount)
    assert creds["lease_duration"] == 3600 and creds["renewable"] is True
    user, password = creds["data"]["username"], creds["data"]["password"]
    assert _mysql(user, password)
    assert not _mysql(user, "wrong-password")

    renewed = vault.sys.renew_lease(creds["lease_id"], increment=600)
    assert renewed["lease_duration"] == 600

    vault.sys.revoke_lease(creds["lease_id"])
    assert not _mysql(user, password)


def test_an_unreachable_database_is_a_400_when_configured(vault, mount):
    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        vault.secrets.database.configure(
            name="down",
            plugin_name="postgresql-database-plugin",
            connection_url="postgresql://postgres@127.0.0.1:1/test",
            mount_point=mount,
        )
    assert "error creating database object" in str(err.value)


def test_static_role_rotates_and_the_old_password_stops_working(vault, mount):
    user = _name("st")
    assert _mysql("root", None, f"CREATE USER '{user}'@'%' IDENTIFIED BY 'first-pw'")
    try:
        vault.secrets.database.configure(
            name="maria",
            plugin_name="mysql-database-plugin",
            allowed_roles="*",
            connection_url="root@tcp(127.0.0.1:3306)/",
            mount_point=mount,
        )
        vault.secrets.database.create_static_role(
            name="svc",
            db_name="maria",
            username=user,
            rotation_statements=[],
            rotation_period=3600,
            mount_point=mount,
        )
        assert not _mysql(user, "first-pw")
        creds = vault.secrets.database.get_static_credentials("svc", mount_point=mount)["data"]
        assert creds["username"] == user and creds["rotation_period"] == 3600
        assert 3590 <= creds["ttl"] <= 3600
        assert _mysql(user, creds["password"])

        vault.secrets.database.rotate_static_role_credentials("svc", mount_point=mount)
        after = vault.secrets.database.get_static_credentials("svc", mount_point=mount)["data"]
        assert after["password"] != creds["password"]
        assert not _mysql(user, creds["password"])
        assert _mysql(user, after["password"])

        vault.secrets.database.delete_static_role("svc", mount_point=mount)
        assert _mysql(user, after["password"]), "deleting the role leaves the user"
    finally:
        _mysql("root", None, f"DROP USER IF EXISTS '{user}'@'%'")


def test_redis_users_follow_a_password_policy(vault, mount):
    policy = _name("pp")
    vault.write(
        f"sys/policies/password/{policy}",
        policy='length = 24\nrule "charset" {\n  charset = "abcdef0123456789"\n  min-chars = 1\n}\n',
    )
    vault.secrets.database.configure(
        name="cache",
        plugin_name="redis-database-plugin",
        host="127.0.0.1",
        port=6379,
        allowed_roles="*",
        password_policy=policy,
        mount_point=mount,
    )
    vault.secrets.database.create_role(
        name="reader", db_name="cache", creation_statements=['["~*", "+@read"]'], mount_point=mount
    )
    creds = vault.secrets.database.generate_credentials("reader", mount_point=mount)
    password = creds["data"]["password"]
    assert len(password) == 24 and set(password) <= set("abcdef0123456789")
    assert _redis_auth(creds["data"]["username"], password)
    vault.sys.revoke_lease(creds["lease_id"])
    assert not _redis_auth(creds["data"]["username"], password)
    vault.delete(f"sys/policies/password/{policy}")
