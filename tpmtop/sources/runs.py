"""One run per (engine, mode, op): from a live session engine's accounts or a capture's
``runs``, the same :class:`RunView`; and the boot projection's per-command costs from them.
No Textual here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tpmtop.sources.histreads import EMPTY, frozen_of, summary_of
from tpmtop.tpm import names


@dataclass
class RunView:
    engine: str
    mode: str
    op: str
    ops: int
    op_us: dict[str, Any]
    wire_us: dict[str, Any]
    host_us: dict[str, Any]
    commands_per_op: dict[str, float]
    commands: dict[str, dict[str, Any]]  # spec name -> summary (+ "histogram")
    op_buckets: Callable[[], list[Any]] | list[Any] | None = None
    wire_buckets: Callable[[], list[Any]] | list[Any] | None = None
    host_buckets: Callable[[], list[Any]] | list[Any] | None = None
    # spec name -> summary of each command's host time (tpmtop.sessions.accounting); live only
    command_host: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the basis of a kept session not yet run (µs by the projection's letter: Eb, hEb, hM, Ew10
    # from the `none` baseline's bursts, Eh10 from per-command; tpmtop.sessions.accounting); live only
    kept_basis: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.engine, self.mode, self.op)

    @property
    def commands_total(self) -> float:
        return sum(self.commands_per_op.values())


def run_from_account(key: tuple[str, str, str], acc: Any) -> RunView:
    """``acc``: a :class:`tpmtop.sessions.accounting.RunAccount` or the kernel's OpStats."""
    engine, mode, op = key
    ops = int(getattr(acc, "ops", 0) or 0)
    cmds = dict(getattr(acc, "commands", {}) or {})
    hists = dict(getattr(acc, "command_hists", {}) or {})
    host = dict(getattr(acc, "command_host_hists", {}) or {})
    # Each summary with the buckets of the same moment (a snapshot): the Latency table and
    # the histogram under it then count the same samples (tpmtop.sources.histreads.FrozenBuckets)
    (op_s, op_b), (wire_s, wire_b), (host_s, host_b) = (frozen_of(h) for h in (acc.op_hist, acc.wire_hist,
                                                                                 acc.host_hist))
    commands = {}
    for cc, h in hists.items():
        summ, b = frozen_of(h)
        commands[names.cc_name(cc)] = summ | {"histogram": b}
    return RunView(
        engine, mode, op, ops, op_s, wire_s, host_s,
        commands_per_op={names.cc_name(cc): n / ops for cc, n in cmds.items()} if ops else {},
        commands=commands, op_buckets=op_b, wire_buckets=wire_b, host_buckets=host_b,
        command_host={names.cc_name(cc): summary_of(h) for cc, h in host.items()},
        kept_basis=_kept_basis(acc, hists.get(CC_PCR_EXTEND) if mode == "per-command" else None))


CC_PCR_EXTEND = 0x182  # TPM2_CC_PCR_Extend
# the projection's letter -> (RunAccount's histogram, its percentile); the kernel's OpStats has none
_KEPT_BASIS = {"Eb": ("b2b_wire_hist", 50), "hEb": ("b2b_host_hist", 50), "hM": ("hmac_host_hist", 50),
               "Ew10": ("first_wire_hist", 10), "Ew75": ("first_wire_hist", 75)}


def _kept_basis(acc: Any, hmac_extend: Any) -> dict[str, float]:
    """The TPM's own HMAC work is read where waiting for a CPU adds least, at p10 of both
    extends measured after an operation (Eh10 − Ew10): their p50s, under load, carry the
    scheduler's wake-up, which is no TPM work, and swung −11 to +28 µs apart in six runs at
    load 11 (p10: −1 to +5; docs/dashboard.md). With them, Eh25 and Ew75: whether the HMAC'd
    extend is told apart from the plain one at all (tpmtop.boot.projection.tpm_hmac_work)."""
    out = {letter: h.percentile_ns(q) / 1000 for letter, (attr, q) in _KEPT_BASIS.items()
           if (h := getattr(acc, attr, None)) is not None and h.count}
    if hmac_extend is not None and hmac_extend.count:
        out["Eh10"] = hmac_extend.percentile_ns(10) / 1000
        out["Eh25"] = hmac_extend.percentile_ns(25) / 1000
    return out


def runs_from_accounts(accounts: dict[tuple[str, str, str], Any]) -> list[RunView]:
    return [run_from_account(k, a) for k, a in list(accounts.items()) if getattr(a, "ops", 0)]


