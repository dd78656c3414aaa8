"""The pki secrets engine through hvac, unchanged: hvac's `secrets.pki` methods (generate_root,
create_or_update_role, generate_certificate, sign_certificate, read_ca_certificate,
read_certificate, list_certificates, revoke_certificate, read_crl, rotate_crl, the CRL and URL
configuration, generate_intermediate, sign_intermediate, set_signed_intermediate,
sign_verbatim, sign_self_issued, issuers) against `cairn dev --acl`, plus generic writes for
the per-issuer paths hvac has no method for. Every certificate is checked with the openssl
CLI.

Each scenario mounts pki at a path of its own (a random suffix), so scenarios are independent
of each other and of order within the one shared `cairn dev`.
"""

from __future__ import annotations

import secrets
import subprocess
import tempfile
from pathlib import Path

import hvac
import hvac.exceptions
import pytest
import requests


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


@pytest.fixture
def pki_mount(vault):
    path = _name("pki")
    vault.sys.enable_secrets_engine("pki", path=path, config={"max_lease_ttl": "87600h"})
    yield path
    vault.sys.disable_secrets_engine(path)


@pytest.fixture
def client_for(cairn):
    made = []

    def make(token: str) -> hvac.Client:
        client = hvac.Client(url=cairn.urls["secrets"], token=token, timeout=10)
        made.append(client)
        return client

    yield make
    for client in made:
        client.adapter.close()


@pytest.fixture
def workdir():
    with tempfile.TemporaryDirectory() as directory:
        yield Path(directory)


def openssl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, text=True, timeout=60)


def verify(workdir: Path, root: str, leaf: str, untrusted: list[str] = (), crl: str | None = None):
    (workdir / "root.pem").write_text(root)
    (workdir / "leaf.pem").write_text(leaf)
    args = ["verify", "-CAfile", str(workdir / "root.pem")]
    if untrusted:
        (workdir / "untrusted.pem").write_text("\n".join(untrusted))
        args += ["-untrusted", str(workdir / "untrusted.pem")]
    if crl is not None:
        (workdir / "crl.pem").write_text(crl)
        args += ["-crl_check", "-CRLfile", str(workdir / "crl.pem")]
    return openssl(*args, str(workdir / "leaf.pem"))


def text_of(workdir: Path, cert: str) -> str:
    (workdir / "text.pem").write_text(cert)
    out = openssl("x509", "-text", "-noout", "-in", str(workdir / "text.pem"))
    assert out.returncode == 0, out.stderr
    return out.stdout


