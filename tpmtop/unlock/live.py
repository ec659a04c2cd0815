"""The token behind a failing Unseal, as tpmtop's proxy sees it.

A program that unlocks a disk (systemd-cryptsetup, clevis) loads the token's sealed object
(TPM2_Load: its TPM2B_PUBLIC is in the command, its handle in the answer), then sends Unseal
with a policy session. When the PCRs moved, Unseal fails with TPM_RC_POLICY_FAIL (0x99d: format
1, error 0x1D, session 1) or TPM_RC_PCR_CHANGED (0x128: a PCR moved between PolicyPCR and the
Unseal). The watch keeps handle -> public area for each Load it sees (and follows it through
ContextSave and ContextLoad: tpm2-tools, under clevis, load in one process and unseal from the
saved context in the next), and at such a failure
looks the public area up among the LUKS2 tokens' sealed objects (systemd's ``tpm2-blob``,
clevis's ``jwk_pub``: the same bytes) and names the token, and the PCRs it is bound to. Where
the clients read those PCRs (PCR_Read: clevis's tpm2_unseal does, to build its PolicyPCR), the
token is judged against the values the TPM answered them, and the PCR that differs is named.

The tokens are read when first needed (the devices given, else /etc/crypttab's and the LUKS2
block devices): a proxy that never sees a failing Unseal reads no header. Core: no Textual.
"""

from __future__ import annotations

import struct
from typing import Any

from tpmtop.tpm import names
from tpmtop.unlock.judge import Verdict, judge, pcr_words
from tpmtop.unlock.tokens import ALG_NAMES, Token

CC_LOAD = 0x157
CC_UNSEAL = 0x15E
CC_FLUSH_CONTEXT = 0x165
CC_CONTEXT_SAVE = 0x162
CC_CONTEXT_LOAD = 0x161
CC_PCR_READ = 0x17E
RC_PCR_CHANGED = 0x128
_FMT1 = 0x080
_POLICY_FAIL = 0x01D
WATCHED = frozenset({CC_LOAD, CC_UNSEAL, CC_FLUSH_CONTEXT, CC_CONTEXT_SAVE, CC_CONTEXT_LOAD, CC_PCR_READ})
KEEP_OBJECTS = 256  # loaded objects and saved contexts remembered (a TPM holds 3-7 objects at once)


def policy_failure(rc: int | None) -> bool:
    return rc is not None and (rc == RC_PCR_CHANGED or (rc & _FMT1 != 0 and rc & 0x3F == _POLICY_FAIL))


