"""Platform conformance: pytfe 1.5's site administration calls against `cairn dev`.

The `tfe` fixture carries the root token, a user token of the site administrator. Scenarios:

- SAML settings (`admin.saml_settings`): defaults, an update with a real certificate made by
  openssl, rotation keeping the previous certificate as `old_idp_cert`, `revoke_idp_cert`
  dropping it, and a malformed certificate refused as a validation error.
- SMTP settings (`admin.smtp_settings`): an update with `test_email_address` sends a real
  message through an aiosmtpd server this module starts on 127.0.0.1 (Debian's
  python3-aiosmtpd, which scripts/services installs) with an authenticator; the password
  never comes back; a wrong password is the spec's 401 (pytfe raises its AuthError) and
  changes nothing. SMTP is switched off again afterwards, as other scenarios invite users.
- Sentinel versions (`admin.sentinel_versions`, the spec's policy-engine versions at
  upstream's path): create with only version, url and sha (the server's defaults apply),
  read, list, update, delete, and the validation errors.

Raw HTTP (httpx) appears only to show that a bad token is refused with 401 before anything
is shown (the 404 for a valid non-administrator is covered by the crate's API tests).
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import httpx
import pytest
from pytfe.errors import AuthError, NotFound, TFEError
from pytfe.models import (
    SentinelVersionCreateOptions,
    SentinelVersionUpdateOptions,
)
from pytfe.models.admin_identity import (
    AdminSAMLSettingsUpdateOptions,
    AdminSMTPSettingsUpdateOptions,
    SMTPAuthType,
)

SMTP_SERVER = r'''
import os, sys
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

port, outdir = int(sys.argv[1]), sys.argv[2]

class Handler:
    async def handle_DATA(self, server, session, envelope):
        n = len(os.listdir(outdir))
        tmp = os.path.join(outdir, "%04d.tmp" % n)
        with open(tmp, "wb") as f:
            f.write(b"X-Rcpt: " + ",".join(envelope.rcpt_tos).encode() + b"\r\n")
            f.write(envelope.content)
        os.rename(tmp, os.path.join(outdir, "%04d.eml" % n))
        return "250 OK"

def check(server, session, envelope, mechanism, auth_data):
    ok = isinstance(auth_data, LoginPassword) and auth_data.login == b"mailer" \
        and auth_data.password == b"s3cret"
    return AuthResult(success=ok, handled=False)

controller = Controller(Handler(), hostname="127.0.0.1", port=port, authenticator=check,
                        auth_require_tls=False)
controller.start()
print("ready", flush=True)
sys.stdin.read()
controller.stop()
'''


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def smtp_server():
    """An aiosmtpd on 127.0.0.1 accepting mailer/s3cret; yields (port, maildir)."""
    maildir = Path(tempfile.mkdtemp(prefix="cairn-smtp-"))
    port = _free_port()
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-c", SMTP_SERVER, str(port), str(maildir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready", "aiosmtpd did not start (scripts/services)"
        yield port, maildir
    finally:
        proc.kill()
        proc.wait()


def _messages(maildir: Path) -> list[str]:
    return [p.read_text() for p in sorted(maildir.glob("*.eml"))]


def _certificate(common_name: str) -> str:
    with tempfile.TemporaryDirectory() as work:
        cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "30", "-subj", f"/CN={common_name}", "-keyout", key, "-out", cert],
            check=True,
            capture_output=True,
        )  # fmt: skip
        return Path(cert).read_text()


def test_saml_settings_rotate_and_revoke_the_identity_provider_certificate(tfe):
    settings = tfe.admin.saml_settings.read()
    assert settings.id == "saml"
    assert settings.attr_username == "Username"
    assert settings.site_admin_role == "site-admins"
    assert settings.sso_api_token_session_timeout == 1209600
    assert settings.acs_consumer_url.endswith("/users/saml/auth")

    first, second = _certificate("idp-one"), _certificate("idp-two")
    updated = tfe.admin.saml_settings.update(
        AdminSAMLSettingsUpdateOptions(
            enabled=True,
            idp_cert=first,
            sso_endpoint_url="https://idp.example.com/sso",
            slo_endpoint_url="https://idp.example.com/slo",
            attr_groups="groups",
        )
    )
    assert updated.enabled is True
    assert updated.idp_cert.strip() == first.strip()
    assert updated.old_idp_cert is None
    assert updated.attr_groups == "groups"

    rotated = tfe.admin.saml_settings.update(AdminSAMLSettingsUpdateOptions(idp_cert=second))
    assert rotated.idp_cert.strip() == second.strip()
    assert rotated.old_idp_cert.strip() == first.strip()

    revoked = tfe.admin.saml_settings.revoke_idp_cert()
    assert revoked.old_idp_cert is None
    assert revoked.idp_cert.strip() == second.strip()

    with pytest.raises(TFEError):
        tfe.admin.saml_settings.update(AdminSAMLSettingsUpdateOptions(idp_cert="not a certificate"))
    with pytest.raises(TFEError):
        tfe.admin.saml_settings.update(AdminSAMLSettingsUpdateOptions(sso_endpoint_url="http://plain.example.com"))
    assert tfe.admin.saml_settings.read().idp_cert.strip() == second.strip()
    tfe.admin.saml_settings.update(AdminSAMLSettingsUpdateOptions(enabled=False))


def test_smtp_settings_send_a_real_test_message_and_a_wrong_password_is_401(tfe, smtp_server):
    port, maildir = smtp_server
    try:
        updated = tfe.admin.smtp_settings.update(
            AdminSMTPSettingsUpdateOptions(
                enabled=True,
                host="127.0.0.1",
                port=port,
                sender="platform@conformance.test",
                auth=SMTPAuthType.LOGIN,
                username="mailer",
                password="s3cret",
                test_email_address="admin@conformance.test",
            )
        )
        assert updated.id == "smtp"
        assert updated.enabled is True
        assert updated.port == port
        assert updated.auth == SMTPAuthType.LOGIN
        assert updated.username == "mailer"
        messages = _messages(maildir)
        assert len(messages) == 1
        assert messages[0].startswith("X-Rcpt: admin@conformance.test")
        assert "From: platform@conformance.test" in messages[0]

        read = tfe.admin.smtp_settings.read()
        assert read.host == "127.0.0.1"
        assert "password" not in read.model_dump()

        with pytest.raises(AuthError) as refused:
            tfe.admin.smtp_settings.update(
                AdminSMTPSettingsUpdateOptions(password="wrong", test_email_address="admin@conformance.test")
            )
        assert refused.value.status == 401
        assert len(_messages(maildir)) == 1
        # The refused password was not stored: the right one still sends.
        tfe.admin.smtp_settings.update(AdminSMTPSettingsUpdateOptions(test_email_address="again@conformance.test"))
        assert len(_messages(maildir)) == 2
    finally:
        tfe.admin.smtp_settings.update(AdminSMTPSettingsUpdateOptions(enabled=False))


def test_sentinel_versions_crud_with_the_server_defaults(tfe):
    engine_version = f"0.{uuid.uuid4().int % 1000}.{uuid.uuid4().int % 1000}"
    sha = "ab" * 32
    created = tfe.admin.sentinel_versions.create(
        SentinelVersionCreateOptions(
            version=engine_version, url=f"https://releases.example.com/sentinel_{engine_version}.zip", sha=sha
        )
    )
    assert created.id.startswith("tool-")
    assert created.version == engine_version
    assert created.enabled is True
    assert created.official is False
    assert created.beta is False
    assert created.deprecated is False
    assert created.deprecated_reason is None
    assert created.usage == 0
    assert created.created_at
    assert created.archs[0].os == "linux"

    read = tfe.admin.sentinel_versions.read(created.id)
    assert read.sha == sha
    listed = {v.id: v for v in tfe.admin.sentinel_versions.list()}
    assert listed[created.id].version == engine_version

    updated = tfe.admin.sentinel_versions.update(
        created.id, SentinelVersionUpdateOptions(deprecated=True, deprecated_reason="superseded", beta=True)
    )
    assert updated.deprecated is True
    assert updated.deprecated_reason == "superseded"
    assert updated.beta is True
    assert updated.url == created.url

    with pytest.raises(TFEError) as taken:
        tfe.admin.sentinel_versions.create(
            SentinelVersionCreateOptions(version=engine_version, url="https://e.example.com/s.zip", sha=sha)
        )
    assert taken.value.status == 422
    with pytest.raises(TFEError) as bad_url:
        tfe.admin.sentinel_versions.create(
            SentinelVersionCreateOptions(version="9.9.9", url="http://plain.example.com/s.zip", sha=sha)
        )
    assert bad_url.value.status == 422
    with pytest.raises(TFEError) as bad_sha:
        tfe.admin.sentinel_versions.create(
            SentinelVersionCreateOptions(version="9.9.9", url="https://e.example.com/s.zip", sha="abc123")
        )
    assert bad_sha.value.status == 422

    official = tfe.admin.sentinel_versions.create(
        SentinelVersionCreateOptions(
            version=f"{engine_version}-official", url="https://e.example.com/o.zip", sha=sha, official=True
        )
    )
    with pytest.raises(TFEError) as refused:
        tfe.admin.sentinel_versions.delete(official.id)
    assert refused.value.status == 422

    tfe.admin.sentinel_versions.delete(created.id)
    with pytest.raises(NotFound):
        tfe.admin.sentinel_versions.read(created.id)


def test_admin_endpoints_refuse_a_bad_token(cairn):
    base = cairn.urls["platform"]
    for path in ("saml-settings", "smtp-settings", "sentinel-versions", "general-settings"):
        answer = httpx.get(f"{base}/api/v2/admin/{path}", headers={"Authorization": "Bearer nope"})
        assert answer.status_code == 401