def make_csr(workdir: Path, subject: str, *key_args: str) -> str:
    out = openssl(
        "req", "-new", "-nodes", "-subj", subject, *key_args,
        "-keyout", str(workdir / "csr.key"), "-out", str(workdir / "csr.pem"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return (workdir / "csr.pem").read_text()


def test_root_role_issue_list_read_revoke_and_crl_with_hvac(vault, pki_mount, workdir):
    pki = vault.secrets.pki
    root = pki.generate_root("internal", "Conformance Root", extra_params={"key_type": "ec", "ttl": "8760h"}, mount_point=pki_mount)
    ca = root["data"]["certificate"]
    assert pki.read_ca_certificate(mount_point=pki_mount) == ca
    assert pki.read_ca_certificate_chain(mount_point=pki_mount) == ca
    assert "CA:TRUE" in text_of(workdir, ca)

    assert pki.create_or_update_role(
        "web", {"allowed_domains": "example.com", "allow_subdomains": True, "key_type": "ec", "max_ttl": "72h"},
        mount_point=pki_mount,
    )  # fmt: skip
    role = pki.read_role("web", mount_point=pki_mount)["data"]
    assert role["allowed_domains"] == ["example.com"]
    assert role["key_bits"] == 256
    assert pki.list_roles(mount_point=pki_mount)["data"]["keys"] == ["web"]

    issued = pki.generate_certificate("web", "www.example.com", extra_params={"alt_names": "api.example.com", "ttl": "1h"}, mount_point=pki_mount)["data"]
    assert verify(workdir, ca, issued["certificate"]).returncode == 0
    text = text_of(workdir, issued["certificate"])
    assert "DNS:www.example.com, DNS:api.example.com" in text
    assert issued["ca_chain"] == [ca]
    assert issued["private_key_type"] == "ec"

    keys = pki.list_certificates(mount_point=pki_mount)["data"]["keys"]
    assert issued["serial_number"].replace(":", "-") in keys
    assert all(":" not in key for key in keys)
    fetched = pki.read_certificate(keys[0], mount_point=pki_mount)
    assert fetched["data"]["certificate"].startswith("-----BEGIN CERTIFICATE-----")
    assert pki.read_certificate(issued["serial_number"], mount_point=pki_mount)["data"]["certificate"] == issued["certificate"]

    revoked = pki.revoke_certificate(issued["serial_number"], mount_point=pki_mount)
    assert revoked["data"]["revocation_time"] > 0
    crl = pki.read_crl(mount_point=pki_mount)
    assert isinstance(crl, str) and "BEGIN X509 CRL" in crl
    (workdir / "crl.pem").write_text(crl)
    crl_text = openssl("crl", "-text", "-noout", "-in", str(workdir / "crl.pem")).stdout
    assert issued["serial_number"].replace(":", "").upper() in crl_text
    result = verify(workdir, ca, issued["certificate"], crl=crl)
    assert result.returncode != 0 and "certificate revoked" in result.stdout + result.stderr

    assert pki.rotate_crl(mount_point=pki_mount)
    assert pki.set_crl_configuration(expiry="48h", mount_point=pki_mount)
    assert pki.read_crl_configuration(mount_point=pki_mount)["data"]["expiry"] == "48h"
    assert pki.set_urls({"issuing_certificates": ["http://127.0.0.1:8200/v1/pki/ca"]}, mount_point=pki_mount)
    assert pki.read_urls(mount_point=pki_mount)["data"]["issuing_certificates"] == ["http://127.0.0.1:8200/v1/pki/ca"]
    later = pki.generate_certificate("web", "later.example.com", extra_params={"ttl": "1h"}, mount_point=pki_mount)["data"]
    assert "CA Issuers - URI:http://127.0.0.1:8200/v1/pki/ca" in text_of(workdir, later["certificate"])
    assert pki.tidy({"tidy_cert_store": True, "safety_buffer": "1h"}, mount_point=pki_mount)


def test_names_outside_the_role_and_pss_are_invalid_requests(vault, pki_mount):
    pki = vault.secrets.pki
    pki.generate_root("internal", "Root", extra_params={"key_type": "ec"}, mount_point=pki_mount)
    pki.create_or_update_role("web", {"allowed_domains": "example.com", "allow_subdomains": True}, mount_point=pki_mount)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="not allowed by this role"):
        pki.generate_certificate("web", "www.evil.com", mount_point=pki_mount)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="subject alternate name"):
        pki.generate_certificate("web", "a.example.com", extra_params={"alt_names": "b.evil.com"}, mount_point=pki_mount)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="use_pss"):
        pki.generate_certificate("web", "a.example.com", extra_params={"use_pss": True}, mount_point=pki_mount)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="unknown role"):
        pki.generate_certificate("nope", "a.example.com", mount_point=pki_mount)


