"""Assemble ``tpmtop health``'s report from its sources, each optional: the TPM (GetCapability
only), captures of watched traffic, and the system's files under a root."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpmtop.boot.facts import collect_health
from tpmtop.boot.rootfs import RootReader
from tpmtop.errors import TpmtopError
from tpmtop.health import attribution, ima, lockout, system
from tpmtop.health.kernel_traffic import KernelTraffic
from tpmtop.health.report import HealthReport
from tpmtop.health.verdicts import Kind, Level, Verdict, unknown


def tpm_verdicts(read: Callable[[], tuple[dict[str, Any], dict[str, int]]] | None, reason: str | None,
                 log: attribution.AuthFailureLog,
                 sources: list[str]) -> tuple[dict[str, Any], list[Verdict], str | None]:
    """``read()`` -> (the TPM's JSON line, its variable properties). Returns the TPM's line, the
    lockout verdicts and its manufacturer (for the fTPM case)."""
    out: list[Verdict] = []
    tpm: dict[str, Any] = {"reason": reason} if reason else {}
    manufacturer = None
    if read is None:
        out.append(unknown(Kind.TPM, reason or "no TPM to ask"))
    else:
        try:
            tpm, var = read()
        except TpmtopError as e:
            tpm = {"reason": str(e)}
            out.append(unknown(Kind.TPM, f"the TPM could not be asked: {e}"))
        else:
            manufacturer = tpm.get("manufacturer")
            out.append(Verdict(Kind.TPM, Level.OK, f"{tpm.get('manufacturer', '?')} {tpm.get('vendor', '')} "
                               f"fw {tpm.get('firmware', '?')} answers", (f"through {tpm.get('tcti')}",)))
            try:
                st = lockout.DaState.from_properties(var)
            except KeyError as e:
                out.append(unknown(Kind.LOCKOUT, f"the TPM did not report {e.args[0]}"))
            else:
                out.append(lockout.verdict(st, log.culprits()))
    out.append(attribution.verdict(log, sources))
    return tpm, out, manufacturer


def system_verdicts(root: str, manufacturer: str | None, ima_sample: float,
                    traffic: KernelTraffic | None = None) -> list[Verdict]:
    reader = RootReader(root)
    facts = collect_health(reader)
    inp = system.Inputs(reader, facts, manufacturer, traffic)
    return system.verdicts(inp) + [ima.verdict(reader, facts, ima_sample, traffic=traffic)]


def report(tpm: dict[str, Any], verdicts: list[Verdict], notes: list[str]) -> HealthReport:
    return HealthReport(tpm, verdicts, notes)
