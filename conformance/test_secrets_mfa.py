"""TOTP MFA methods (`sys/mfa/method/totp`) through hvac, as a user would drive them.

hvac 2.4.0 has no TOTP-MFA helper (no `sys/mfa` nor `identity/mfa` methods), so the method
CRUD and generate go through `client.write`, `client.read`, `client.list` and `client.delete`;
a userpass login (`client.auth.userpass`) gives the user an entity, and the `X-Vault-MFA`
header rides on `client.adapter.get(..., headers=...)`, the way hvac users add a header.
Codes are computed here from the key in the returned otpauth URL (RFC 6238 with the standard
library), so the server's codes are checked against an independent implementation. Every
scenario uses its own names in the one shared `cairn dev --acl`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import struct
import time
import urllib.parse

import hvac
import hvac.exceptions
import pytest


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def _totp(url: str, at: float | None = None) -> str:
    """The code of the otpauth URL's key at `at` (now by default), as RFC 6238."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    secret = query["secret"][0]
    key = base64.b32decode(secret + "=" * (-len(secret) % 8))
    digits = int(query["digits"][0])
    period = int(query["period"][0])
    digest = {"SHA1": hashlib.sha1, "SHA256": hashlib.sha256, "SHA512": hashlib.sha512}[
        query["algorithm"][0]
    ]
    counter = int((time.time() if at is None else at) // period)
    mac = hmac.new(key, struct.pack(">Q", counter), digest).digest()
    offset = mac[-1] & 0x0F
    value = struct.unpack(">I", mac[offset : offset + 4])[0] & 0x7FFFFFFF
    return str(value % 10**digits).zfill(digits)


def _png_size(barcode: str) -> tuple[int, int]:
    png = base64.b64decode(barcode)
    assert png[:8] == b"\x89PNG\r\n\x1a\n", png[:8]
    return struct.unpack(">II", png[16:24])


@pytest.fixture
def userpass(vault):
    path = _name("up")
    vault.sys.enable_auth_method("userpass", path=path)
    yield path
    vault.sys.disable_auth_method(path)


@pytest.fixture
def method(vault):
    name = _name("totp")
    yield name
    vault.delete(f"sys/mfa/method/totp/{name}")


def _login(cairn, vault, mount: str, policies: list[str]) -> tuple[hvac.Client, str]:
    user = _name("user")
    vault.auth.userpass.create_or_update_user(
        username=user, password="pw", policies=policies, mount_point=mount
    )
    client = hvac.Client(url=cairn.urls["secrets"], timeout=10)
    auth = client.auth.userpass.login(username=user, password="pw", mount_point=mount)["auth"]
    assert auth["entity_id"], auth
    return client, auth["entity_id"]


def test_method_crud_with_vaults_defaults(vault, method):
    response = vault.write(f"sys/mfa/method/totp/{method}", issuer="vault")
    assert response.status_code == 204

    data = vault.read(f"sys/mfa/method/totp/{method}")["data"]
    assert data.pop("id")
    assert data == {
        "algorithm": "SHA1",
        "digits": 6,
        "issuer": "vault",
        "key_size": 20,
        "max_validation_attempts": 5,
        "name": method,
        "period": 30,
        "qr_size": 200,
        "skew": 1,
        "type": "totp",
    }
    assert method in vault.list("sys/mfa/method/totp")["data"]["keys"]

    for fields, message in [
        ({}, "issuer must be set"),
        ({"issuer": "v", "digits": 7}, "digits can only be 6 or 8"),
        ({"issuer": "v", "skew": 2}, "skew must be 0 or 1"),
        ({"issuer": "v", "algorithm": "MD5"}, "unrecognized algorithm"),
    ]:
        with pytest.raises(hvac.exceptions.InvalidRequest) as refused:
            vault.write(f"sys/mfa/method/totp/{method}-bad", **fields)
        assert message in str(refused.value)

    vault.delete(f"sys/mfa/method/totp/{method}")
    assert vault.read(f"sys/mfa/method/totp/{method}") is None


def test_generate_for_the_logged_in_user_and_admin_destroy(cairn, vault, userpass, method):
    vault.write(f"sys/mfa/method/totp/{method}", issuer="vault", algorithm="SHA256")
    enroll = _name("enroll")
    vault.sys.create_or_update_acl_policy(
        name=enroll,
        policy=f'path "sys/mfa/method/totp/{method}/generate" {{ capabilities = ["read"] }}',
    )
    user, entity = _login(cairn, vault, userpass, [enroll])

    generated = user.read(f"sys/mfa/method/totp/{method}/generate")["data"]
    url = generated["url"]
    assert url.startswith(
        f"otpauth://totp/vault:{entity}?algorithm=SHA256&digits=6&issuer=vault&period=30&secret="
    ), url
    assert _png_size(generated["barcode"]) == (200, 200)

    again = user.read(f"sys/mfa/method/totp/{method}/generate")
    assert again["data"] is None
    assert again["warnings"] == [f'Entity already has a secret for MFA method "{method}"']

    # The root token has no entity.
    with pytest.raises(hvac.exceptions.InvalidRequest) as refused:
        vault.read(f"sys/mfa/method/totp/{method}/generate")
    assert "missing entityID" in str(refused.value)

    # admin-destroy (the docs' path), then admin-generate makes a new key.
    assert vault.write(f"sys/mfa/method/{method}/admin-destroy", entity_id=entity).status_code == 204
    fresh = vault.write(f"sys/mfa/method/totp/{method}/admin-generate", entity_id=entity)["data"]
    assert fresh["url"] != url
    with pytest.raises(hvac.exceptions.InvalidRequest) as unknown:
        vault.write(f"sys/mfa/method/totp/{method}/admin-generate", entity_id="nope")
    assert "invalid entity ID" in str(unknown.value)
    user.adapter.close()


def test_a_policy_with_mfa_methods_wants_a_fresh_code(cairn, vault, userpass, method):
    vault.write(f"sys/mfa/method/totp/{method}", issuer="vault", max_validation_attempts=3)
    mount = _name("mfa-kv")
    vault.sys.enable_secrets_engine("kv", path=mount, options={"version": "1"})
    vault.write(f"{mount}/guarded", value="behind-mfa")
    policy = _name("guarded")
    vault.sys.create_or_update_acl_policy(
        name=policy,
        policy=f'''
path "{mount}/guarded" {{
  capabilities = ["read"]
  mfa_methods  = ["{method}"]
}}
''',
    )
    user, entity = _login(cairn, vault, userpass, [policy])
    url = vault.write(f"sys/mfa/method/totp/{method}/admin-generate", entity_id=entity)["data"]["url"]

    def read(mfa: str | None):
        headers = {"X-Vault-MFA": mfa} if mfa is not None else {}
        return user.adapter.get(f"/v1/{mount}/guarded", headers=headers)

    with pytest.raises(hvac.exceptions.Forbidden) as missing:
        read(None)
    assert "MFA credentials not supplied" in str(missing.value)

    # Stay clear of a period boundary so the code does not roll over mid-test.
    if time.time() % 30 > 25:
        time.sleep(30 - time.time() % 30 + 0.5)
    code = _totp(url)
    assert read(f"{method}:{code}")["data"] == {"value": "behind-mfa"}

    with pytest.raises(hvac.exceptions.Forbidden) as replayed:
        read(f"{method}:{code}")
    assert "code already used" in str(replayed.value)

    wrong = next(c for c in (_totp(url, time.time() + 3600 * i) for i in range(1, 50)) if c != code)
    for _ in range(3):
        with pytest.raises(hvac.exceptions.Forbidden) as failed:
            read(f"{method}:{wrong}")
        assert "failed to validate TOTP passcode" in str(failed.value)
    with pytest.raises(hvac.exceptions.Forbidden) as locked:
        read(f"{method}:{wrong}")
    assert "maximum TOTP validation attempts 4 exceeded the allowed attempts 3" in str(locked.value)

    user.adapter.close()
    vault.sys.disable_secrets_engine(mount)