class UnsealWatch:
    def __init__(self, devices: list[str] | None = None) -> None:
        self.devices = devices
        self._loaded: dict[int, bytes] = {}  # object handle -> its TPM2B_PUBLIC
        self._saved: dict[bytes, bytes] = {}  # a saved TPMS_CONTEXT -> the object's TPM2B_PUBLIC
        self._tokens: dict[bytes, tuple[str, Token]] | None = None
        self._pcrs: dict[str, dict[int, bytes]] = {}  # bank -> PCR -> the value the TPM last answered a PCR_Read

    @staticmethod
    def wants(cc: int | None, rc: int | None) -> bool:
        return cc in WATCHED

    def _load_tokens(self) -> dict[bytes, tuple[str, Token]]:
        from tpmtop.unlock.report import discover, load

        out: dict[bytes, tuple[str, Token]] = {}
        for path in self.devices if self.devices is not None else discover():
            for t in load(path).tokens:
                if t.blob:
                    out.setdefault(t.blob, (path, t))
        return out

    def feed(self, cc: int | None, rc: int | None, cmd: bytes, rsp: bytes | None, who: str) -> str | None:
        """One exchange; the line to say when an Unseal of a token's sealed object failed."""
        try:
            if cc == CC_LOAD and rc == 0 and rsp is not None:
                self._loaded[struct.unpack_from(">I", rsp, 10)[0]] = _in_public(cmd)
                _trim(self._loaded)
            elif cc == CC_CONTEXT_SAVE and rc == 0 and rsp is not None:
                pub = self._loaded.get(struct.unpack_from(">I", cmd, 10)[0])
                if pub is not None:
                    self._saved[rsp[10:]] = pub
                    _trim(self._saved)
            elif cc == CC_CONTEXT_LOAD and rc == 0 and rsp is not None:
                pub = self._saved.get(cmd[10:])
                if pub is not None:
                    self._loaded[struct.unpack_from(">I", rsp, 10)[0]] = pub
                    _trim(self._loaded)
            elif cc == CC_FLUSH_CONTEXT and rc == 0:
                self._loaded.pop(struct.unpack_from(">I", cmd, 10)[0], None)
            elif cc == CC_PCR_READ and rc == 0 and rsp is not None:
                for bank, pcr, value in _pcr_read_values(rsp):
                    self._pcrs.setdefault(bank, {})[pcr] = value
            elif cc == CC_UNSEAL and policy_failure(rc):
                pub = self._loaded.get(struct.unpack_from(">I", cmd, 10)[0])
                if pub is None:
                    return None
                if self._tokens is None:
                    self._tokens = self._load_tokens()
                hit = self._tokens.get(pub)
                if hit is None:
                    return None
                path, t = hit
                bound = f", bound to {pcr_words(t.pcrs, t.bank)}" if t.pcrs else ""
                return (f"{who}: Unseal failed (0x{rc:03x} {names.rc_text(rc)}) on the sealed object of {path} "
                        f"{t.label}{bound}: {self._why(t, path, rc)}")
        except (struct.error, IndexError):
            return None  # a malformed command: the TPM refused it; nothing to name
        return None


    def _why(self, t: Token, path: str, rc: int | None) -> str:
        if rc == RC_PCR_CHANGED:  # the session's PCRs were right; one moved before the Unseal
            return "a PCR was extended between its PolicyPCR and the Unseal (the PCR_CHANGED report names the extend)"
        seen = self._pcrs.get(t.bank or "sha256", {})
        if t.pcrs and all(p in seen for p in t.pcrs):
            j = judge(t, {t.bank or "sha256": seen})
            if j.verdict is Verdict.WOULD_NOT:
                return f"{j.reason} (the values the TPM last answered a PCR_Read through tpmtop)"
        return f"`tpmtop unlock {path}` names the PCR that differs"


def _pcr_read_values(rsp: bytes) -> list[tuple[str, int, bytes]]:
    """A PCR_Read answer's values: (bank, PCR, value), in the order of its pcrSelectionOut
    (banks in order, each bank's PCRs ascending), after its pcrUpdateCounter."""
    p = 14
    (count,) = struct.unpack_from(">I", rsp, p)
    p += 4
    order: list[tuple[str, int]] = []
    for _ in range(min(count, 16)):
        alg, size = struct.unpack_from(">HB", rsp, p)
        bits = rsp[p + 3:p + 3 + size]
        p += 3 + size
        bank = ALG_NAMES.get(alg)
        order += [(bank or "?", 8 * i + b) for i, byte in enumerate(bits) for b in range(8) if byte >> b & 1]
    (n,) = struct.unpack_from(">I", rsp, p)
    p += 4
    out: list[tuple[str, int, bytes]] = []
    for bank, pcr in order[:n]:
        (size,) = struct.unpack_from(">H", rsp, p)
        if p + 2 + size > len(rsp):
            raise IndexError("a digest runs past the answer")
        if bank != "?":
            out.append((bank, pcr, rsp[p + 2:p + 2 + size]))
        p += 2 + size
    return out


def _trim(d: dict[Any, bytes]) -> None:
    while len(d) > KEEP_OBJECTS:  # the oldest first (dicts keep insertion order)
        d.pop(next(iter(d)))


def _in_public(cmd: bytes) -> bytes:
    """TPM2_Load's inPublic (TPM2B_PUBLIC with its size): after the header, parentHandle, the
    authorization area and inPrivate."""
    (auth_size,) = struct.unpack_from(">I", cmd, 14)
    p = 18 + auth_size
    (priv,) = struct.unpack_from(">H", cmd, p)
    p += 2 + priv
    (pub,) = struct.unpack_from(">H", cmd, p)
    if p + 2 + pub > len(cmd):
        raise IndexError("inPublic runs past the command")
    return cmd[p:p + 2 + pub]
