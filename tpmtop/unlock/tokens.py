"""The tokens of a LUKS2 header, parsed into what a PCR verdict needs.

- ``systemd-tpm2`` (systemd-cryptenroll): ``tpm2-pcrs``, ``tpm2-pcr-bank``, ``tpm2-policy-hash``,
  ``tpm2-pin``, ``tpm2-primary-alg``, ``tpm2_pubkey``/``tpm2_pubkey_pcrs`` (a signed policy),
  ``tpm2_pcrlock`` (and ``tpm2_pcrlock_nv``, its NV index's public area), ``tpm2-blob``
  (TPM2B_PRIVATE then TPM2B_PUBLIC: the sealed object's public area carries its authPolicy).
  systemd spells some with dashes and some with underscores, and has changed spellings between
  versions: both are read.
- ``clevis``: a JWE whose protected header names the pin. The ``tpm2`` pin holds ``pcr_bank``,
  ``pcr_ids`` and ``jwk_pub`` (the sealed object's TPM2B_PUBLIC, base64url); the ``sss`` pin holds
  nested compact JWEs under ``sss.jwe``, each with its own pin (a tpm2 pin there is read too).
- anything else: named by its type, "not a TPM token".

A token that cannot be read (broken base64, a field of the wrong type) becomes a
:class:`Token` with ``problem`` set: reported and skipped, the others still judged.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from tpmtop.boundedread import excerpt
from tpmtop.pcrs.eventlog import ALGORITHMS

ALG_NAMES = {alg: name for alg, (name, _) in ALGORITHMS.items()}
MAX_SSS_DEPTH = 4  # clevis nests sss inside sss; deeper than this is not a real binding
_B64URL = re.compile(r"^[A-Za-z0-9_-]*={0,2}$")
_B64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")


class TokenKind(enum.Enum):
    SYSTEMD_TPM2 = "systemd-tpm2"
    CLEVIS_TPM2 = "clevis-tpm2"
    OTHER = "other"  # not a TPM token (fido2, a clevis tang pin, …)
    BROKEN = "broken"  # a TPM token tpmtop could not read


@dataclass
class Token:
    token_id: str  # the LUKS2 token number, "1" or "1/sss[0]" for a pin nested in sss
    type: str  # as the header names it
    kind: TokenKind
    keyslots: list[str] = field(default_factory=list)
    bank: str | None = None
    pcrs: tuple[int, ...] = ()
    policy_hash: bytes | None = None  # what systemd recorded (tpm2-policy-hash)
    auth_policy: bytes | None = None  # the sealed object's public area's authPolicy
    policy_alg: str = "sha256"  # the sealed object's nameAlg: the hash of its policy session
    pin: bool = False
    pubkey: bytes | None = None  # a signed policy's public key (PEM, as recorded)
    pubkey_pcrs: tuple[int, ...] = ()
    pcrlock: bool = False
    pcrlock_nv: int | None = None
    primary_alg: str | None = None
    blob: bytes = b""  # the sealed object's public area as recorded (for matching on the wire)
    srk_handle: int | None = None  # systemd 254+'s tpm2_srk: the persistent SRK it sealed under
    srk_name: bytes | None = None  # … and that SRK's name (nameAlg ‖ H(its public area))
    problem: str | None = None  # why it was not read, or why it is not a TPM token

    @property
    def label(self) -> str:
        return f"token {self.token_id} ({self.kind.value if self.kind is TokenKind.CLEVIS_TPM2 else self.type})"


def _b64(text: object, url: bool) -> bytes:
    if not isinstance(text, str) or not (_B64URL if url else _B64).match(text):
        raise ValueError(f"not base64{'url' if url else ''}: {excerpt(text, 24)}")
    try:
        if url:
            return base64.urlsafe_b64decode(text.rstrip("=") + "=" * (-len(text.rstrip("=")) % 4))
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"not base64: {excerpt(text, 24)}") from None


def parse_public(pub: bytes) -> tuple[str, bytes]:
    """A TPM2B_PUBLIC's nameAlg and authPolicy (Part 2, TPMT_PUBLIC: type, nameAlg,
    objectAttributes, authPolicy, …)."""
    size, _type, name_alg, _attrs, plen = struct.unpack_from(">HHHIH", pub, 0)
    if size + 2 > len(pub) or plen > 64 or 12 + plen > len(pub):
        raise ValueError(f"a TPM2B_PUBLIC of {len(pub)} bytes that says {size}")
    alg = ALG_NAMES.get(name_alg)
    if alg is None or alg not in hashlib.algorithms_available:  # sm3_256: not in every OpenSSL
        raise ValueError(f"sealed object's nameAlg 0x{name_alg:04x} unknown")
    return alg, pub[12:12 + plen]


def parse_srk(raw: bytes) -> tuple[int, bytes]:
    """systemd's ``tpm2_srk``: the SRK as tpm2-tss serializes an ESYS_TR (Esys_TR_Serialize:
    its TPM handle, its TPM2B_NAME, then the resource type and public area, unread here)."""
    handle, size = struct.unpack_from(">IH", raw, 0)
    name = raw[6:6 + size]
    if len(name) != size or size < 4 or handle >> 24 != 0x81:
        raise ValueError(f"tpm2_srk is not a serialized persistent key ({len(raw)} bytes)")
    return handle, name


def _pcr_list(v: object) -> tuple[int, ...]:
    if isinstance(v, str):  # clevis: "16,23"
        v = [x for x in v.replace(" ", "").split(",") if x]
    if not isinstance(v, list):
        raise ValueError(f"a PCR list that is not a list: {excerpt(v, 24)}")
    out = []
    for x in v:
        n = int(x) if isinstance(x, (int, str)) and str(x).isdigit() else -1
        if not 0 <= n < 24:
            raise ValueError(f"PCR {excerpt(x, 12)} is not 0–23")
        out.append(n)
    return tuple(sorted(set(out)))


def _get(tok: dict[str, Any], name: str) -> Any:
    """systemd's field under either spelling (tpm2-pin / tpm2_pin)."""
    return tok.get(name, tok.get(name.replace("-", "_"), tok.get(name.replace("_", "-"))))


