"""What one lab boot measured, from the TPM traffic tpmtop relayed and the guest's console.

The relay sees every command on the wire, from three senders it tells apart by time:
qemu's device probe (before the first CMD_INIT), the firmware (SeaBIOS: Startup, its own PCR
extends, the platform hierarchy's auth — before the kernel's first console line, "Linux
version", printed at once through ``earlycon``), and the kernel (everything after). The lab's
guest runs nothing that opens /dev/tpm*, so the kernel's commands are all its own.

The kernel's commands become :class:`~tpmtop.kernel.trace_pipe.KernelCommand`\\ s, assembled
into operations (set-up commands closed by a PCR_Extend or GetRandom) and named by
:class:`~tpmtop.kernel.ops.KernelAccounts` exactly as ``tpmtop kernel`` names a live kernel's —
here with each command's session handle read from its bytes, so a kept session is seen as one.

Layer: lab; no Textual.
"""

from __future__ import annotations

import enum
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tpmtop.importers.observed import ObservedExchange
from tpmtop.kernel.ops import CC_START_AUTH_SESSION, Assembler, KernelAccounts
from tpmtop.kernel.trace_pipe import KernelCommand, KernelOp, kernel_path
from tpmtop.lab.guest import Boot
from tpmtop.lab.guest_tpm import Wire
from tpmtop.tpm import names, wire

TPM_RH_NULL = 0x40000007
CC_CREATE_PRIMARY = 0x131


class Sender(enum.StrEnum):
    """Who sent a command on the guest's TPM."""

    PROBE = "qemu probe"
    FIRMWARE = "firmware"
    KERNEL = "kernel"


@dataclass
class BootStats:
    """One boot's figures (times in seconds or µs as named)."""

    kernel: str
    index: int
    release: str | None
    ok: bool
    problems: list[str]
    host_to_kernel_s: float | None  # qemu start to the kernel's first line (firmware, loader)
    host_to_init_s: float | None
    host_to_workload_end_s: float | None
    host_total_s: float | None  # qemu start to its exit
    guest_init_s: float | None  # the guest's uptime at /init
    guest_workload_end_s: float | None
    guest_workload_s: float | None  # the guest's uptime across the workload
    host_workload_s: float | None
    ima_measurements: int | None  # IMA's count at the workload's end
    ima_workload: int | None  # measurements the workload made
    commands_by_sender: dict[str, int]
    commands_at_boot: Counter[str]  # the kernel's, up to the workload's start: command name -> count
    commands_total: Counter[str]  # the kernel's, whole boot
    tpm_time_boot_s: float  # the kernel's commands' wire time up to the workload
    tpm_time_total_s: float  # the kernel's, whole boot
    firmware_tpm_time_s: float
    sessions_started: int
    salted_sessions: int
    null_primaries: int  # CreatePrimary in the NULL hierarchy (the kernel's null key, at probe)
    mode: str | None
    mode_why: str
    extends: int  # the kernel's PCR extend operations, whole boot
    extends_with_setup: int
    hmac_extends: int
    password_extends: int
    workload_extends: int
    workload_extend_tpm_us: float | None  # mean TPM time of one extend operation in the workload
    workload_extend_tpm_p50_us: float | None
    workload_tpm_s: float  # every kernel command's wire time in the workload window
    extend_tpm_s: float  # all extend operations' TPM time, whole boot
    setup_after: dict[str, int] = field(default_factory=dict)
    capture_path: str | None = None
    hmac_config: str | None = None  # the guest's /proc/config.gz says (None: no IKCONFIG_PROC)
    probes: ProbeView | None = None  # the in-guest kprobe view, when the guest was traced
    # the workload's extends by command sequence ("ContextLoad StartAuthSession FlushContext
    # PCR_Extend" -> count), and each command's mean TPM ms inside them: what one extend costs
    extend_shapes: dict[str, int] = field(default_factory=dict)
    extend_command_ms: dict[str, float] = field(default_factory=dict)
    workload_extends_with_setup: int = 0
    retried_after: str | None = None  # the first attempt's failure when this boot is a retry

    @property
    def workload_extend_tpm_s(self) -> float | None:
        """The workload's extends' TPM time, all of it (the benchmark's seconds for N)."""
        if self.workload_extend_tpm_us is None:
            return None
        return self.workload_extend_tpm_us * self.workload_extends / 1e6

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["probes"] = self.probes.to_json() if self.probes is not None else None
        d["commands_at_boot"] = dict(self.commands_at_boot)
        d["commands_total"] = dict(self.commands_total)
        return d


