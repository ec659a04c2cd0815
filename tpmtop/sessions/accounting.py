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

    def add(self, total_ns: int, wire: list[tuple[int | None, int]]) -> None:
        wire_ns = sum(w for _, w in wire)
        self.ops += 1
        self.op_hist.record(total_ns)
        self.wire_hist.record(wire_ns)
        self.host_hist.record(max(total_ns - wire_ns, 0))
        for cc, w in wire:
            self.commands[cc] += 1
            h = self.command_hists.get(cc)
            if h is None:
                h = self.command_hists[cc] = LatencyHistogram()
            h.record(w)

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


def _cc_key(item: tuple[int | None, Any]) -> int:
    return item[0] if item[0] is not None else -1