def _systemd(tid: str, tok: dict[str, Any], keyslots: list[str]) -> Token:
    t = Token(tid, "systemd-tpm2", TokenKind.SYSTEMD_TPM2, keyslots=keyslots)
    t.pcrs = _pcr_list(_get(tok, "tpm2-pcrs") or [])
    bank = _get(tok, "tpm2-pcr-bank") or "sha256"  # systemd's default when absent (before v246: sha256)
    if not isinstance(bank, str) or bank not in {n for n, _ in ALGORITHMS.values()}:
        raise ValueError(f"PCR bank {excerpt(bank, 16)} unknown")
    t.bank = bank
    ph = _get(tok, "tpm2-policy-hash")
    if ph is not None:
        if not isinstance(ph, str) or not re.fullmatch(r"(?:[0-9a-fA-F]{2})+", ph):
            raise ValueError(f"tpm2-policy-hash is not hex: {excerpt(ph, 24)}")
        t.policy_hash = bytes.fromhex(ph)
    t.pin = _get(tok, "tpm2-pin") is True
    prim = _get(tok, "tpm2-primary-alg")
    t.primary_alg = prim if isinstance(prim, str) else None
    pk = _get(tok, "tpm2_pubkey")
    if pk:
        t.pubkey = _b64(pk, url=False)
    t.pubkey_pcrs = _pcr_list(_get(tok, "tpm2_pubkey_pcrs") or [])
    t.pcrlock = _get(tok, "tpm2_pcrlock") is True
    srk = _get(tok, "tpm2_srk")
    if srk:
        try:
            t.srk_handle, t.srk_name = parse_srk(_b64(srk, url=False))
        except struct.error:
            raise ValueError("tpm2_srk is truncated") from None
    nv = _get(tok, "tpm2_pcrlock_nv")
    if nv:
        raw = _b64(nv, url=False)
        if len(raw) >= 6:
            t.pcrlock_nv = struct.unpack_from(">I", raw, 2)[0]  # TPM2B_NV_PUBLIC: size, nvIndex
    blob = _get(tok, "tpm2-blob")
    if blob:
        raw = _b64(blob, url=False)
        (psize,) = struct.unpack_from(">H", raw, 0)  # TPM2B_PRIVATE, then TPM2B_PUBLIC
        pub = raw[2 + psize:]
        t.policy_alg, t.auth_policy = parse_public(pub)
        t.blob = pub
    return t