def sender_of(b: Boot, w: Wire) -> Sender:
    if w.inits == 0:
        return Sender.PROBE
    k = b.marks.get("kernel")
    if k is None or w.t_mono_ns < k[0]:
        return Sender.FIRMWARE
    return Sender.KERNEL


def kernel_commands(b: Boot) -> tuple[list[KernelCommand], list[ObservedExchange]]:
    """The kernel's commands as KernelCommands (trace clock: perf_counter ns) and Exchanges with
    their bytes (wall clock anchored once, so both keep one order)."""
    kcs, xs = [], []
    anchor = None
    for w in b.wire:
        if sender_of(b, w) != Sender.KERNEL:
            continue
        if anchor is None:
            anchor = w.t_unix_ns - w.t_mono_ns
        info = wire.decode_command(w.command)
        rsp = wire.decode_response(w.response, info.cc) if w.response is not None else None
        rc = rsp.rc if rsp is not None else None
        session = info.sessions[0][0] if info.sessions else None
        kc = KernelCommand(
            t_ns=w.t_mono_ns,
            wire_ns=w.wire_ns,
            pid=0,
            comm="guest",
            cpu=0,
            cpu_return=0,
            cc=info.cc,
            tag=int.from_bytes(w.command[0:2], "big"),
            size=info.size,
            rc=rc,
            ret=len(w.response) if w.response is not None else -5,
            desc=None,
            path=kernel_path(info.cc, None, "guest", True),
            session=session,
        )
        kcs.append(kc)
        xs.append(
            ObservedExchange(
                t_unix_ns=anchor + w.t_mono_ns,
                wire_ns=w.wire_ns,
                command=w.command,
                response=w.response,
                extra={"path": kc.path},
            )
        )
    return kcs, xs


def operations(kcs: list[KernelCommand]) -> tuple[list[KernelOp], KernelAccounts]:
    asm, acc = Assembler(), KernelAccounts()
    ops = []
    for kc in kcs:
        acc.add_command(kc)
        op = asm.feed(kc)
        if op is not None:
            ops.append(op)
            acc.add_op(op)
    return ops, acc


SETUP_SHAPE = ("ContextLoad", "StartAuthSession", "FlushContext", "PCR_Extend")  # 6.10/6.11's extend (domain §2)


def extend_shape(op: KernelOp) -> str:
    """The operation's commands by name, in order: "ContextLoad StartAuthSession FlushContext
    PCR_Extend" for a per-command extend, "PCR_Extend" on a kept session. A FlushContext of the
    previous get_random's session that came before it is part of the sequence as the Assembler
    sees it (the kernel sent it between the two operations)."""
    return " ".join(names.cc_short(c.cc) for c in op.commands)


def shapes_and_costs(ops: list[KernelOp]) -> tuple[dict[str, int], dict[str, float]]:
    """(command sequence -> count, command name -> mean TPM ms inside these operations)."""
    shapes = Counter(extend_shape(op) for op in ops)
    sums: dict[str, list[float]] = {}
    for op in ops:
        for c in op.commands:
            sums.setdefault(names.cc_short(c.cc), []).append(c.wire_ns / 1e6)
    return dict(shapes.most_common()), {k: sum(v) / len(v) for k, v in sums.items()}


INT3_OOPS = re.compile(r"Oops: int3\b")
PANIC = re.compile(r"Kernel panic - not syncing|\bOops: ")


def int3_oops(b: Boot) -> str | None:
    """The console line of an ``Oops: int3`` (a kprobe's breakpoint hit while its instruction
    was being patched, seen under multi-threaded TCG with the boot-time probes armed), or None."""
    for _, line in b.console:
        if INT3_OOPS.search(line):
            return line.strip()
    return None


