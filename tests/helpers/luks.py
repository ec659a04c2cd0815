"""LUKS2 images as plain files for the unlock tests: formatted by cryptsetup, enrolled by the
real tools (systemd-cryptenroll, clevis luks bind) against a private swtpm, and read back by
cryptsetup (the peer tpmtop's own header reader is held to)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess

KEY = b"tpmtop-test-passphrase"


def make_image(directory, name: str = "disk.img", *extra: str, luks_type: str = "luks2",
               size_mib: int = 20) -> str:
    """A LUKS image file with one passphrase keyslot (the key file beside it); pbkdf2 at 1000
    iterations keeps each new keyslot fast."""
    img = os.path.join(directory, name)
    key = key_file(directory)
    with open(img, "wb") as f:
        f.truncate(size_mib << 20)
    subprocess.run(["cryptsetup", "luksFormat", "-q", "--type", luks_type, "--pbkdf", "pbkdf2",
                    "--pbkdf-force-iterations", "1000", *extra, img, key],
                   check=True, capture_output=True, timeout=120)
    return img


def key_file(directory) -> str:
    key = os.path.join(directory, "key")
    if not os.path.exists(key):
        with open(key, "wb") as f:
            f.write(KEY)
    return key


def _flush_sessions(tcti: str) -> None:
    # systemd-cryptenroll 252 and clevis leave a session loaded on a TPM without a resource
    # manager (a swtpm reached by TCP); swtpm holds three, so the next enrollment would fail
    # with 0x903 (out of session memory). tpmtop opens none of its own here.
    subprocess.run(["tpm2_flushcontext", "-T", tcti, "-l"], check=True, capture_output=True, timeout=60)


def enroll_systemd(img: str, tcti: str, *args: str, env: dict | None = None) -> None:
    e = dict(os.environ, **(env or {}))
    key = key_file(os.path.dirname(img))
    subprocess.run(["systemd-cryptenroll", f"--tpm2-device={tcti}", f"--unlock-key-file={key}", *args, img],
                   check=True, capture_output=True, timeout=300, env=e)
    _flush_sessions(tcti)


def enroll_clevis(img: str, tcti: str, pin: str, cfg: dict) -> None:
    e = dict(os.environ, TPM2TOOLS_TCTI=tcti)
    subprocess.run(["clevis", "luks", "bind", "-y", "-d", img, "-k", key_file(os.path.dirname(img)), pin,
                    json.dumps(cfg)], check=True, capture_output=True, timeout=600, env=e)
    _flush_sessions(tcti)


def import_token(img: str, token: dict) -> None:
    subprocess.run(["cryptsetup", "token", "import", img], input=json.dumps(token).encode(), check=True,
                   capture_output=True, timeout=120)


def luks_tokens(img: str) -> dict:
    """The tokens as cryptsetup reads them (the peer tpmtop's own header reader is held to)."""
    out = subprocess.run(["cryptsetup", "luksDump", "--dump-json-metadata", img], check=True,
                         capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout)["tokens"]


def clevis_auth_policy(token: dict) -> str:
    """The clevis tpm2 pin's sealed object's authPolicy, decoded here (TPM2B_PUBLIC: size,
    type, nameAlg, objectAttributes, then the authPolicy TPM2B)."""
    prot = token["jwe"]["protected"]
    hdr = json.loads(base64.urlsafe_b64decode(prot + "=" * (-len(prot) % 4)))
    pub_b64 = hdr["clevis"]["tpm2"]["jwk_pub"]
    pub = base64.urlsafe_b64decode(pub_b64 + "=" * (-len(pub_b64) % 4))
    n = int.from_bytes(pub[10:12], "big")
    return pub[12:12 + n].hex()


def file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