def test_intermediate_generate_sign_set_signed_and_issue_through_the_chain(vault, workdir):
    pki = vault.secrets.pki
    root_mount, int_mount = _name("pki-root"), _name("pki-int")
    vault.sys.enable_secrets_engine("pki", path=root_mount)
    vault.sys.enable_secrets_engine("pki", path=int_mount)
    try:
        root = pki.generate_root("internal", "Root CA", extra_params={"key_type": "rsa"}, mount_point=root_mount)["data"]
        generated = pki.generate_intermediate("internal", "Intermediate CA", extra_params={"key_type": "ec", "key_bits": 384}, mount_point=int_mount)["data"]
        signed = pki.sign_intermediate(
            generated["csr"], "Intermediate CA",
            extra_params={"ttl": "100h", "permitted_dns_domains": "example.com", "max_path_length": 0},
            mount_point=root_mount,
        )["data"]  # fmt: skip
        int_text = text_of(workdir, signed["certificate"])
        assert "CA:TRUE, pathlen:0" in int_text
        assert "X509v3 Name Constraints: critical" in int_text
        assert signed["ca_chain"] == [signed["certificate"], root["certificate"]]
        assert pki.set_signed_intermediate(signed["certificate"], mount_point=int_mount)
        pki.create_or_update_role("web", {"allowed_domains": "example.com", "allow_subdomains": True, "key_type": "ec"}, mount_point=int_mount)
        leaf = pki.generate_certificate("web", "www.example.com", extra_params={"ttl": "1h"}, mount_point=int_mount)["data"]
        assert leaf["ca_chain"][0] == signed["certificate"]
        result = verify(workdir, root["certificate"], leaf["certificate"], untrusted=[signed["certificate"]])
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        vault.sys.disable_secrets_engine(root_mount)
        vault.sys.disable_secrets_engine(int_mount)