def panic_line(b: Boot) -> str | None:
    """The guest kernel's first Oops or panic line on the console, or None."""
    for _, line in b.console:
        if PANIC.search(line):
            return line.strip()
    return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


_N = TypeVar("_N", int, float)


def _sub(a: _N | None, b: _N | None) -> _N | None:
    return None if a is None or b is None else a - b


def workload_extends(b: Boot, ext: list[KernelOp], t_ws: int | None, t_we: int | None) -> list[KernelOp]:
    """The extend operations for the workload's files. Every PCR_Extend this guest's kernel
    sends is IMA's (no other kernel user extends here), in the order of IMA's list: the k-th
    extend is the k-th entry, so the workload's are those whose entry names a workload file.
    Without the list (the guest saved none), the operations between the workload's two console
    lines — which can miss one at an edge: a line is stamped when the host reads it."""
    paths = b.ima_paths
    if paths and len(ext) >= len(paths):
        return [op for op, path in zip(ext, paths, strict=False) if "/workload/file-" in path]
    if t_ws is None or t_we is None:
        return []
    return [op for op in ext if t_ws <= op.t_ns < t_we]


def boot_stats(
    b: Boot,
) -> tuple[BootStats, list[KernelCommand], list[ObservedExchange], list[KernelOp], KernelAccounts]:
    kcs, xs = kernel_commands(b)
    ops, acc = operations(kcs)
    senders = Counter(sender_of(b, w).value for w in b.wire)
    ws = b.marks.get("workload-start")
    we = b.marks.get("workload-end")
    t_ws = ws[0] if ws else None
    t_we = we[0] if we else None
    at_boot = [kc for kc in kcs if t_ws is None or kc.t_ns < t_ws]
    in_work = [kc for kc in kcs if t_ws is not None and t_we is not None and t_ws <= kc.t_ns < t_we]
    ext = [op for op in ops if op.kind == "extend"]
    work_ext = workload_extends(b, ext, t_ws, t_we)
    st_ext = acc.by_kind.get("extend")
    c0, c1 = _int(b.mark_value("workload-start", 1)), _int(b.mark_value("workload-end", 1))
    starts = [kc for kc in kcs if kc.cc == CC_START_AUTH_SESSION]
    salted = 0
    for w in b.wire:
        if sender_of(b, w) == Sender.KERNEL and int.from_bytes(w.command[6:10], "big") == CC_START_AUTH_SESSION:
            info = wire.decode_command(w.command)
            salted += bool(info.handles) and info.handles[0] != TPM_RH_NULL
    nulls = 0
    for w in b.wire:
        if sender_of(b, w) == Sender.KERNEL and int.from_bytes(w.command[6:10], "big") == CC_CREATE_PRIMARY:
            info = wire.decode_command(w.command)
            nulls += bool(info.handles) and info.handles[0] == TPM_RH_NULL
    mode, why = acc.mode()
    work_us = sorted(op.wire_ns / 1000 for op in work_ext)
    shapes, cmd_ms = shapes_and_costs(work_ext)
    panic = panic_line(b)
    ok = not b.timed_out and b.qemu_status == 0 and "workload-end" in b.marks and not b.problems and panic is None
    s = BootStats(
        kernel=b.kernel.name,
        index=b.index,
        release=b.marks.get("release", (0, None))[1] or b.release,
        ok=ok,
        problems=list(b.problems)
        + ([f"the guest kernel crashed: {panic}"] if panic else [])
        + ([] if "workload-end" in b.marks else ["the workload did not finish"]),
        host_to_kernel_s=b.host_s("kernel"),
        host_to_init_s=b.host_s("init"),
        host_to_workload_end_s=b.host_s("workload-end"),
        host_total_s=(b.qemu_end_ns - b.qemu_start_ns) / 1e9 if b.qemu_end_ns else None,
        guest_init_s=b.guest_s("init"),
        guest_workload_end_s=b.guest_s("workload-end"),
        guest_workload_s=_sub(b.guest_s("workload-end"), b.guest_s("workload-start")),
        host_workload_s=(t_we - t_ws) / 1e9 if t_ws and t_we else None,
        ima_measurements=c1,
        ima_workload=_sub(c1, c0),
        commands_by_sender=dict(senders),
        commands_at_boot=Counter(names.cc_short(kc.cc) for kc in at_boot),
        commands_total=Counter(names.cc_short(kc.cc) for kc in kcs),
        tpm_time_boot_s=sum(kc.wire_ns for kc in at_boot) / 1e9,
        tpm_time_total_s=sum(kc.wire_ns for kc in kcs) / 1e9,
        firmware_tpm_time_s=sum(w.wire_ns for w in b.wire if sender_of(b, w) == Sender.FIRMWARE) / 1e9,
        sessions_started=len(starts),
        salted_sessions=salted,
        null_primaries=nulls,
        mode=mode,
        mode_why=why,
        extends=len(ext),
        extends_with_setup=st_ext.with_setup if st_ext else 0,
        hmac_extends=st_ext.hmac if st_ext else 0,
        password_extends=st_ext.password if st_ext else 0,
        workload_extends=len(work_ext),
        workload_extend_tpm_us=sum(work_us) / len(work_us) if work_us else None,
        workload_extend_tpm_p50_us=work_us[len(work_us) // 2] if work_us else None,
        workload_tpm_s=sum(kc.wire_ns for kc in in_work) / 1e9,
        extend_tpm_s=sum(op.wire_ns for op in ext) / 1e9,
        setup_after=dict(st_ext.setup_after) if st_ext else {},
        extend_shapes=shapes,
        extend_command_ms=cmd_ms,
        workload_extends_with_setup=sum(
            1 for op in work_ext if any(c.cc == CC_START_AUTH_SESSION for c in op.commands)
        ),
    )
    cfg = b.mark_value("hmac_config", 0)
    if cfg and cfg != "unknown":
        s.hmac_config = "y" if cfg.endswith("=y") else "n"
    return s, kcs, xs, ops, acc


@dataclass
class ProbeView:
    """What tpmtop's kprobes inside the guest saw (``tpmtop kernel --trace`` on the trace
    the guest saved after its workload), set against the wire up to the same moment."""

    commands: int
    extends: int
    extends_with_setup: int
    sessions: int
    mode: str | None
    mode_why: str
    differences: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__) | {"agrees": self.agrees}


