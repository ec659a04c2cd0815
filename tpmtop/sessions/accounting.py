"""Per-operation accounting: total, wire (sum of the TPM round trips) and host time
(the rest: marshalling, crypto, Python), per (engine, mode, op)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tpmtop.stats import LatencyHistogram
from tpmtop.tpm import names


@dataclass
class RunAccount:
    engine: str
    mode: str
    op: str
    ops: int = 0
    errors: int = 0
    setups: int = 0  # session set-ups done outside an operation (reuse/saved start, mode switch)
    sessions_lost: int = 0  # kept/saved session gone (flushed by someone else, TPM reset): set up again
    op_hist: LatencyHistogram = field(default_factory=LatencyHistogram)
    wire_hist: LatencyHistogram = field(default_factory=LatencyHistogram)
    host_hist: LatencyHistogram = field(default_factory=LatencyHistogram)
    commands: Counter[int | None] = field(default_factory=Counter)  # cc -> commands sent in counted operations
    command_hists: dict[int | None, LatencyHistogram] = field(default_factory=dict)
    # The host time of each command: the gap between the previous answer (or the operation's
    # start) and its send, and after the operation's last answer, the rest of the operation
    # (checking that answer's HMAC). Salt and ECDH land on StartAuthSession, the command HMAC
    # and its check on the HMAC'd command: a mode that was not run is priced from the host
    # work of the commands it would send, not from another mode's whole host time.
    command_host_hists: dict[int | None, LatencyHistogram] = field(default_factory=dict)
    # The basis of a kept session's extends not yet run (tpmtop.boot.projection, reuse), from
    # the `none` baseline's bursts (tpmtop.sources.live_workload): the wire time of each
    # burst's first operation, right after the mode's own (as per-command's PCR_Extend follows
    # its other commands: Eh against it is the TPM's own HMAC work); the wire and host time of
    # the ones past the burst's warm-up (back to back, each after the session's HMAC work);
    # and that HMAC work (command HMAC and response check,
    # tpmtop.sessions.native.session_hmac_host_ns), timed outside any operation. A kept
    # session's extends run back to back; one measured after a wait costs more, on the wire
    # and on the host (docs/dashboard.md).
    first_wire_hist: LatencyHistogram = field(default_factory=LatencyHistogram)
    b2b_wire_hist: LatencyHistogram = field(default_factory=LatencyHistogram)
    b2b_host_hist: LatencyHistogram = field(default_factory=LatencyHistogram)
    hmac_host_hist: LatencyHistogram = field(default_factory=LatencyHistogram)

    def add(self, total_ns: int, wire: list[tuple[int | None, int, int]], t0_ns: int | None = None) -> None:
        wire_ns = sum(w for _, w, _ in wire)
        self.ops += 1
        self.op_hist.record(total_ns)
        self.wire_hist.record(wire_ns)
        self.host_hist.record(max(total_ns - wire_ns, 0))
        for cc, _, _ in wire:
            self.commands[cc] += 1
        _record(self.command_hists, [(cc, w) for cc, w, _ in wire])
        if t0_ns is not None and wire:
            _record(self.command_host_hists, _host_split(total_ns, wire, t0_ns))

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.engine, self.mode, self.op)

    def commands_per_op(self) -> dict[str, float]:
        if not self.ops:
            return {}
        return {names.cc_name(cc): round(n / self.ops, 3) for cc, n in sorted(self.commands.items(), key=_cc_key)}

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine, "mode": self.mode, "op": self.op, "ops": self.ops,
            "errors": self.errors, "setups": self.setups, "sessions_lost": self.sessions_lost,
            "op_us": self.op_hist.to_json(), "wire_us": self.wire_hist.to_json(), "host_us": self.host_hist.to_json(),
            "commands_per_op": self.commands_per_op(),
            "commands": {names.cc_name(cc): h.to_json() for cc, h in sorted(self.command_hists.items(), key=_cc_key)},
        }


def _host_split(total_ns: int, wire: list[tuple[int | None, int, int]], t0_ns: int) -> list[tuple[int | None, int]]:
    """(cc, host ns) for each command of one operation (see ``command_host_hists``)."""
    out: list[tuple[int | None, int]] = []
    prev = t0_ns
    for cc, w, sent in wire:
        out.append((cc, max(sent - prev, 0)))
        prev = sent + w
    cc, host = out[-1]
    out[-1] = (cc, host + max(t0_ns + total_ns - prev, 0))
    return out


def _record(hists: dict[int | None, LatencyHistogram], values: list[tuple[int | None, int]]) -> None:
    for cc, v in values:
        h = hists.get(cc)
        if h is None:
            h = hists[cc] = LatencyHistogram()
        h.record(v)


def _cc_key(item: tuple[int | None, Any]) -> int:
    return item[0] if item[0] is not None else -1
