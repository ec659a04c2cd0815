"""Assemble ``tpmtop health``'s report from its sources, each optional: the TPM (GetCapability
only), captures of watched traffic, and the system's files under a root."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tpmtop.boot.facts import collect_health
from tpmtop.boot.rootfs import RootReader
from tpmtop.errors import TpmtopError
from tpmtop.health import advisories, attribution, ek, holders, ima, lockout, nvspace, slots, system, tpmstate
from tpmtop.health.kernel_traffic import KernelTraffic
from tpmtop.health.probe import TpmFacts
from tpmtop.health.report import HealthReport
from tpmtop.health.tpmstate import Saved
from tpmtop.health.verdicts import Kind, Level, Verdict, unknown
from tpmtop.tpm.identity import software_tpm


def tpm_verdicts(read: Callable[[], tuple[dict[str, Any], TpmFacts]] | None, reason: str | None,
                 log: attribution.AuthFailureLog, sources: list[str],
                 saved: Callable[[dict[str, Any], TpmFacts], Saved | None] = lambda t, f: None,
                 holders: slots.SlotHolders | None = None,
                 required: bool = True) -> tuple[dict[str, Any], list[Verdict], str | None]:
    """``read()`` -> (the TPM's JSON line, what :func:`probe.probe` read); ``saved(tpm, facts)``
    -> the state to compare the clock with. Returns the TPM's line, the
    lockout verdicts and its manufacturer (for the fTPM case). A TPM that was chosen and could
    not be asked (nothing listens, no answer within the deadline) is a failure: health never
    says "healthy" of a TPM it did not hear from."""
    out: list[Verdict] = []
    tpm: dict[str, Any] = {"reason": reason} if reason else {}
    manufacturer = None
    if read is None:
        # required: health was to judge this machine's TPM and none could be opened (exit 1);
        # not when --root judges a saved tree, whose TPM is out of scope by the user's choice
        out.append(Verdict(Kind.TPM, Level.UNKNOWN, reason or "no TPM to ask", (),
                           (("answered", False), ("asked", False), ("required", required))))
    else:
        try:
            tpm, facts = read()
        except TpmtopError as e:
            tpm = {"reason": str(e), "answered": False}
            out.append(Verdict(Kind.TPM, Level.FAIL, f"the TPM did not answer: {e}",
                               ("a TPM was chosen (-T, $TPM2TOOLS_TCTI or the device) and could not be asked",),
                               (("answered", False), ("error", str(e)))))
        else:
            manufacturer = tpm.get("manufacturer")
            ev = [f"through {tpm.get('tcti')}"]
            if tpm.get("simulated_reason"):
                ev.append(f"simulated: {tpm['simulated_reason']}")
            out.append(Verdict(Kind.TPM, Level.OK, f"{tpm.get('manufacturer', '?')} {tpm.get('vendor', '')} "
                               f"fw {tpm.get('firmware', '?')} answers", tuple(ev), (("answered", True),)))
            try:
                st = lockout.DaState.from_properties(facts.var)
            except KeyError as e:
                out.append(unknown(Kind.LOCKOUT, f"the TPM did not report {e.args[0]}"))
            else:
                out.append(lockout.verdict(st, log.culprits()))
            out += state_verdicts(tpm, facts, saved(tpm, facts), holders or slots.SlotHolders())
    out.append(attribution.verdict(log, sources))
    return tpm, out, manufacturer


def state_verdicts(tpm: dict[str, Any], facts: TpmFacts, before: Saved | None,
                   holders: slots.SlotHolders) -> list[Verdict]:
    """The TPM's own state: flags, self-test, clock against ``before``, EK certificates, NV,
    slots with their ``holders``."""
    out = []
    perm = facts.var.get("PERMANENT")
    out.append(tpmstate.flags_verdict(perm, facts.var.get("STARTUP_CLEAR")) if perm is not None
               else unknown(Kind.FLAGS, "the TPM did not report TPM_PT_PERMANENT"))
    out.append(tpmstate.selftest_verdict(*facts.test) if facts.test is not None
               else unknown(Kind.SELFTEST, f"GetTestResult: {facts.errors.get('self-test', '?')}"))
    out.append(tpmstate.clock_verdict(facts.clock, before) if facts.clock is not None
               else unknown(Kind.CLOCK, f"ReadClock: {facts.errors.get('clock', '?')}"))
    out.append(ek.verdict(facts))
    out.append(nvspace.verdict(facts))
    out.append(slots.verdict(facts, holders, str(tpm.get("tcti", ""))))
    out.append(advisories.verdict(tpm))
    return out


def identity_line(tpm: dict[str, Any]) -> dict[str, Any]:
    """The TPM's JSON line with ``simulated`` as health judges it: true when tpmtop started the
    simulator, or when the TPM's own identity says it is one (libtpms); a swtpm TCTI alone says
    nothing (a `tpmtop proxy` speaks swtpm's protocol in front of a chip)."""
    out = dict(tpm)
    if not out.get("simulated") and software_tpm(str(out.get("manufacturer", "")), str(out.get("vendor", ""))):
        out["simulated"] = True
        out["simulated_reason"] = (f"the TPM's identity: manufacturer {out.get('manufacturer')}, vendor "
                                   f"{out.get('vendor')} (libtpms, swtpm's engine)")
    return out


def system_verdicts(root: str, manufacturer: str | None, ima_sample: float,
                    traffic: KernelTraffic | None = None) -> list[Verdict]:
    reader = RootReader(root)
    facts = collect_health(reader)
    inp = system.Inputs(reader, facts, manufacturer, traffic)
    out = system.verdicts(inp)
    if os.path.realpath(root) == "/":  # this machine's processes now: a saved tree has none
        out.insert(1, holders.read())
    return out + [ima.verdict(reader, facts, ima_sample, traffic=traffic)]


def report(tpm: dict[str, Any], verdicts: list[Verdict], notes: list[str],
           machine_judged: bool = True) -> HealthReport:
    return HealthReport(tpm, verdicts, notes, machine_judged)
