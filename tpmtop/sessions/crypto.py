"""The TPM 2.0 session protocol's cryptography (Part 1 §11.4, §19, §21; the kernel's
drivers/char/tpm/tpm2-sessions.c), with `cryptography` for ECDH, HMAC and AES.

Hashing and HMAC go through hashlib/hmac (OpenSSL underneath, but without the per-call
algorithm look-ups that dominate ESAPI's host time): ~1-2 µs each here.

`cryptography` is imported by the first salted session or parameter encryption, not with this
module: the dashboard's workload loads it in every mode, and in the modes without a salted
session (none, the default) its ~6,000 objects would only lengthen each full GC.
"""

from __future__ import annotations

import hashlib
import hmac as _hmac
import struct

_sha256 = hashlib.sha256


def kdfa(key: bytes, label: bytes, context_u: bytes, context_v: bytes, bits: int) -> bytes:
    """KDFa with SHA-256 (Part 1 §11.4.10.2): HMAC(key, i ‖ label ‖ 0 ‖ U ‖ V ‖ bits)."""
    out = b""
    i = 1
    tail = label + b"\0" + context_u + context_v + struct.pack(">I", bits)
    while len(out) * 8 < bits:
        out += _hmac.new(key, struct.pack(">I", i) + tail, _sha256).digest()
        i += 1
    return out[: (bits + 7) // 8]


def kdfe(z: bytes, label: bytes, party_u: bytes, party_v: bytes, bits: int = 256) -> bytes:
    """KDFe with SHA-256 (Part 1 §11.4.10.3): H(i ‖ Z ‖ label ‖ 0 ‖ U ‖ V)."""
    out = b""
    i = 1
    while len(out) * 8 < bits:
        out += _sha256(struct.pack(">I", i) + z + label + b"\0" + party_u + party_v).digest()
        i += 1
    return out[: (bits + 7) // 8]


def ecdh_salt(tpm_x: bytes, tpm_y: bytes) -> tuple[bytes, bytes, bytes]:
    """Salt a session to an ECC P-256 key: returns (salt, ephemeral x, ephemeral y).

    The ephemeral point is the encryptedSalt the TPM receives; salt = KDFe(Z, "SECRET",
    ephemeral.x, tpmkey.x) where Z is the x coordinate of the ECDH shared point.
    """
    from cryptography.hazmat.primitives.asymmetric import ec

    tpm_pub = ec.EllipticCurvePublicNumbers(int.from_bytes(tpm_x, "big"), int.from_bytes(tpm_y, "big"),
                                            ec.SECP256R1()).public_key()
    eph = ec.generate_private_key(ec.SECP256R1())
    z = eph.exchange(ec.ECDH(), tpm_pub)
    nums = eph.public_key().public_numbers()
    ex, ey = nums.x.to_bytes(32, "big"), nums.y.to_bytes(32, "big")
    return kdfe(z, b"SECRET", ex, tpm_x, 256), ex, ey


def session_key(salt: bytes, nonce_tpm: bytes, nonce_caller: bytes) -> bytes:
    # bind = TPM_RH_NULL, so the key is the salt alone (Part 1 §19.6.8)
    return kdfa(salt, b"ATH", nonce_tpm, nonce_caller, 256)


def cp_hash(cc: int, names: bytes, params: bytes) -> bytes:
    return _sha256(struct.pack(">I", cc) + names + params).digest()


def rp_hash(cc: int, params: bytes) -> bytes:
    return _sha256(b"\0\0\0\0" + struct.pack(">I", cc) + params).digest()


def session_hmac(key: bytes, p_hash: bytes, nonce_newer: bytes, nonce_older: bytes, attrs: int) -> bytes:
    """Command HMAC: (cpHash, nonceCaller, nonceTPM); response HMAC: (rpHash, nonceTPM, nonceCaller)."""
    return _hmac.new(key, p_hash + nonce_newer + nonce_older + bytes((attrs,)), _sha256).digest()


def cfb(key_material: bytes, nonce_newer: bytes, nonce_older: bytes, data: bytes, encrypt: bool) -> bytes:
    """AES-128-CFB parameter encryption (Part 1 §21.3): key ‖ IV = KDFa("CFB", newer, older)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    try:  # cryptography ≥ 43 keeps CFB among the "decrepit" modes; the TPM spec still mandates it
        from cryptography.hazmat.decrepit.ciphers.modes import CFB
    except ImportError:  # pragma: no cover - older cryptography
        from cryptography.hazmat.primitives.ciphers.modes import CFB

    kiv = kdfa(key_material, b"CFB", nonce_newer, nonce_older, 256)
    c = Cipher(algorithms.AES(kiv[:16]), CFB(kiv[16:32]))
    op = c.encryptor() if encrypt else c.decryptor()
    return op.update(data) + op.finalize()


def equal(a: bytes, b: bytes) -> bool:
    return _hmac.compare_digest(a, b)
