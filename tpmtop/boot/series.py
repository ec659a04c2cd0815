"""What an imported kernel trace says: per-function and per-TPM-command latency series.

Both parsers (ftrace.py, bpftrace.py) fill a :class:`TraceResult`; the loader that picks
the parser is :mod:`tpmtop.boot.traces` (it imports the parsers, they import only this).
A series keeps what the trace actually gave: exact per-call durations (ftrace), histogram
buckets (bpftrace hist), or sums over a number of calls that the output does not state
(bpftrace ``sum()`` maps) — so later arithmetic never invents per-call precision that a sum does not have.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpmtop.stats import LatencyHistogram

# Kernel function -> the TPM command it sends (drivers/char/tpm/tpm2-cmd.c, tpm2-sessions.c).
OP_FUNCS: dict[str, str] = {
    "tpm2_pcr_extend": "PCR_Extend",
    "tpm2_load_context": "ContextLoad",
    "tpm2_save_context": "ContextSave",
    "tpm2_flush_context": "FlushContext",
    "tpm2_start_auth_session": "StartAuthSession",
    "tpm2_get_random": "GetRandom",
    "tpm2_pcr_read": "PCR_Read",
    "tpm2_create_primary": "CreatePrimary",
    "tpm2_read_public": "ReadPublic",
    "tpm2_get_tpm_pt": "GetCapability",
    "tpm2_get_pcr_allocation": "GetCapability",
    "tpm2_get_cc_attrs_tbl": "GetCapability",
    "tpm2_startup": "Startup",
    "tpm2_shutdown": "Shutdown",
    "tpm2_do_selftest": "SelfTest",
    "tpm2_seal_trusted": "Create",
    "tpm2_load_cmd": "Load",
    "tpm2_unseal_cmd": "Unseal",
}
# The layers a command passes through; only the outermost one present is "the command".
TRANSMIT_FUNCS = ("tpm_transmit_cmd", "tpm_transmit", "tpm_try_transmit")
# Seen only when the kernel protects a command with an HMAC session.
HMAC_FUNCS = ("tpm2_start_auth_session", "tpm_buf_fill_hmac_session", "tpm_buf_check_hmac_response")

OP_EXTEND = "PCR_Extend"
OP_EXTEND_HMAC = "PCR_Extend (HMAC session)"
OP_SETUP_UNATTRIBUTED = "session setup (unattributed)"
# tpm2_start_auth_session() in 6.10+ sends these, in this order, when its helpers are not
# traced as separate functions.
SETUP_SEQUENCE = ("ContextLoad", "StartAuthSession", "FlushContext")


@dataclass
class Series:
    samples_ns: list[int] = field(default_factory=list)  # exact, one per call
    buckets: list[tuple[int | None, int | None, int]] = field(default_factory=list)  # [lo, hi) ns, count
    sums: list[tuple[int, int | None]] = field(default_factory=list)  # (total ns, calls or None)

    def merge(self, other: Series) -> None:
        self.samples_ns += other.samples_ns
        self.buckets += other.buckets
        self.sums += other.sums

    @property
    def calls(self) -> int | None:
        if any(c is None for _, c in self.sums):
            return None
        return len(self.samples_ns) + sum(c for *_, c in self.buckets) + sum(c or 0 for _, c in self.sums)

    @property
    def precision(self) -> str:
        if self.sums:
            return "sum"
        if self.buckets:
            return "bucket"
        return "exact"

    def histogram(self) -> LatencyHistogram:
        from tpmtop.stats import LatencyHistogram

        h = LatencyHistogram()
        for ns in self.samples_ns:
            h.record(ns)
        for lo, hi, c in self.buckets:
            if c and lo is not None and lo >= 0:
                # A bucket only says lo <= v < hi; its middle is the least-wrong single value.
                h.record(lo if hi is None else (lo + hi) // 2, c)
        return h

    def per_call_ns(self, calls_per_sum: int | None = None) -> tuple[float | None, str]:
        """A typical per-call duration and how it was obtained."""
        # The most precise kind of data wins; the others are not mixed in.
        if self.samples_ns:
            n = len(self.samples_ns)
            return float(statistics.median(self.samples_ns)), (
                "1 call" if n == 1 else f"median of {n} calls")
        if self.buckets:
            n = sum(c for *_, c in self.buckets)
            return float(self.histogram().percentile_ns(50)), (
                f"median of {n} calls read from histogram buckets (bucket resolution)")
        if self.sums:
            total = sum(t for t, _ in self.sums)
            calls = 0
            for _, c in self.sums:
                if c is None and calls_per_sum is None:
                    return None, ("a sum over an unstated number of calls "
                                  "(pass --bpftrace-calls N to say how many)")
                calls += c if c is not None else (calls_per_sum or 0)
            if calls <= 0:
                return None, "a sum over 0 calls"
            return total / calls, f"sum {total} ns / {calls} calls"
        return None, "no data"

    def exact_summary_us(self) -> dict[str, Any]:
        """Nearest-rank percentiles of the exact samples, in µs."""
        v = sorted(self.samples_ns)
        n = len(v)

        def rank(p: float) -> float:
            return v[max(0, math.ceil(p / 100 * n) - 1)] / 1000

        return {"count": n, "p50": rank(50), "p90": rank(90), "p99": rank(99), "max": v[-1] / 1000,
                "mean": round(sum(v) / n / 1000, 3)}

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"calls": self.calls, "precision": self.precision}
        if self.samples_ns or self.buckets:
            h = self.histogram()
            # HDR keeps 3 significant digits; exact samples deserve their own exact figures.
            d["summary_us"] = self.exact_summary_us() if self.precision == "exact" else h.summary()
            d["buckets_us"] = h.buckets()
        if self.samples_ns:
            d["total_us"] = sum(self.samples_ns) / 1000
        if self.sums:
            d["sums_us"] = [{"total": t / 1000, "calls": c} for t, c in self.sums]
        return d


@dataclass
class TraceResult:
    path: str
    format: str  # "ftrace function_graph" | "bpftrace"
    functions: dict[str, Series] = field(default_factory=dict)
    operations: dict[str, Series] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hmac_seen: bool = False

    def function(self, name: str) -> Series:
        return self.functions.setdefault(name, Series())

    def operation(self, name: str) -> Series:
        return self.operations.setdefault(name, Series())

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "hmac_seen": self.hmac_seen,
                "functions": {k: v.to_json() for k, v in sorted(self.functions.items())},
                "operations": {k: v.to_json() for k, v in sorted(self.operations.items())},
                "notes": self.notes}


def merged_operations(traces: list[TraceResult]) -> dict[str, Series]:
    out: dict[str, Series] = {}
    for t in traces:
        for name, s in t.operations.items():
            out.setdefault(name, Series()).merge(s)
    return out
