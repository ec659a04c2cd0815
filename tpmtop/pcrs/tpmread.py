"""The TPM's side: which banks are allocated (GetCapability TPM_CAP_PCRS) and every PCR's
value (PCR_Read), raw like :mod:`tpmtop.tpm.commands`. Neither needs authorization nor
changes anything: safe under --read-only and on a real chip.

PCR_Read returns at most 8 digests per call (TPML_DIGEST), and says in pcrSelectionOut which
ones: tpmtop asks again for the rest until every selected PCR is read. Each answer carries the
pcrUpdateCounter; the counter of the last call is kept (tpmtop pcrs shows it, and the 0x128
attribution compares it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tpmtop.errors import TpmError
from tpmtop.pcrs.eventlog import ALGORITHMS
from tpmtop.tpm.commands import CC_GET_CAPABILITY, Transacts, build, check

CC_PCR_READ = 0x17E  # TPM2_CC.PCR_Read
TPM_CAP_PCRS = 0x5  # TPM2_CAP.PCRS


@dataclass
class PcrValues:
    allocated: dict[str, list[int]] = field(default_factory=dict)  # bank -> PCRs allocated
    values: dict[str, dict[int, bytes]] = field(default_factory=dict)  # bank -> pcr -> value
    update_counter: int = 0
    unknown_banks: list[int] = field(default_factory=list)  # TPM_ALG_IDs tpmtop cannot name


def _selection(body: bytes, p: int) -> tuple[list[tuple[int, list[int]]], int]:
    count = struct.unpack_from(">I", body, p)[0]
    p += 4
    if count > 16:
        raise TpmError(f"a PCR selection of {count} banks", None, "TPM2_CC_PCR_Read")
    out = []
    for _ in range(count):
        alg, size = struct.unpack_from(">HB", body, p)
        p += 3
        bits = body[p:p + size]
        p += size
        out.append((alg, [8 * i + b for i, byte in enumerate(bits) for b in range(8) if byte >> b & 1]))
    return out, p


def _select_bytes(pcrs: list[int]) -> bytes:
    sel = bytearray(3)
    for n in pcrs:
        sel[n // 8] |= 1 << (n % 8)
    return bytes([len(sel)]) + bytes(sel)


def allocated_banks(transport: Transacts) -> list[tuple[int, list[int]]]:
    rsp = transport.transact(build(CC_GET_CAPABILITY, struct.pack(">III", TPM_CAP_PCRS, 0, 1)))
    body = check(rsp, CC_GET_CAPABILITY)
    try:
        cap = struct.unpack_from(">I", body, 1)[0]
        if cap != TPM_CAP_PCRS:
            raise TpmError(f"GetCapability answered capability 0x{cap:x}, not PCRS", None, "TPM2_CC_GetCapability")
        sel, _ = _selection(body, 5)
    except struct.error:
        raise TpmError("GetCapability(PCRS): malformed response", None, "TPM2_CC_GetCapability") from None
    return sel


def pcr_read(transport: Transacts, alg: int, pcrs: list[int]) -> tuple[int, dict[int, bytes]]:
    """One bank's ``pcrs``: (the last pcrUpdateCounter, pcr -> value)."""
    want = sorted(p for p in pcrs if p < 24)
    got: dict[int, bytes] = {}
    counter = 0
    for _ in range(len(want) + 1):  # each call returns at least one, or the TPM is broken
        rest = [p for p in want if p not in got]
        if not rest:
            break
        cmd = build(CC_PCR_READ, struct.pack(">IH", 1, alg) + _select_bytes(rest))
        body = check(transport.transact(cmd), CC_PCR_READ)
        try:
            counter = struct.unpack_from(">I", body, 0)[0]
            sel, p = _selection(body, 4)
            n = struct.unpack_from(">I", body, p)[0]
            p += 4
            values = []
            for _ in range(n):
                size = struct.unpack_from(">H", body, p)[0]
                values.append(body[p + 2:p + 2 + size])
                p += 2 + size
        except struct.error:
            raise TpmError("PCR_Read: malformed response", None, "TPM2_CC_PCR_Read") from None
        returned = [pcr for a, ps in sel if a == alg for pcr in ps]
        if not returned or len(returned) != len(values):
            break  # the TPM read nothing more (a PCR it does not have): keep what it gave
        got.update(zip(returned, values, strict=True))
    return counter, got


def read_all(transport: Transacts) -> PcrValues:
    out = PcrValues()
    for alg, pcrs in allocated_banks(transport):
        if alg not in ALGORITHMS:
            out.unknown_banks.append(alg)
            continue
        name = ALGORITHMS[alg][0]
        out.allocated[name] = pcrs
        if pcrs:
            out.update_counter, out.values[name] = pcr_read(transport, alg, pcrs)
        else:
            out.values[name] = {}
    return out