def _clevis_header(protected: object) -> dict[str, Any]:
    hdr = json.loads(_b64(protected, url=True).decode("utf-8"))
    clevis = hdr.get("clevis") if isinstance(hdr, dict) else None
    if not isinstance(clevis, dict):
        raise ValueError("the JWE's protected header has no clevis object")
    return clevis


def _clevis(tid: str, clevis: dict[str, Any], keyslots: list[str], depth: int) -> list[Token]:
    pin = clevis.get("pin")
    if pin == "tpm2":
        cfg = clevis.get("tpm2")
        if not isinstance(cfg, dict):
            raise ValueError("tpm2 pin without its tpm2 object")
        t = Token(tid, "clevis", TokenKind.CLEVIS_TPM2, keyslots=keyslots)
        bank = cfg.get("pcr_bank") or "sha256"
        if bank not in {n for n, _ in ALGORITHMS.values()}:
            raise ValueError(f"pcr_bank {excerpt(bank, 16)} unknown")
        t.bank = bank
        t.pcrs = _pcr_list(cfg.get("pcr_ids") or [])
        t.primary_alg = cfg.get("key") if isinstance(cfg.get("key"), str) else None
        if cfg.get("jwk_pub"):
            t.blob = _b64(cfg["jwk_pub"], url=True)
            t.policy_alg, t.auth_policy = parse_public(t.blob)
        if cfg.get("policy_pubkey_path") or cfg.get("policy_ref"):
            t.pubkey = b"(an authorized policy: clevis policy_pubkey)"
        return [t]
    if pin == "sss":
        if depth >= MAX_SSS_DEPTH:
            raise ValueError(f"sss nested deeper than {MAX_SSS_DEPTH}")
        sss = clevis.get("sss")
        jwes = sss.get("jwe") if isinstance(sss, dict) else None
        if not isinstance(jwes, list):
            raise ValueError("sss pin without its jwe list")
        out: list[Token] = []
        for i, compact in enumerate(jwes):
            sub = f"{tid}/sss[{i}]"
            try:
                if not isinstance(compact, str) or compact.count(".") != 4:
                    raise ValueError("not a compact JWE")
                out += _clevis(sub, _clevis_header(compact.split(".", 1)[0]), keyslots, depth + 1)
            except (ValueError, UnicodeDecodeError, struct.error, KeyError, TypeError, RecursionError) as e:
                out.append(Token(sub, "clevis", TokenKind.BROKEN, keyslots=keyslots, problem=f"clevis JWE: {e}"))
        return out
    name = pin if isinstance(pin, str) and re.fullmatch(r"[\w-]{1,32}", pin) else "?"  # tang, sss, …
    return [Token(tid, f"clevis {name}", TokenKind.OTHER, keyslots=keyslots, problem="not a TPM token")]


def parse_tokens(metadata: dict[str, Any]) -> list[Token]:
    out: list[Token] = []
    tokens = metadata.get("tokens") or {}
    for tid in sorted(tokens, key=lambda k: (len(k), k)):
        tok = tokens[tid]
        if not isinstance(tok, dict):
            out.append(Token(tid, "?", TokenKind.BROKEN, problem="not a JSON object"))
            continue
        ttype = tok.get("type")
        slots = tok.get("keyslots")
        keyslots = [str(k) for k in slots if isinstance(k, (str, int))] if isinstance(slots, list) else []
        try:
            if ttype == "systemd-tpm2":
                out.append(_systemd(tid, tok, keyslots))
            elif ttype == "clevis":
                jwe = tok.get("jwe")
                if not isinstance(jwe, dict):
                    raise ValueError("no jwe object")
                out += _clevis(tid, _clevis_header(jwe.get("protected")), keyslots, 0)
            else:
                out.append(Token(tid, str(ttype), TokenKind.OTHER, keyslots=keyslots, problem="not a TPM token"))
        except (ValueError, UnicodeDecodeError, struct.error, KeyError, TypeError, RecursionError) as e:
            kind = "clevis JWE" if ttype == "clevis" else str(ttype)
            out.append(Token(tid, str(ttype), TokenKind.BROKEN, keyslots=keyslots, problem=f"{kind}: {e}"))
    return out