def run_from_capture(r: dict[str, Any]) -> RunView:
    def summ(d: dict[str, Any] | None) -> dict[str, Any]:
        d = d or {}
        return {k: d.get(k, 0) for k in EMPTY}

    commands = {}
    for name, d in (r.get("commands") or {}).items():
        commands[name] = summ(d) | {"histogram": d.get("histogram") or []}
    return RunView(str(r.get("engine", "?")), str(r.get("mode", "?")), str(r.get("op", "?")),
                   int(r.get("ops", 0) or 0), summ(r.get("op_us")), summ(r.get("wire_us")),
                   summ(r.get("host_us")), dict(r.get("commands_per_op") or {}), commands,
                   op_buckets=(r.get("op_us") or {}).get("histogram") or [],
                   wire_buckets=(r.get("wire_us") or {}).get("histogram") or [],
                   host_buckets=(r.get("host_us") or {}).get("histogram") or [])


def boot_components(runs: list[RunView], engine: str = "native") -> dict[str, float]:
    """Per-command p50s (µs) for the boot projection (tpmtop.boot.projection's letters) from
    this sitting's extend runs: E0 = PCR_Extend in ``none``; L, S, F and Eh (PCR_Extend in an
    HMAC session) from ``per-command``, whose sequence is the kernel's 6.10 one."""
    if engine == "kernel":
        return _kernel_components(runs)
    by_mode = {r.mode: r for r in runs if r.op == "extend" and r.engine == engine and r.ops}
    out: dict[str, float] = {}
    want = {"E0": ("none", "TPM2_CC_PCR_Extend"), "L": ("per-command", "TPM2_CC_ContextLoad"),
            "S": ("per-command", "TPM2_CC_StartAuthSession"), "F": ("per-command", "TPM2_CC_FlushContext"),
            "Eh": ("per-command", "TPM2_CC_PCR_Extend")}
    want["C"] = ("saved", "TPM2_CC_ContextSave")  # measured only where it is sent
    for letter, (mode, cc) in want.items():
        run = by_mode.get(mode)
        d = run.commands.get(cc) if run is not None else None
        if d and d.get("p50"):
            out[letter] = float(d["p50"])
        # and the host work of that command, apart (hL, hS, …): a mode not run is priced from
        # its own commands' wire and host time, not from another mode's whole host time
        h = run.command_host.get(cc) if run is not None else None
        if h and h.get("count"):
            out["h" + letter] = float(h["p50"])
    # A kept session's extends, back to back, from the baseline's bursts (none's account): Eb
    # and hEb, the wire and host time of the extends past a burst's warm-up; hM, the session's
    # HMAC work before them; Ew10, the burst's first extend's wire time at p10 (after the
    # mode's operation, as per-command's PCR_Extend, Eh10, follows its other commands)
    for mode in ("none", "per-command"):
        run = by_mode.get(mode)
        out |= run.kept_basis if run is not None else {}
    # H, the host time of one per-command operation: the fallback basis where the commands'
    # host time is not known apart (a capture)
    pc = by_mode.get("per-command")
    if pc is not None and pc.host_us.get("p50"):
        out["H"] = float(pc.host_us["p50"])
    return out


def boot_per_mode(runs: list[RunView], engine: str = "native") -> dict[str, float]:
    """Each mode's extend op p50 (µs) from this sitting's runs of ``engine`` (the kernel's own
    extends with ``kernel``): the numbers the Modes panel shows, which the boot projection
    then multiplies as they are (as `tpmtop boot --capture` does a capture's), so the
    projection and the p50 above it are one set of numbers."""
    return {r.mode: float(r.op_us["p50"]) for r in runs
            if r.op == "extend" and r.engine == engine and r.ops and r.op_us.get("p50")}


def _kernel_components(runs: list[RunView]) -> dict[str, float]:
    """The same letters from the kernel's own extends (tpmtop --kernel): the set-up commands
    whatever the session mode, and its PCR_Extend as Eh when it ran in an HMAC session (the
    kernel started sessions), else as E0."""
    run = next((r for r in runs if r.engine == "kernel" and r.op == "extend" and r.ops), None)
    if run is None:
        return {}
    hmac = "TPM2_CC_StartAuthSession" in run.commands or run.mode in ("per-command", "reuse")
    out: dict[str, float] = {}
    for letter, cc in (("L", "TPM2_CC_ContextLoad"), ("S", "TPM2_CC_StartAuthSession"),
                       ("F", "TPM2_CC_FlushContext"), ("Eh" if hmac else "E0", "TPM2_CC_PCR_Extend")):
        d = run.commands.get(cc)
        if d and d.get("p50"):
            out[letter] = float(d["p50"])
    return out
