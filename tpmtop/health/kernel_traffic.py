"""The kernel's own TPM traffic in a capture of ``tpmtop kernel`` (``tpmtop health --capture``):
what the hwrng costs (its GetRandom commands' share of the kernel's TPM time, and their tail
against the rest of the kernel's commands), and which processes IMA's extends are for.

The kernel view already names each command's path (:func:`tpmtop.kernel.trace_pipe.kernel_path`:
"hwrng / get_random", "PCR extend (IMA / kernel)", …) and the task it ran in, so this only
groups and sums; the wire time is the driver's (tpm_transmit), the TPM's time as the kernel
saw it. Layer: health; no Textual."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tpmtop.textsafe import safe

HWRNG_PATH = "hwrng / get_random"
EXTEND_PATH = "PCR extend (IMA / kernel)"
# A GetRandom that holds the TPM this long holds its caller (the hwrng kthread, or a reader of
# /dev/hwrng) long enough to be felt: the fTPM stutters that led to kernel commit ffe4a34b29aa.
# tpmtop's threshold, not the kernel's.
STALL_NS = 100_000_000
TOP = 5


def _p(xs: list[int], q: float) -> int:
    """The q-quantile of ``xs`` (nearest rank): what a reader can recompute from the events."""
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


@dataclass
class KernelTraffic:
    """The kernel's commands of every capture fed, by path and by task."""

    commands: int = 0
    wire_ns: int = 0
    hwrng: list[int] = field(default_factory=list)  # wire ns of each hwrng GetRandom
    rest: list[int] = field(default_factory=list)  # wire ns of every other kernel command
    extends: Counter[str] = field(default_factory=Counter)  # task -> IMA/kernel extends
    extend_ns: Counter[str] = field(default_factory=Counter)  # task -> their wire ns
    # every command of every capture that says when its t_ns 0 was on the wall clock (a kernel
    # capture's t0_unix_ns, a run/proxy capture's t0_wall): (start unix ns, wire ns, command, who)
    timeline: list[tuple[int, int, str, str]] = field(default_factory=list)

    def feed_capture(self, cap: dict[str, Any]) -> int:
        """The kernel's events of one capture (none in a proxy or run capture); returns how many.
        Every event with a wall-clock time goes on :attr:`timeline`, the kernel's or not."""
        events = cap.get("events")
        if not isinstance(events, list):
            return 0
        self._feed_timeline(cap, events)
        n = 0
        for e in events:
            if not isinstance(e, dict) or e.get("origin") != "kernel":
                continue
            wire = e.get("wire_ns")
            if not isinstance(wire, int) or isinstance(wire, bool) or wire < 0:
                continue
            path = str(e.get("path") or "")
            n += 1
            self.commands += 1
            self.wire_ns += wire
            if path.startswith(HWRNG_PATH) and str(e.get("command", "")).endswith("GetRandom"):
                self.hwrng.append(wire)
            else:
                self.rest.append(wire)
            if path.startswith(EXTEND_PATH):
                task = str(e.get("comm") or "?")
                self.extends[task] += 1
                self.extend_ns[task] += wire
        return n

    def _feed_timeline(self, cap: dict[str, Any], events: list[Any]) -> None:
        import datetime as dt

        t0 = cap.get("t0_unix_ns")
        if not (isinstance(t0, int) and not isinstance(t0, bool)):
            t0 = None
            wall = cap.get("t0_wall")
            if isinstance(wall, str):
                try:
                    w = dt.datetime.fromisoformat(wall)
                    t0 = int(w.timestamp() * 1e9) if w.tzinfo is not None else None
                except ValueError:
                    t0 = None
        if t0 is None:
            return
        clients = {c.get("id"): c for c in cap.get("clients") or [] if isinstance(c, dict)}
        for e in events:
            if not isinstance(e, dict):
                continue
            t, wire = e.get("t_ns"), e.get("wire_ns")
            if not (isinstance(t, int) and isinstance(wire, int)) or isinstance(t, bool) or isinstance(wire, bool):
                continue
            c = clients.get(e.get("client"))
            who = str(e.get("comm") or (c.get("name") if c else None) or e.get("origin") or "?")
            self.timeline.append((t0 + t, wire, str(e.get("command", "?")).removeprefix("TPM2_CC_"), who))

    def command_at(self, unix_ns: int, slack_ns: int = 1_000_000_000) -> tuple[str, str, float] | None:
        """The command in flight at ``unix_ns`` (started before it and answered no earlier than
        ``slack_ns`` before it: a time-out message is printed when the wait ends), latest start
        first: (command, who, seconds from its start to then). None: nothing seen then."""
        best = None
        for start, wire, cmd, who in self.timeline:
            if start <= unix_ns <= start + wire + slack_ns and (best is None or start > best[0]):
                best = (start, cmd, who)
        if best is None:
            return None
        return best[1], best[2], (unix_ns - best[0]) / 1e9

    # -- the hwrng -------------------------------------------------------------------------------
    def hwrng_lines(self) -> list[str]:
        if not self.commands:
            return []
        if not self.hwrng:
            return [f"kernel capture: no hwrng GetRandom among the kernel's {self.commands} TPM commands"]
        hw_ns = sum(self.hwrng)
        line = (f"kernel capture: {len(self.hwrng)} hwrng GetRandom of the kernel's {self.commands} TPM commands "
                f"({len(self.hwrng) / self.commands:.0%}), {hw_ns / 1e6:.1f} ms of its {self.wire_ns / 1e6:.1f} ms "
                f"of TPM time ({hw_ns / self.wire_ns if self.wire_ns else 0:.0%})")
        out = [line, f"hwrng GetRandom wire time: p50 {_p(self.hwrng, 0.5) / 1e6:.2f} ms, "
                     f"p99 {_p(self.hwrng, 0.99) / 1e6:.2f} ms, max {max(self.hwrng) / 1e6:.2f} ms"
                     + (f"; the kernel's other commands p99 {_p(self.rest, 0.99) / 1e6:.2f} ms" if self.rest else "")]
        if len(self.hwrng) < 100:
            out.append(f"({len(self.hwrng)} hwrng commands: too few for a p99 to mean more than their max)")
        return out

    def hwrng_data(self) -> dict[str, Any] | None:
        if not self.commands:
            return None
        return {"commands": len(self.hwrng), "kernel_commands": self.commands,
                "wire_ns": sum(self.hwrng), "kernel_wire_ns": self.wire_ns,
                "max_ns": max(self.hwrng) if self.hwrng else None,
                "p99_ns": _p(self.hwrng, 0.99) if self.hwrng else None,
                "rest_p99_ns": _p(self.rest, 0.99) if self.rest else None}

    @property
    def hwrng_stalls(self) -> int:
        return sum(1 for w in self.hwrng if w >= STALL_NS)

    def _share(self, ns: int) -> str:
        return f"{ns / self.wire_ns:.0%}" if self.wire_ns else "-"

    # -- IMA ---------------------------------------------------------------------------------------
    def ima_lines(self) -> list[str]:
        if not self.commands:
            return []
        total = sum(self.extends.values())
        if not total:
            return [f"kernel capture: no PCR extend among the kernel's {self.commands} TPM commands"]
        ext_ns = sum(self.extend_ns.values())
        out = [f"kernel capture: {total} extends ({ext_ns / 1e6:.1f} ms, {self._share(ext_ns)} of the kernel's "
               "TPM time), by the task they ran in (whose file IMA measured):"]
        for task, k in self.extends.most_common(TOP):
            ns = self.extend_ns[task]
            out.append(f"  {safe(task)}: {k} extends, {ns / 1e6:.1f} ms ({self._share(ns)})")
        return out

    def ima_data(self) -> list[dict[str, Any]] | None:
        if not self.commands:
            return None
        return [{"task": t, "extends": k, "wire_ns": self.extend_ns[t]} for t, k in self.extends.most_common(TOP)]
