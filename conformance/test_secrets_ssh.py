"""The ssh secrets engine through hvac's `client.secrets.ssh`, unchanged, against `cairn dev --acl`.

Each scenario mounts its own `ssh` engine at a random path. Certificates are read back with
OpenSSH's `ssh-keygen -L`; dynamic keys are installed on an OpenSSH `sshd` the scenario starts on
a free port of 127.0.0.1 with its own configuration (scripts/services installs openssh-server
and openssh-client; without them the scenario fails, it never skips). The sshd logs in one
test account, `cairnssh`, created once if missing (these tests run as root).
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from pathlib import Path

import hvac
import hvac.exceptions
import pytest
import requests

TEST_USER = "cairnssh"


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def _tool(name: str) -> str:
    for directory in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        path = Path(directory) / name
        if path.exists():
            return str(path)
    pytest.fail(
        f"{name} is not installed: run scripts/services (it installs Debian's openssh-server and "
        "openssh-client)",
        pytrace=False,
    )


@pytest.fixture
def ssh_mount(vault):
    path = _name("ssh")
    vault.sys.enable_secrets_engine("ssh", path=path)
    yield path
    vault.sys.disable_secrets_engine(path)


@pytest.fixture
def anonymous(cairn):
    client = hvac.Client(url=cairn.urls["secrets"], token=None, timeout=10)
    yield client
    client.adapter.close()


def _keygen(directory: Path, kind: str = "ed25519") -> tuple[Path, str]:
    key = directory / f"id_{kind}_{secrets.token_hex(2)}"
    subprocess.run(
        [_tool("ssh-keygen"), "-q", "-N", "", "-t", kind, "-C", "conformance", "-f", str(key)],
        check=True,
    )
    return key, (key.parent / (key.name + ".pub")).read_text()


def _describe(directory: Path, signed_key: str) -> str:
    cert = directory / f"cert-{secrets.token_hex(2)}-cert.pub"
    cert.write_text(signed_key)
    out = subprocess.run(
        [_tool("ssh-keygen"), "-L", "-f", str(cert)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_otp_roles_credentials_and_single_use_verification(vault, anonymous, ssh_mount):
    ssh = vault.secrets.ssh
    role = _name("otp")
    created = ssh.create_role(
        name=role, key_type="otp", default_user="root", mount_point=ssh_mount
    )
    assert created.status_code == 204
    assert ssh.read_role(name=role, mount_point=ssh_mount)["data"] == {
        "allowed_users": "",
        "cidr_list": "",
        "default_user": "root",
        "exclude_cidr_list": "",
        "key_type": "otp",
        "port": 22,
    }
    assert ssh.list_roles(mount_point=ssh_mount)["data"] == {
        "key_info": {role: {"key_type": "otp"}},
        "keys": [role],
    }

    # No CIDR list: only a zero-address role gets credentials.
    with pytest.raises(hvac.exceptions.InvalidRequest, match="IP does not belong to role"):
        ssh.generate_ssh_credentials(name=role, ip="192.0.2.10", mount_point=ssh_mount)
    assert (
        ssh.configure_zeroaddress_roles(roles=role, mount_point=ssh_mount).status_code == 204
    )
    assert ssh.list_zeroaddress_roles(mount_point=ssh_mount)["data"] == {"roles": [role]}
    assert ssh.list_roles_by_ip(ip="192.0.2.10", mount_point=ssh_mount)["data"] == {
        "roles": [role]
    }

    creds = ssh.generate_ssh_credentials(name=role, ip="192.0.2.10", mount_point=ssh_mount)
    assert creds["lease_id"].startswith(f"{ssh_mount}/creds/{role}/"), creds
    assert creds["lease_duration"] > 0 and creds["renewable"] is False, creds
    data = creds["data"]
    assert data["key_type"] == "otp" and data["username"] == "root" and data["port"] == 22
    otp = data["key"]

    # verify is unauthenticated and works once.
    verified = ssh.verify_ssh_otp(otp=otp, mount_point=ssh_mount)
    assert verified["data"] == {"ip": "192.0.2.10", "username": "root", "role_name": role}
    with pytest.raises(hvac.exceptions.InvalidRequest, match="OTP not found"):
        anonymous.secrets.ssh.verify_ssh_otp(otp=otp, mount_point=ssh_mount)
    echo = anonymous.secrets.ssh.verify_ssh_otp(otp="verify-echo-request", mount_point=ssh_mount)
    assert echo["data"] == {"message": "verify-echo-response"}

    # A revoked lease takes its OTP with it.
    creds = ssh.generate_ssh_credentials(name=role, ip="192.0.2.10", mount_point=ssh_mount)
    vault.sys.revoke_lease(creds["lease_id"])
    with pytest.raises(hvac.exceptions.InvalidRequest, match="OTP not found"):
        anonymous.secrets.ssh.verify_ssh_otp(otp=creds["data"]["key"], mount_point=ssh_mount)

    # Credentials need a token; verify does not.
    with pytest.raises(hvac.exceptions.Forbidden):
        anonymous.secrets.ssh.generate_ssh_credentials(
            name=role, ip="192.0.2.10", mount_point=ssh_mount
        )

    assert ssh.delete_zeroaddress_role(mount_point=ssh_mount).status_code == 204
    assert ssh.delete_role(name=role, mount_point=ssh_mount).status_code == 204
    with pytest.raises(hvac.exceptions.InvalidPath):
        ssh.list_roles(mount_point=ssh_mount)


def test_a_generated_ca_signs_keys_that_ssh_keygen_reads(vault, cairn, ssh_mount, tmp_path):
    ssh = vault.secrets.ssh
    generated = ssh.submit_ca_information(mount_point=ssh_mount)
    public_key = generated["data"]["public_key"]
    assert public_key.startswith("ssh-rsa ") and public_key.endswith("\n")
    assert ssh.read_public_key(mount_point=ssh_mount)["data"]["public_key"] == public_key

    # The raw public key, unauthenticated, as sshd's TrustedUserCAKeys wants it.
    raw = requests.get(f"{cairn.urls['secrets']}/v1/{ssh_mount}/public_key", timeout=10)
    assert raw.status_code == 200
    assert raw.headers["Content-Type"].startswith("text/plain")
    assert raw.text == public_key

    role = _name("users")
    created = ssh.create_role(
        name=role,
        key_type="ca",
        allow_user_certificates=True,
        allowed_users="alice,bob",
        default_user="alice",
        allowed_extensions="permit-pty",
        default_extensions={"permit-pty": ""},
        allow_user_key_ids=True,
        ttl="1h",
        max_ttl="2h",
        algorithm_signer="rsa-sha2-512",
        mount_point=ssh_mount,
    )
    assert created.status_code == 204
    read = ssh.read_role(name=role, mount_point=ssh_mount)["data"]
    assert read["key_type"] == "ca" and read["ttl"] == 3600 and read["max_ttl"] == 7200

    _, user_public = _keygen(tmp_path)
    # hvac sends valid_principals="": Vault falls back to the role's default user.
    signed = ssh.sign_ssh_key(name=role, public_key=user_public, mount_point=ssh_mount)
    data = signed["data"]
    int(data["serial_number"], 16)
    text = _describe(tmp_path, data["signed_key"])
    assert "user certificate" in text and "alice" in text and "permit-pty" in text, text
    assert "(using rsa-sha2-512)" in text, text
    assert f'Serial: {int(data["serial_number"], 16)}' in text, text

    signed = ssh.sign_ssh_key(
        name=role,
        public_key=user_public,
        valid_principals="bob",
        key_id="deploy-42",
        ttl="30m",
        mount_point=ssh_mount,
    )
    text = _describe(tmp_path, signed["data"]["signed_key"])
    assert 'Key ID: "deploy-42"' in text and "bob" in text, text

    with pytest.raises(hvac.exceptions.InvalidRequest, match="eve is not a valid value"):
        ssh.sign_ssh_key(
            name=role, public_key=user_public, valid_principals="eve", mount_point=ssh_mount
        )
    with pytest.raises(hvac.exceptions.InvalidRequest, match="ttl is larger than maximum allowed 7200"):
        ssh.sign_ssh_key(name=role, public_key=user_public, ttl="3h", mount_point=ssh_mount)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="not on allowed list"):
        ssh.sign_ssh_key(
            name=role,
            public_key=user_public,
            extensions={"permit-X11-forwarding": ""},
            mount_point=ssh_mount,
        )

    assert ssh.delete_ca_information(mount_point=ssh_mount).status_code == 204
    with pytest.raises(hvac.exceptions.InvalidRequest, match="keys haven't been configured yet"):
        ssh.read_public_key(mount_point=ssh_mount)


def test_an_imported_ca_answers_204_and_signs_host_keys(vault, ssh_mount, tmp_path):
    ssh = vault.secrets.ssh
    ca_key, ca_public = _keygen(tmp_path)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="only one of public_key and private_key"):
        vault.adapter.post(f"/v1/{ssh_mount}/config/ca", json={"public_key": ca_public})
    imported = ssh.submit_ca_information(
        private_key=ca_key.read_text(),
        public_key=ca_public,
        generate_signing_key=False,
        mount_point=ssh_mount,
    )
    assert imported.status_code == 204
    stored = ssh.read_public_key(mount_point=ssh_mount)["data"]["public_key"]
    assert stored.split()[:2] == ca_public.split()[:2]

    role = _name("hosts")
    ssh.create_role(
        name=role,
        key_type="ca",
        allow_user_certificates="",
        allow_host_certificates=True,
        allowed_domains="example.com",
        allow_subdomains=True,
        mount_point=ssh_mount,
    )
    _, host_public = _keygen(tmp_path)
    signed = ssh.sign_ssh_key(
        name=role,
        public_key=host_public,
        cert_type="host",
        valid_principals="web.example.com",
        mount_point=ssh_mount,
    )
    text = _describe(tmp_path, signed["data"]["signed_key"])
    assert "host certificate" in text and "web.example.com" in text, text
    assert "(using ssh-ed25519)" in text, text
    with pytest.raises(hvac.exceptions.InvalidRequest, match="cert_type 'user' is not allowed"):
        ssh.sign_ssh_key(name=role, public_key=host_public, mount_point=ssh_mount)


def _ensure_test_user() -> None:
    if subprocess.run(["id", TEST_USER], capture_output=True).returncode != 0:
        done = subprocess.run(
            [_tool("useradd"), "-m", "-d", f"/home/{TEST_USER}", "-s", "/bin/sh", "-p", "*", TEST_USER],
            capture_output=True,
            text=True,
        )
        assert done.returncode in (0, 9), done.stderr
    subprocess.run([_tool("usermod"), "-p", "*", TEST_USER], capture_output=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def sshd(tmp_path):
    """An OpenSSH server on 127.0.0.1 that trusts the file `root_keys` for root."""
    binary = _tool("sshd")
    _ensure_test_user()
    os.makedirs("/run/sshd", exist_ok=True)
    host_key = tmp_path / "host_ed25519"
    subprocess.run(
        [_tool("ssh-keygen"), "-q", "-N", "", "-t", "ed25519", "-f", str(host_key)], check=True
    )
    root_keys = tmp_path / "root_keys"
    root_keys.write_text("")
    port = _free_port()
    config = tmp_path / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile none\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        f"AuthorizedKeysFile {root_keys} /home/%u/.ssh/authorized_keys\nLogLevel VERBOSE\n"
    )
    log = tmp_path / "sshd.log"
    with log.open("w") as out:
        proc = subprocess.Popen([binary, "-D", "-e", "-f", str(config)], stderr=out)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    yield {"port": port, "root_keys": root_keys, "log": log}
    proc.terminate()
    proc.wait(10)


def _login(port: int, key: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            _tool("ssh"), "-F", "/dev/null", "-T", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-i", str(key), "-p", str(port), f"{TEST_USER}@127.0.0.1",
            "echo hello",
        ],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"},
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_dynamic_keys_are_installed_on_the_host_and_revoked_with_their_lease(
    vault, ssh_mount, sshd, tmp_path
):
    ssh = vault.secrets.ssh
    admin_key, admin_public = _keygen(tmp_path)
    sshd["root_keys"].write_text(admin_public)
    assert (
        ssh.create_or_update_key(
            name="admin", key=admin_key.read_text(), mount_point=ssh_mount
        ).status_code
        == 204
    )
    role = _name("dyn")
    created = ssh.create_role(
        name=role,
        key_type="dynamic",
        key="admin",
        admin_user="root",
        default_user=TEST_USER,
        cidr_list="127.0.0.0/8",
        port=sshd["port"],
        mount_point=ssh_mount,
    )
    assert created.status_code == 204
    read = ssh.read_role(name=role, mount_point=ssh_mount)["data"]
    assert read["key_bits"] == 1024 and read["install_script"].startswith("#!/bin/sh")

    creds = ssh.generate_ssh_credentials(name=role, ip="127.0.0.1", mount_point=ssh_mount)
    assert creds["lease_id"].startswith(f"{ssh_mount}/creds/{role}/"), creds
    assert creds["renewable"] is True
    data = creds["data"]
    assert data["key_type"] == "dynamic" and data["username"] == TEST_USER
    key_file = tmp_path / "dynamic_key"
    key_file.write_text(data["key"])
    key_file.chmod(0o600)
    login = _login(sshd["port"], key_file)
    assert login.returncode == 0, login.stderr + sshd["log"].read_text()
    assert login.stdout.strip() == "hello"

    renewed = vault.sys.renew_lease(creds["lease_id"], increment=600)
    assert renewed["lease_id"] == creds["lease_id"]

    vault.sys.revoke_lease(creds["lease_id"])
    assert _login(sshd["port"], key_file).returncode != 0

    assert ssh.delete_key(name="admin", mount_point=ssh_mount).status_code == 204