def probe_view(path: str, b: Boot, kcs: list[KernelCommand]) -> ProbeView | None:
    """None when the guest saved no trace (booted without the probes, or no tracefs)."""
    import os

    from tpmtop.kernel.live import file_lines
    from tpmtop.kernel.tap import KernelTap

    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return None
    tap = KernelTap(trace_path=path)
    seen = []
    for lines in file_lines(path):
        seen += tap.feed(lines)
    seen += tap.finish()
    acc = tap.accounts
    ext = acc.by_kind.get("extend")
    mode, why = acc.mode()
    pv = ProbeView(len(seen), ext.ops if ext else 0, ext.with_setup if ext else 0, acc.sessions_started, mode, why)
    # the wire up to the guest's "done" line (the trace was read just before it)
    done = b.marks.get("done")
    wire_kcs = [kc for kc in kcs if done is None or kc.t_ns < done[0]]
    _wire_ops, wire_acc = operations(wire_kcs)
    w_ext = wire_acc.by_kind.get("extend")
    pairs = (
        ("commands", pv.commands, len(wire_kcs)),
        ("PCR extends", pv.extends, w_ext.ops if w_ext else 0),
        ("extends that set up a session", pv.extends_with_setup, w_ext.with_setup if w_ext else 0),
        ("StartAuthSession", pv.sessions, wire_acc.sessions_started),
        ("session mode", pv.mode, wire_acc.mode()[0]),
    )
    for what, probes_saw, wire_saw in pairs:
        if probes_saw != wire_saw:
            pv.differences.append(f"{what}: kprobes {probes_saw}, wire {wire_saw}")
    return pv
