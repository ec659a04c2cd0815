"""The NV inventory: every index with its type, attributes, size and name, the owners tpmtop
knows named, and the room left as the TPM reports it (TPM_PT_HR_PERSISTENT_AVAIL: "an estimate
of the number of additional persistent objects that could be loaded into NV memory", Part 2
6.13 — it shrinks as indices take NV; TPM_PT_NV_COUNTERS_AVAIL).

The TPM exports no "bytes free": the estimate is the figure there is. On libtpms (swtpm 0.7.1,
measured 2026-12-07 on this project's VM) it started at 65, fell by about one per 2,048-byte
index, and NV_DefineSpace failed with TPM_RC_NV_SPACE (0x14B) once it read 7, even for a
64-byte index: hence the warning at or below NV_WARN_PERSISTENT_AVAIL. A chip's floor may
differ; the figure is in the evidence either way.
"""

from __future__ import annotations

from tpmtop.health.probe import EK_CERT_INDICES, TpmFacts
from tpmtop.health.verdicts import Kind, Level, Verdict, unknown
from tpmtop.tpm.status import NvPublic

NV_WARN_PERSISTENT_AVAIL = 8
# TCG EK Credential Profile 2.2.1.4: the nonce and template indices beside the low-range certificates
_EK_OTHER = {0x01C00003: "RSA EK nonce", 0x01C00004: "RSA EK template", 0x01C0000B: "ECC EK nonce",
             0x01C0000C: "ECC EK template"}
SYSTEMD_NVPCR_BASE = 0x01D10200  # systemd 259+ NvPCRs (docs/TPM2_PCR_MEASUREMENTS.md)


def owner(p: NvPublic) -> str:
    """Who an index belongs to, where tpmtop knows; "" otherwise."""
    if p.index in EK_CERT_INDICES:
        return EK_CERT_INDICES[p.index]
    if p.index in _EK_OTHER:
        return _EK_OTHER[p.index]
    if SYSTEMD_NVPCR_BASE <= p.index <= 0x01D1FFFF and p.nv_type == "extend":
        return "systemd NvPCR"
    if p.nv_type == "counter":
        return "monotonic counter"
    return ""


def verdict(facts: TpmFacts) -> Verdict:
    if facts.nv is None:
        return unknown(Kind.NV, f"NV indices not listed: {facts.errors.get('nv', '?')}")
    rows = [{"index": p.index, "type": p.nv_type, "attributes": p.attr_names, "size": p.data_size,
             "name": p.name.hex(), "owner": owner(p) or None} for p in sorted(facts.nv, key=lambda p: p.index)]
    ev = []
    # the indices whose owner tpmtop knows (EK certificates, NvPCRs) first: the text report shows
    # the first few lines of evidence, and those are the ones an operator looks for; the rest by handle
    for p in sorted(facts.nv, key=lambda p: (not owner(p), p.index)):
        who = owner(p)
        ev.append(f"0x{p.index:08x} {p.nv_type:<8} {p.data_size:>5} B  {'|'.join(p.attr_names)}"
                  + (f"  ({who})" if who else ""))
    listed = {p.index for p in facts.nv}
    ev += [f"{h} not described: {why}" for h, why in facts.errors.items()
           if h.startswith("0x01") and int(h, 16) not in listed]
    avail = facts.var.get("HR_PERSISTENT_AVAIL")
    counters = facts.var.get("NV_COUNTERS_AVAIL")
    size = sum(p.data_size for p in facts.nv)
    room = (f"room for {avail} more persistent object(s) by the TPM's estimate" if avail is not None
            else "the TPM reports no TPM_PT_HR_PERSISTENT_AVAIL")
    text = f"{len(facts.nv)} indices, {size} bytes of data; {room}"
    if counters is not None:
        text += f", {counters} more counter(s)"
    ev.insert(0, f"TPM_PT_HR_PERSISTENT_AVAIL {avail}, TPM_PT_NV_COUNTERS_AVAIL {counters}, "
              f"TPM_PT_HR_NV_INDEX {facts.var.get('HR_NV_INDEX')}, TPM_PT_NV_INDEX_MAX "
              f"{facts.fixed.get(0x117)} bytes per index")
    level = Level.INFO
    if avail is not None and avail <= NV_WARN_PERSISTENT_AVAIL:
        level = Level.WARN
        text = (f"NV nearly full: {text} (swtpm refuses NV_DefineSpace with TPM_RC_NV_SPACE at 7; "
                "systemd NvPCR and pcrlock allocations fail here)")
    elif counters == 0:
        level = Level.WARN
        text = f"no NV counter can be defined: {text}"
    data: tuple[tuple[str, object], ...] = (("indices", rows), ("persistent_avail", avail),
                                            ("counters_avail", counters), ("index_count", len(facts.nv)),
                                            ("index_max", facts.fixed.get(0x117)))
    # every index in the evidence: the text report shows the first lines and counts the rest
    return Verdict(Kind.NV, level, text, tuple(ev), data)


def room_verdict(var: dict[str, int]) -> Verdict | None:
    """The room alone, from the variable properties a poll already read (the dashboard's Health
    panel: no NV_ReadPublic of its own). None when the TPM does not report it."""
    avail = var.get("HR_PERSISTENT_AVAIL")
    if avail is None:
        return None
    ev = (f"TPM_PT_HR_PERSISTENT_AVAIL {avail}, TPM_PT_NV_COUNTERS_AVAIL {var.get('NV_COUNTERS_AVAIL')}, "
          f"TPM_PT_HR_NV_INDEX {var.get('HR_NV_INDEX')}",)
    data = (("persistent_avail", avail), ("index_count", var.get("HR_NV_INDEX")))
    text = f"{var.get('HR_NV_INDEX', '?')} indices; room for {avail} more persistent object(s) by the TPM's estimate"
    if avail <= NV_WARN_PERSISTENT_AVAIL:
        return Verdict(Kind.NV, Level.WARN, f"NV nearly full: {text}", ev, data)
    return Verdict(Kind.NV, Level.INFO, text, ev, data)
