"""The kernel's TPM traffic as a ``tpmtop.capture/1`` document.

One run per observed origin (engine ``observed``, mode ``kernel``, op ``command``: every command
priced on its own, as for imported pcaps), plus one run per kind of kernel operation (engine
``kernel``, mode = the session behaviour the operations show — ``none``, ``per-command``,
``reuse`` — or ``unknown``, op ``extend``/``get_random``) with the operation's total, TPM and
host time, exactly like a bench run's. Each operation is in ``ops`` and its commands carry its
``op_seq``, so ``tpmtop boot --capture`` prices this kernel's extends and ``tpmtop compare``
sets them beside a bench run of the same mode. Layer: kernel; no Textual.
"""

from __future__ import annotations

from typing import Any

from tpmtop.importers.observed import capture_from_exchanges
from tpmtop.kernel.live import exchanges
from tpmtop.kernel.ops import for_a_client
from tpmtop.kernel.trace_pipe import KernelCommand, KernelOp
from tpmtop.stats import LatencyHistogram
from tpmtop.tpm import names

ENGINE = "kernel"


def own_summaries(commands: list[KernelCommand]) -> dict[str, Any]:
    """Per command code, the wire latencies of the kernel's own commands only — not a
    /dev/tpm* client's, not the resource manager's swaps for one (the run's per-command
    table has every command seen). `tpmtop boot --capture` prices the kernel's session steps
    from these: a tpm2_createprimary's StartAuthSession is not the kernel starting sessions."""
    hs: dict[str, Any] = {}
    for kc in commands:
        if for_a_client(kc) or not kc.answered:
            continue
        hs.setdefault(names.cc_name(kc.cc), LatencyHistogram()).record(kc.wire_ns)
    return {name: h.summary() for name, h in hs.items()}


def _op_ok(op: KernelOp) -> bool:
    if op.kind == "get_random":
        return op.ret is None or op.ret > 0 or (op.ret == 0 and all(c.rc == 0 for c in op.commands))
    return op.ret in (None, 0) and all(c.rc in (0, None) for c in op.commands)


def op_runs(ops: list[KernelOp], mode: str | None) -> list[dict[str, Any]]:
    """A bench-shaped run per kind of operation."""
    runs = []
    for kind in dict.fromkeys(op.kind for op in ops):
        mine = [op for op in ops if op.kind == kind]
        total, wire, host = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
        per_cc: dict[str, LatencyHistogram] = {}
        counts: dict[str, int] = {}
        errors = 0
        for op in mine:
            total.record(op.total_ns)
            wire.record(op.wire_ns)
            host.record(op.host_ns)
            errors += not _op_ok(op)
            for c in op.commands:
                name = names.cc_name(c.cc)
                h = per_cc.get(name)  # not setdefault(…, LatencyHistogram()): one built per command
                if h is None:
                    h = per_cc[name] = LatencyHistogram()
                h.record(c.wire_ns)
                counts[name] = counts.get(name, 0) + 1
        n = len(mine)
        estimated = sum(op.estimated for op in mine)
        runs.append({
            "engine": ENGINE, "mode": mode or "unknown", "op": kind, "ops": n, "errors": errors,
            "op_us": total.to_json(), "wire_us": wire.to_json(), "host_us": host.to_json(),
            "commands_per_op": {k: round(v / n, 4) for k, v in counts.items()},
            "commands": {k: h.to_json() for k, h in per_cc.items()},
            "timing": ("from the first command's entry to the last one's return (no operation probes)"
                       if estimated == n else f"{kind} function entry to return (kprobes)"
                       if not estimated else f"{n - estimated} of {n} by function probes")})
    return runs


def kernel_capture(commands: list[KernelCommand], ops: list[KernelOp], t0_unix_ns: int, parser: Any, source: str,
                   mode: str | None, this_machine: bool = True, xs: list[Any] | None = None,
                   simulated: bool = False) -> dict[str, Any]:
    """``parser``: a :class:`~tpmtop.kernel.trace_pipe.Parser`, or anything with its ``lost``,
    ``orphans`` and ``op_probes`` (the lab counts them itself).
    ``t0_unix_ns``: the wall-clock time of ``commands[0]``'s entry. ``this_machine``
    False (a saved trace): the capture does not claim this machine as the one traced.
    ``xs``: the commands as exchanges with their bytes, one per command in the same order,
    when the caller saw the wire (``tpmtop lab``); otherwise built from the probes' view."""
    base = commands[0].t_ns if commands else 0
    cap = capture_from_exchanges(xs if xs is not None else exchanges(commands, t0_unix_ns), origin="kernel",
                                 source=source, simulated=simulated, served_here=xs is not None,
                                 extra={"kernel_trace": {"lost_events": parser.lost, "orphans": parser.orphans,
                                                         "operation_probes": bool(parser.op_probes),
                                                         "kernel_commands": own_summaries(commands)}})
    if not this_machine:
        cap["host"] = {"hostname": "unknown", "kernel": "unknown",
                       "note": "read from a saved trace: the machine that recorded it is not known"}
    if not ops:
        return cap
    cap["runs"].extend(op_runs(ops, mode))
    t0 = cap.get("t0_unix_ns") or t0_unix_ns
    seq_of = {}
    op_list = []
    for i, op in enumerate(sorted(ops, key=lambda o: o.t_ns), 1):
        seq_of[op.id] = i
        op_list.append({"op_seq": i, "engine": ENGINE, "mode": mode or "unknown", "op": op.kind,
                        "t_ns": max(t0_unix_ns + op.t_ns - base - t0, 0), "total_ns": op.total_ns,
                        "wire_ns": op.wire_ns, "ok": _op_ok(op), "pid": op.pid, "comm": op.comm,
                        "setups": sum(1 for c in op.commands if c.cc in (0x161, 0x176, 0x165))})
    cap["ops"] = op_list
    # the events of an operation name it (events are in time order, as the commands were)
    member: dict[int, KernelOp] = {}
    for op in ops:
        for c in op.commands:
            member[id(c)] = op
    by_time = sorted(commands, key=lambda c: c.t_ns)
    for e, kc in zip(cap["events"], by_time, strict=False):
        in_op = member.get(id(kc))
        if in_op is not None:
            e.update(engine=ENGINE, mode=mode or "unknown", op=in_op.kind, op_seq=seq_of[in_op.id])
    return cap
