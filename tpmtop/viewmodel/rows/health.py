"""The Health panel's part: ``tpmtop health``'s verdicts, from what the source already has.

Lockout, and NV nearly full, from the variable properties the source's handle poll reads anyway
(no command of its own); who sent wrong passwords from its proxy's per-client response codes (``--listen``); the
set-up, driver and IMA verdicts (IMA's rate over the boot) from its sysfs root, read again at most every
:data:`SYSTEM_EVERY_S` (they include a ``dmesg`` run; the journal is left to ``tpmtop health``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from tpmtop.boot.facts import collect_health
from tpmtop.boot.rootfs import RootReader
from tpmtop.health import attribution, ima, lockout, nvspace, system
from tpmtop.health.verdicts import Kind, Level, Verdict, unknown
from tpmtop.sources.protocol import Source
from tpmtop.tpm.names import cc_short

SYSTEM_EVERY_S = 30.0


@dataclass(frozen=True)
class HealthLine:
    level: Level
    kind: Kind
    text: str
    evidence: str  # the first line of its evidence ("" when none)


@dataclass(frozen=True)
class HealthPart:
    lines: tuple[HealthLine, ...]

    @property
    def problems(self) -> int:
        return sum(1 for ln in self.lines if ln.level.problem)


# root -> (monotonic time read, verdicts): the system verdicts change slowly and cost a dmesg run
_SYSTEM: dict[str, tuple[float, list[Verdict]]] = {}
_SYSTEM_LOCK = threading.Lock()


def _system(root: str) -> list[Verdict]:
    now = time.monotonic()
    with _SYSTEM_LOCK:
        hit = _SYSTEM.get(root)
        if hit is not None and now - hit[0] < SYSTEM_EVERY_S:
            return hit[1]
    reader = RootReader(root)
    facts = collect_health(reader, journal=False)
    # IMA's rate over the boot only (no sampling sleep here) and not its list (megabytes)
    verdicts = system.verdicts(system.Inputs(reader, facts)) + [ima.verdict(reader, facts, 0.0, top_files=False)]
    with _SYSTEM_LOCK:
        _SYSTEM[root] = (now, verdicts)
    return verdicts


def _auth_failures(source: Source) -> attribution.AuthFailureLog:
    log = attribution.AuthFailureLog()
    accounts = getattr(source.proxy, "accounts", None)
    if accounts is None:
        return log
    for c in accounts.snapshot():
        for (cc, rc), n in dict(c.error_codes).items():
            log.observe(cc_short(cc), rc, attribution.Who(c.name, c.peer.pid, "proxy"), None, n)
    return log


def _line(v: Verdict) -> HealthLine:
    return HealthLine(v.level, v.kind, v.text, v.evidence[0] if v.evidence else "")


def part(source: Source) -> HealthPart:
    verdicts: list[Verdict] = []
    var = source.da_properties()
    log = _auth_failures(source)
    if var is not None:
        try:
            verdicts.append(lockout.verdict(lockout.DaState.from_properties(var), log.culprits()))
        except KeyError as e:
            verdicts.append(unknown(Kind.LOCKOUT, f"the TPM did not report {e.args[0]}"))
        # the TPM's own state from the same poll (no command of its own), shown when it is a
        # problem: the panel has a few lines (tpmtop health lists every one)
        room = nvspace.room_verdict(var)
        if room is not None and room.level.problem:
            verdicts.append(room)
    elif source.caps.handles:
        verdicts.append(unknown(Kind.LOCKOUT, "waiting for the first poll"))
    else:
        verdicts.append(unknown(Kind.LOCKOUT, "no TPM polled here (tpmtop health -T … asks one)"))
    if source.proxy is not None:
        verdicts.append(attribution.verdict(log, ["the proxy's clients"]))
    if source.sysfs is not None and source.caps.sysfs:
        verdicts += _system(str(source.sysfs.root))
    return HealthPart(tuple(_line(v) for v in verdicts))
