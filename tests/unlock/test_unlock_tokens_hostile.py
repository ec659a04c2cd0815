"""Hostile token fields: every field of a real systemd-tpm2 token and a real clevis token (as
systemd-cryptenroll 252 and clevis 19 wrote them here, copied from `cryptsetup luksDump
--dump-json-metadata`) replaced by values of every wrong kind: each token is then judged or
reported as unreadable, never an exception."""

from __future__ import annotations

import base64
import json

import pytest

from tpmtop.unlock.judge import judge
from tpmtop.unlock.tokens import TokenKind, parse_tokens

SYSTEMD = {
    "type": "systemd-tpm2", "keyslots": ["1"],
    "tpm2-blob": ("AJ4AIKLeturl/OLEmfRO5cacwSF7Br+X1qwYN1hS2A39m8opABBQ7QOwouQ1WfbilsdXlLSl8QJGTzQWTlPn11nubdl4d2mH"
                  "tb+grPGHiKnc6wP+JdzosOAcYX3prKKdpPtlmP4iKeDiKwNquPv5nAgcTw6jiIkeZ33oxiCqU++cDMGW/kT3y3Uaghv/D11e"
                  "mOLp4FF0KMZJPsmpOeH9qQBOAAgACwAAABIAIL/y1Y6YE/l878FPcq2BM7xwktZSt8h3lZJUrxQMhB82ABAAIK/4JU5FTQVJ"
                  "rgRpPxciRMECQ4X/iuf30cqk8LxdTGkI"),
    "tpm2-pcrs": [16], "tpm2-pcr-bank": "sha256", "tpm2-primary-alg": "ecc",
    "tpm2-policy-hash": "bff2d58e9813f97cefc14f72ad8133bc7092d652b7c877959254af140c841f36", "tpm2-pin": False,
}
CLEVIS_HEADER = {"alg": "dir", "enc": "A256GCM", "clevis": {"pin": "tpm2", "tpm2": {
    "hash": "sha256", "key": "ecc", "pcr_bank": "sha256", "pcr_ids": "16,23",
    "jwk_pub": ("AE4ACAALAAAEkgAgWZqcyoHBceQE5K_EYudBXueZxJiwD_btto0H3h3EeiAAEAAgpf0Htt7DLz1amR840TlIUbWNFPXM0tMLGPY"
                "dHdEHV0Y")}}}
WRONG = [None, True, 0, -1, 99, 1e300, "", "x" * 300, "%%%", [], [None], [99], ["16", "a"], {}, {"a": 1}]
LIVE = {"sha256": {p: bytes(32) for p in range(24)}, "sha1": {p: bytes(20) for p in range(24)}}


def _clevis(header: dict) -> dict:
    prot = base64.urlsafe_b64encode(json.dumps(header).encode()).decode().rstrip("=")
    return {"type": "clevis", "keyslots": ["2"], "jwe": {"protected": prot, "ciphertext": "", "iv": "", "tag": ""}}


def test_the_real_tokens_read_as_enrolled():
    toks = parse_tokens({"tokens": {"0": SYSTEMD, "1": _clevis(CLEVIS_HEADER)}})
    assert [(t.kind, t.pcrs) for t in toks] == [(TokenKind.SYSTEMD_TPM2, (16,)), (TokenKind.CLEVIS_TPM2, (16, 23))]
    assert [judge(t, LIVE).verdict.value for t in toks] == ["would-unseal", "would-unseal"]


@pytest.mark.parametrize("field", [*SYSTEMD, "tpm2_pubkey", "tpm2_pubkey_pcrs", "tpm2_pcrlock", "tpm2_pcrlock_nv",
                                   "tpm2_srk"])
def test_every_wrong_value_of_a_systemd_field(field):
    short = [base64.b64encode(b).decode() for b in (b"\x81", b"\x81\0\0\1\0\x22\0\x0b", bytes(40))]
    for bad in [*WRONG, *(short if field == "tpm2_srk" else [])]:
        for t in parse_tokens({"tokens": {"0": dict(SYSTEMD, **{field: bad})}}):
            judge(t, LIVE, srk={0x81000001: bytes(34)})  # judged or reported: never raises


@pytest.mark.parametrize("field", [*CLEVIS_HEADER["clevis"]["tpm2"], "pin"])
def test_every_wrong_value_of_a_clevis_field(field):
    for bad in WRONG:
        hdr = json.loads(json.dumps(CLEVIS_HEADER))
        if field == "pin":
            hdr["clevis"]["pin"] = bad
        else:
            hdr["clevis"]["tpm2"][field] = bad
        for t in parse_tokens({"tokens": {"1": _clevis(hdr)}}):
            judge(t, LIVE)
    for bad in WRONG:  # the sss pin's list of nested JWEs
        hdr = {"clevis": {"pin": "sss", "sss": {"t": 1, "jwe": bad}}}
        for t in parse_tokens({"tokens": {"1": _clevis(hdr)}}):
            judge(t, LIVE)