def test_openssl_csrs_are_signed_by_role_and_verbatim(vault, pki_mount, workdir):
    pki = vault.secrets.pki
    root = pki.generate_root("internal", "Root", extra_params={"key_type": "ec", "ttl": "8760h"}, mount_point=pki_mount)["data"]
    pki.create_or_update_role("web", {"allowed_domains": "example.com", "allow_subdomains": True, "key_type": "any"}, mount_point=pki_mount)
    csr = make_csr(workdir, "/CN=www.example.com", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384", "-sha256")
    signed = pki.sign_certificate("web", csr, "www.example.com", extra_params={"ttl": "1h"}, mount_point=pki_mount)["data"]
    assert "private_key" not in signed
    assert verify(workdir, root["certificate"], signed["certificate"]).returncode == 0
    assert "secp384r1" in text_of(workdir, signed["certificate"])
    csr2 = make_csr(workdir, "/O=Verbatim/CN=any name", "-newkey", "rsa:2048", "-addext", "subjectKeyIdentifier=hash")
    verbatim = pki.sign_verbatim(csr2, extra_params={"ttl": "1h"}, mount_point=pki_mount)["data"]
    assert "O = Verbatim, CN = any name" in text_of(workdir, verbatim["certificate"])
    assert verify(workdir, root["certificate"], verbatim["certificate"]).returncode == 0


def test_issuers_and_per_issuer_paths_through_generic_writes(vault, pki_mount, workdir):
    pki = vault.secrets.pki
    first = pki.generate_root("internal", "First", extra_params={"key_type": "ec", "issuer_name": "first"}, mount_point=pki_mount)["data"]
    second = pki.generate_root("internal", "Second", extra_params={"key_type": "ed25519", "issuer_name": "second"}, mount_point=pki_mount)["data"]
    listed = pki.list_issuers(mount_point=pki_mount)["data"]
    assert sorted(listed["keys"]) == sorted([first["issuer_id"], second["issuer_id"]])
    assert listed["key_info"][first["issuer_id"]]["is_default"] is True
    assert pki.read_issuer("second", mount_point=pki_mount)["data"]["issuer_id"] == second["issuer_id"]
    updated = pki.update_issuer("second", extra_params={"issuer_name": "second", "leaf_not_after_behavior": "truncate"}, mount_point=pki_mount)
    assert updated["data"]["leaf_not_after_behavior"] == "truncate"

    pki.create_or_update_role("web", {"allow_any_name": True, "key_type": "ec"}, mount_point=pki_mount)
    by_path = vault.write_data(f"{pki_mount}/issuer/second/issue/web", data={"common_name": "x.example.com", "ttl": "1h"})["data"]
    assert by_path["issuing_ca"] == second["certificate"]
    assert verify(workdir, second["certificate"], by_path["certificate"]).returncode == 0
    csr = make_csr(workdir, "/CN=y.example.com", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256")
    signed = vault.write_data(f"{pki_mount}/issuer/{second['issuer_id']}/sign/web", data={"csr": csr, "ttl": "1h"})["data"]
    assert verify(workdir, second["certificate"], signed["certificate"]).returncode == 0
    sub = vault.write_data(f"{pki_mount}/issuer/first/sign-intermediate", data={"csr": csr, "common_name": "Sub"})["data"]
    assert "CA:TRUE" in text_of(workdir, sub["certificate"])
    assert vault.read(f"{pki_mount}/issuer/first/json")["data"]["issuer_id"] == first["issuer_id"]
    crl = vault.read(f"{pki_mount}/issuer/first/crl")["data"]["crl"]
    assert "BEGIN X509 CRL" in crl
    resigned = vault.write_data(f"{pki_mount}/issuer/first/sign-self-issued", data={"certificate": second["certificate"]})["data"]
    assert verify(workdir, first["certificate"], resigned["certificate"]).returncode == 0
    assert vault.write_data(f"{pki_mount}/config/issuers", data={"default": "second"})["data"]["default"] == second["issuer_id"]
    assert pki.read_ca_certificate(mount_point=pki_mount) == second["certificate"]


def test_fetches_need_no_token_and_sign_self_issued_on_root_needs_sudo(vault, cairn, pki_mount, client_for):
    pki = vault.secrets.pki
    root = pki.generate_root("internal", "Root", extra_params={"key_type": "ec"}, mount_point=pki_mount)["data"]
    base = cairn.urls["secrets"]
    for path in ("ca/pem", "ca_chain", "crl/pem", f"cert/{root['serial_number']}", "issuer/default/pem"):
        answer = requests.get(f"{base}/v1/{pki_mount}/{path}", timeout=10)
        assert answer.status_code == 200, (path, answer.text)
    der = requests.get(f"{base}/v1/{pki_mount}/ca", timeout=10)
    assert der.headers["Content-Type"] == "application/pkix-cert"
    denied = requests.post(f"{base}/v1/{pki_mount}/root/generate/internal", json={"common_name": "x"}, timeout=10)
    assert denied.status_code == 403

    policy = _name("pki-signer")
    vault.sys.create_or_update_policy(policy, f'path "{pki_mount}/*" {{ capabilities = ["create", "update", "read"] }}')
    token = vault.auth.token.create(policies=[policy], ttl="10m")["auth"]["client_token"]
    limited = client_for(token)
    other = hvac.Client(url=base, token=vault.token, timeout=10)
    foreign_mount = _name("pki-foreign")
    other.sys.enable_secrets_engine("pki", path=foreign_mount)
    try:
        foreign = other.secrets.pki.generate_root("internal", "Foreign", mount_point=foreign_mount)["data"]
        with pytest.raises(hvac.exceptions.Forbidden):
            limited.secrets.pki.sign_self_issued(foreign["certificate"], mount_point=pki_mount)
        resigned = limited.write_data(f"{pki_mount}/issuer/default/sign-self-issued", data={"certificate": foreign["certificate"]})
        assert "BEGIN CERTIFICATE" in resigned["data"]["certificate"]
        assert vault.secrets.pki.sign_self_issued(foreign["certificate"], mount_point=pki_mount)["data"]["issuing_ca"] == root["certificate"]
    finally:
        other.sys.disable_secrets_engine(foreign_mount)
        other.adapter.close()


def test_leased_certificates_are_revoked_with_their_lease(vault, pki_mount):
    pki = vault.secrets.pki
    pki.generate_root("internal", "Root", extra_params={"key_type": "ec"}, mount_point=pki_mount)
    pki.create_or_update_role("leased", {"allow_any_name": True, "key_type": "ec", "generate_lease": True}, mount_point=pki_mount)
    issued = pki.generate_certificate("leased", "leased.example", extra_params={"ttl": "1h"}, mount_point=pki_mount)
    assert issued["lease_id"].startswith(f"{pki_mount}/issue/leased/")
    assert 3500 <= issued["lease_duration"] <= 3600
    vault.sys.revoke_lease(issued["lease_id"])
    serial = issued["data"]["serial_number"]
    assert pki.read_certificate(serial, mount_point=pki_mount)["data"]["revocation_time"] > 0
