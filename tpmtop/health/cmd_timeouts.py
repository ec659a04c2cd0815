"""The kernel's own time-out for this chip's slowest command, CreatePrimary (RSA key generation:
its time varies widely from one run to the next with the prime search), against the times the
captures show it took. Linux 6.18's "tpm: use a map for tpm2_calc_ordinal_duration"
(207696b17f38) cut CreatePrimary's time-out from 300 s (TPM_LONG_LONG) to 30 s: SLB9670/9672
chips failed intermittently (reported April 2026, a production case confirmed May 2026). Since
6.15 the TIS driver's timeout B is 4 s (2f661f71fda1: some Infineon chips take ~2,250 ms).

A capture's kernel is the one it was recorded on (``host.kernel``); the chip is its ``tpm``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpmtop.boot.facts import parse_release
from tpmtop.health.verdicts import Kind, Level, Verdict

# tpmtop's threshold, not the kernel's: the slowest CreatePrimary seen took this share of the
# kernel's time-out or more. Key generation's time is a tail (wolfTPM's SLB9670 RSA-2048
# keygen: 2,196 ms on average, and 6.18's 30 s was still reached now and then).
WARN_SHARE = 0.2
FIX_618 = "207696b17f38"
TIS_B_615 = "2f661f71fda1"


def kernel_timeout_s(release: str) -> tuple[float, str] | None:
    """CreatePrimary's time-out on that kernel, and why; None: not a Linux release string."""
    v = parse_release(release)
    if v is None:
        return None
    if v[:2] >= (6, 18):
        return 30.0, f"Linux {release}: 30 s since 6.18 ({FIX_618} cut it from 300 s)"
    return 300.0, f"Linux {release}: 300 s (TPM_LONG_LONG, before 6.18's {FIX_618})"


@dataclass
class CreatePrimaryTimes:
    """The CreatePrimary wire times of every capture fed, with the kernel and chip of each."""

    seen: list[dict[str, Any]] = field(default_factory=list)

    def feed_capture(self, cap: dict[str, Any], source: str) -> None:
        events = cap.get("events")
        if not isinstance(events, list):
            return
        h, t = cap.get("host"), cap.get("tpm")
        host: dict[str, Any] = h if isinstance(h, dict) else {}
        tpm: dict[str, Any] = t if isinstance(t, dict) else {}
        times = [e["wire_ns"] for e in events if isinstance(e, dict)
                 and str(e.get("command", "")).removeprefix("TPM2_CC_") == "CreatePrimary"
                 and isinstance(e.get("wire_ns"), int) and not isinstance(e.get("wire_ns"), bool)
                 and e.get("rc") in (0, None)]
        if times:
            chip = f"{tpm.get('manufacturer', '?')} fw {tpm.get('firmware', '?')}"
            self.seen.append({"source": source, "kernel": str(host.get("kernel") or "?"), "count": len(times),
                              "max_ns": max(times), "chip": chip, "simulated": bool(tpm.get("simulated"))})


def verdict(times: CreatePrimaryTimes) -> Verdict | None:
    """None when no capture held a CreatePrimary (nothing to judge, nothing said)."""
    if not times.seen:
        return None
    worst: tuple[float, dict[str, Any], str] | None = None
    ev = []
    for s in times.seen:
        k = kernel_timeout_s(s["kernel"])
        line = (f"{s['source']}: {s['count']} CreatePrimary on {s['chip']}"
                f"{' (simulated)' if s['simulated'] else ''}, slowest {s['max_ns'] / 1e9:.3f} s")
        if k is None:
            ev.append(f"{line}; kernel {s['kernel']!r} unknown: no time-out to compare with")
            continue
        share = s["max_ns"] / 1e9 / k[0]
        ev.append(f"{line} = {share:.1%} of the kernel's {k[0]:g} s time-out ({k[1]})")
        if not s["simulated"] and (worst is None or share > worst[0]):
            worst = (share, s, k[1])
    ev.append(f"the TIS driver's timeout B is 4 s since Linux 6.15 ({TIS_B_615}), 2 s before")
    data: tuple[tuple[str, object], ...] = (("captures", times.seen), ("warn_share", WARN_SHARE))
    if worst is None:
        return Verdict(Kind.CMD_TIMEOUTS, Level.INFO, "CreatePrimary times only from a simulator (or an unknown "
                       "kernel): they say nothing of a chip's", tuple(ev), data)
    share, s, why = worst
    if share >= WARN_SHARE:
        return Verdict(Kind.CMD_TIMEOUTS, Level.WARN,
                       f"CreatePrimary took {s['max_ns'] / 1e9:.1f} s on {s['chip']}: {share:.0%} of its kernel "
                       f"time-out ({why}); key generation's time varies, so the kernel may give up on it",
                       tuple(ev), data)
    return Verdict(Kind.CMD_TIMEOUTS, Level.OK, f"CreatePrimary's slowest {s['max_ns'] / 1e9:.2f} s is {share:.1%} "
                   f"of the kernel's time-out ({why})", tuple(ev), data)
