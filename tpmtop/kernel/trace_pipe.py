"""Parsing tracefs ``trace_pipe``/``trace`` text of tpmtop's kprobe events into TPM commands.

The line layout (Documentation/trace/ftrace.rst, "Output format") changed over the years:

    # 4.x with irq-info:   <comm>-<pid> [cpu] d... <secs>.<usecs>: <event>: (<loc>) args
    # 5.x with record-tgid <comm>-<pid> (<tgid>) [cpu] d... <secs>.<usecs>: …
    # 6.x:                 <comm>-<pid> [cpu] d..1. <secs>.<usecs>: …   (5 latency chars)
    # irq-info off:        <comm>-<pid> [cpu] <secs>.<usecs>: …
    # lost events:         CPU:2 [LOST 117 EVENTS]

A kretprobe's location is ``(<caller>+off/size <- <function>)``. The comm may hold spaces
and dashes (``kworker/u8:2-events_unbound-97``). Per-CPU buffers are merged in time order,
so the entry and the return of one call may come from different CPUs (the task migrated),
and other tasks' events interleave: entries are matched to returns per task (pid), as a
stack, since ``tpm_transmit_cmd`` encloses ``tpm_transmit``.

Probe arguments read the command header from the kernel's buffer in the CPU's byte order
(kprobes have no big-endian fetch type); the parser swaps them to TPM wire order.
Core module (layer sources): no Textual.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any

from tpmtop.kernel import probes
from tpmtop.textsafe import safe

_LINE = re.compile(
    r"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+(?:\(\s*(?P<tgid>[-\d]+)\)\s+)?\[(?P<cpu>\d+)\]\s+"
    r"(?:(?P<flags>[^\s\[\]]{4,6})\s+)?(?P<secs>\d+)\.(?P<frac>\d+):\s+(?P<event>[\w.]+):\s+"
    r"\((?P<loc>[^)]*)\)\s*(?P<args>.*)$")
_LOST = re.compile(r"^\s*CPU:(?P<cpu>\d+)\s+\[LOST\s+(?P<n>\d+)\s+EVENTS\]")
_ARG = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


@dataclass
class TraceEvent:
    comm: str
    pid: int
    cpu: int
    t_ns: int
    event: str
    loc: str
    args: dict[str, str]


def _swap32(v: int, byteorder: str) -> int:
    return int.from_bytes(v.to_bytes(4, "little"), "big") if byteorder == "little" else v


def _swap16(v: int, byteorder: str) -> int:
    return int.from_bytes(v.to_bytes(2, "little"), "big") if byteorder == "little" else v


def parse_line(line: str) -> TraceEvent | tuple[int, int] | None:
    """A TraceEvent, ``(cpu, n)`` for a lost-events marker, or None (comments, other text)."""
    if not line or line.lstrip().startswith("#"):
        return None
    m = _LOST.match(line)
    if m:
        return int(m["cpu"]), int(m["n"])
    m = _LINE.match(line.rstrip("\n"))
    if not m:
        return None
    frac = m["frac"]
    if len(m["secs"]) > 11:  # over 3,000 years of uptime: not a trace clock, a hostile line
        return None
    t_ns = int(m["secs"]) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])
    args = {}
    for k, v in _ARG.findall(m["args"]):
        args[k] = v[1:-1] if v.startswith('"') else v
    # comm=$comm, fetched by the probe itself, beats the line's (tracefs's saved_cmdlines
    # cache, "<...>" once the pid was evicted on a busy system)
    comm = args.get("comm") or m["comm"].strip()
    # A task names itself (prctl PR_SET_NAME): whatever it holds is shown, and stored in
    # captures, with terminal control characters escaped (an ESC ] 0 ; … title sequence, say)
    return TraceEvent(safe(comm), int(m["pid"]), int(m["cpu"]), t_ns, m["event"], safe(m["loc"]),
                      {k: safe(v) for k, v in args.items()})


def _num(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


@dataclass
class KernelCommand:
    """One TPM command the kernel sent (tpm_transmit entry to return)."""

    t_ns: int  # trace clock at entry
    wire_ns: int
    pid: int  # who the command was for: the task, or the /dev/tpm* client that wrote it
    comm: str
    cpu: int
    cpu_return: int
    cc: int | None
    tag: int | None
    size: int | None
    rc: int | None  # tpm_transmit_cmd's return, or the response header at tpm2_commit_space
    ret: int | None  # tpm_transmit's return: response length, or -errno
    desc: str | None  # tpm_transmit_cmd's description ("attempting extend a PCR value" …)
    path: str  # which kernel path sent it
    caller: str | None = None  # the function that called tpm_transmit_cmd
    task: str | None = None  # "kworker/0:1-10": the task that ran it, when not the client itself
    device: str | None = None  # /dev/tpm0 or /dev/tpmrm0, when the probes saw which
    op: int | None = None  # the KernelOp (tpm2_pcr_extend / tpm2_get_random call) it belongs to
    session: int | None = None  # the first session's handle (HMAC 0x02……, TPM_RS_PW), when traced

    @property
    def migrated(self) -> bool:
        return self.cpu != self.cpu_return

    @property
    def answered(self) -> bool:
        """The TPM answered: the transmit function returned a response's length, not -errno
        (a command whose return was never seen has ``ret`` None)."""
        return self.ret is not None and self.ret >= 0

    @property
    def expected_error(self) -> bool:
        """The resource manager's ContextSave of a session the TPM had already ended:
        TPM_RC_REFERENCE_H0 (0x910), which tpm2_save_context (tpm2-space.c) takes to mean
        "flushed meanwhile" and goes on. A TPM error on the wire, but no failure."""
        return self.cc == 0x162 and self.rc == 0x910 and self.path.startswith(RESOURCE_MANAGER)

    @property
    def hmac(self) -> bool | None:
        """Whether the command ran in an HMAC session (None: not known)."""
        if self.session is None:
            return None
        return self.session >> 24 == 0x02


@dataclass
class KernelOp:
    """One call of a kernel operation the probes wrap (:data:`probes.OP_FUNCS`): its commands
    and its whole time, entry to return, on the same task."""

    id: int
    kind: str  # "extend" | "get_random"
    t_ns: int
    total_ns: int
    pid: int
    comm: str
    ret: int | None  # the function's return: 0 or a TPM rc (extend), bytes or -errno (get_random)
    commands: list[KernelCommand] = field(default_factory=list)  # KernelCommand, in the order they returned
    # True: assembled from the commands (a trace without operation probes): from the first
    # command's entry to the last one's return, so host work before and after is not seen.
    estimated: bool = False

    @property
    def wire_ns(self) -> int:
        return sum(c.wire_ns for c in self.commands)

    @property
    def host_ns(self) -> int:
        return max(self.total_ns - self.wire_ns, 0)


# What sent a command, from tpm_transmit_cmd's description or the command code and task.
_DESC_PATHS = (
    ("extend", "PCR extend (IMA / kernel)"),
    ("random", "hwrng / get_random"),
    ("auth session", "session set-up"),
    ("null", "session set-up"),
    ("context", "session set-up"),
)
_CC_PATHS = {0x182: "PCR extend (IMA / kernel)", 0x17B: "hwrng / get_random", 0x176: "session set-up",
             0x161: "session set-up", 0x165: "session set-up", 0x162: "session set-up",
             0x131: "session set-up (null primary)"}


# The function that called tpm_transmit_cmd (the location of its kretprobe event,
# "(tpm2_pcr_extend+0x160/0x2b0 <- tpm_transmit_cmd)") names the kernel path best.
_CALLER_PATHS = (
    ("tpm2_pcr_extend", "PCR extend (IMA / kernel)"), ("tpm1_pcr_extend", "PCR extend (IMA / kernel)"),
    ("get_random", "hwrng / get_random"),
    ("auth_session", "session set-up"), ("load_null", "session set-up"), ("load_context", "session set-up"),
    ("flush_context", "session set-up"), ("create_null_primary", "session set-up"),
    ("save_context", "session set-up"),
    ("unseal", "trusted keys (unseal)"), ("seal", "trusted keys (seal)"), ("load_cmd", "trusted keys (load)"),
    ("pcr_read", "PCR read"), ("get_tpm_pt", "TPM properties"), ("get_cap", "TPM properties"),
    # the driver's start-up (seen on Debian 6.12 with the boot-time probes)
    ("tpm2_probe", "TPM probe"), ("get_pcr_allocation", "TPM properties"), ("get_cc_attrs_tbl", "TPM properties"),
    ("shutdown", "shutdown / suspend"), ("startup", "start-up / resume"), ("selftest", "self test"),
)

USER_SPACE = "user space via "
RESOURCE_MANAGER = "resource manager"


def kernel_path(cc: int | None, desc: str | None, comm: str, via_cmd: bool, caller: str | None = None,
                device: str | None = None, in_rm: bool = False) -> str:
    """``in_rm``: sent while the resource manager prepared, committed or deleted a
    /dev/tpmrm0 client's space (its ContextLoad/ContextSave/FlushContext of the client's
    objects and sessions), not for the kernel's own use."""
    fn = (caller or "").split("+", 1)[0]
    if not via_cmd:
        return f"{USER_SPACE}{device or '/dev/tpm*'} ({comm})"
    if in_rm:
        return f"{RESOURCE_MANAGER} ({device or '/dev/tpmrm*'})" + (f" [{fn}]" if fn else "")
    for key, path in _CALLER_PATHS:
        if key in fn:
            return f"{path} [{fn}]"
    d = (desc or "").lower()
    for key, path in _DESC_PATHS:
        if key in d:
            return path
    if comm.startswith("hwrng"):
        return "hwrng / get_random"
    return _CC_PATHS.get(cc or -1, "kernel")


_LABELS = (("PCR extend", "extend"), ("session set-up", "set-up"), ("session end", "end"), ("hwrng", "hwrng"),
           ("trusted keys", "trusted"), ("PCR read", "pcrread"), ("TPM properties", "getcap"),
           ("TPM probe", "probe"), ("shutdown", "shutdown"), ("start-up", "startup"), ("self test", "selftest"),
           (USER_SPACE, "user"), (RESOURCE_MANAGER, "rm"), ("tpmtop", "tpmtop"))


def path_label(path: str) -> str:
    """A word (≤ 8 characters) for a :func:`kernel_path`: the stream's origin column."""
    for key, label in _LABELS:
        if path.startswith(key):
            return label
    return "kernel"


@dataclass
class _Write:
    """A /dev/tpm* client's write(2) (the ``write`` event), not yet run."""

    cc: int | None
    comm: str
    pid: int
    t_ns: int


@dataclass
class _Work:
    """What a task is doing for a /dev/tpm* client: from ``rm_prep`` (the kernel starts on a
    written command) to ``rm_commit_ret``, or inside ``rm_del`` (the client closed)."""

    comm: str | None  # the client (None: its write was not seen)
    pid: int | None
    device: str | None
    depth: int = 0  # inside tpm2_prepare_space / tpm2_commit_space / tpm2_del_space
    held: KernelCommand | None = None  # the client's command, waiting for its response code


_PIDS_KEPT = 4096  # tasks with an entry still waiting for its return
_DEPTH_KEPT = 8  # entries one task may have waiting (it nests 3 at most)
_WRITES_KEPT = 256  # writes never run (refused with -EBUSY, say) are forgotten after this many
_WRITE_MAX_AGE_NS = 60 * 1_000_000_000


@dataclass
class Parser:
    """Feed lines; completed commands come out of :meth:`feed` in order of their return."""

    byteorder: str = sys.byteorder
    lost: int = 0
    orphans: int = 0  # returns without an entry (buffer started mid-call, or events lost)
    dropped: int = 0  # entries dropped because their CPU lost events, or never returned
    backwards: int = 0  # returns timed before their entry (a clock that is not in step): dropped
    events: int = 0  # probe events seen (of any kind): a file with some is a trace, if a broken one
    _tx: dict[int, list[Any]] = field(default_factory=dict)  # pid -> list of open tpm_transmit entries
    _cmd: dict[int, list[Any]] = field(default_factory=dict)  # pid -> list of open tpm_transmit_cmd entries
    # pid -> commands waiting for tpm_transmit_cmd's rc
    _done_under_cmd: dict[int, list[Any]] = field(default_factory=dict)
    _writes: list[_Write] = field(default_factory=list)  # _Write, oldest first
    _work: dict[int, Any] = field(default_factory=dict)  # pid -> _Work
    _op: dict[int, list[Any]] = field(default_factory=dict)  # pid -> list of open (KernelOp, entry TraceEvent)
    _op_seq: int = 0
    ops: list[KernelOp] = field(default_factory=list)  # finished KernelOps, for a consumer to take (take_ops)
    op_probes: bool = False  # the trace has operation events (tpm2_pcr_extend …)

    def _swap(self, v: int | None, bits: int = 32) -> int | None:
        if v is None:
            return None
        return _swap32(v, self.byteorder) if bits == 32 else _swap16(v, self.byteorder)

    def _take_write(self, cc: int | None, t_ns: int) -> _Write | None:
        """The oldest unrun write of this command code (commands of one code from two clients
        at once may be told apart wrongly; their codes and the kernel's work are right)."""
        self._writes = [w for w in self._writes if t_ns - w.t_ns <= _WRITE_MAX_AGE_NS]
        for i, w in enumerate(self._writes):
            if w.cc == cc and w.t_ns <= t_ns:
                return self._writes.pop(i)
        return None

    def _flush_work(self, pid: int) -> list[KernelCommand]:
        w = self._work.pop(pid, None)
        return [w.held] if w is not None and w.held is not None else []

    def feed(self, line: str) -> list[KernelCommand]:
        ev = parse_line(line)
        if ev is None:
            return []
        if isinstance(ev, tuple):
            return self._lost(*ev)
        self.events += 1
        name = ev.event
        if name == probes.TX:
            self._push(self._tx, ev.pid, ev)
            return []
        if name == probes.CMD:
            self._push(self._cmd, ev.pid, ev)
            return []
        if name in probes.OP_EVENTS:
            self.op_probes = True
            self._op_seq += 1
            op = KernelOp(self._op_seq, probes.OP_EVENTS[name], ev.t_ns, 0, ev.pid, ev.comm, None)
            self._push(self._op, ev.pid, (op, ev))
            return []
        if name in probes.OP_RET_EVENTS:
            self.op_probes = True
            stack = self._op.get(ev.pid)
            if not stack or stack[-1][0].kind != probes.OP_RET_EVENTS[name]:
                self.orphans += 1
                return []
            op, _ = stack.pop()
            if not stack:
                del self._op[ev.pid]
            if ev.t_ns < op.t_ns:
                self.backwards += 1
                return []
            op.total_ns = ev.t_ns - op.t_ns
            op.ret = _signed32(_num(ev.args.get("ret")))
            self.ops.append(op)
            return []
        if name == probes.WRITE:
            self._writes.append(_Write(self._swap(_num(ev.args.get("cc"))), ev.comm, ev.pid, ev.t_ns))
            del self._writes[:-_WRITES_KEPT]
            return []
        if name.startswith(probes.RM_PREFIX):
            return self._rm(ev)
        if name == probes.TX_RET:
            stack = self._tx.get(ev.pid)
            if not stack:
                self.orphans += 1
                return []
            entry = stack.pop()
            if ev.t_ns < entry.t_ns:  # no latency can be had from it: not invented as 0 µs
                self.backwards += 1
                return []
            cmd_stack = self._cmd.get(ev.pid) or []
            via_cmd = bool(cmd_stack)
            desc = _desc(cmd_stack[-1].args.get("desc")) if via_cmd else None
            work = self._work.get(ev.pid)
            kc = KernelCommand(
                t_ns=entry.t_ns, wire_ns=ev.t_ns - entry.t_ns, pid=ev.pid, comm=entry.comm,
                cpu=entry.cpu, cpu_return=ev.cpu,
                cc=self._swap(_num(entry.args.get("cc"))),
                tag=self._swap(_num(entry.args.get("tag")), 16),
                size=self._swap(_num(entry.args.get("size"))),
                rc=None, ret=_signed(_num(ev.args.get("ret"))), desc=desc, path="")
            kc.session = _session_handle(entry.args, kc.cc, kc.tag, self.byteorder)
            rsp_rc = _num(ev.args.get("rsp_rc"))  # the response header's code (6.10+ return probes)
            if rsp_rc is not None and kc.ret is not None and kc.ret >= 10:
                kc.rc = self._swap(rsp_rc)
            self._in_op(kc, ev.pid)
            if work is not None:
                kc.device = work.device
                if work.comm is not None and work.pid != ev.pid:
                    kc.task = f"{entry.comm}-{ev.pid}"
                    kc.comm, kc.pid = work.comm, work.pid
            in_rm = work is not None and work.depth > 0
            kc.path = kernel_path(kc.cc, desc, kc.comm, via_cmd, device=kc.device, in_rm=in_rm)
            if via_cmd:
                self._done_under_cmd.setdefault(ev.pid, []).append((kc, in_rm))
                return []
            if kc.ret is None or kc.ret < 10:
                kc.rc = None  # no response, or none long enough to hold a code
            if work is not None and work.held is None and kc.rc is None and (kc.ret is None or kc.ret >= 0):
                work.held = kc  # its response code comes with tpm2_commit_space
                return []
            return [kc]
        if name == probes.CMD_RET:
            stack = self._cmd.get(ev.pid)
            if not stack:
                self.orphans += 1
                return []
            stack.pop()
            done = self._done_under_cmd.pop(ev.pid, [])
            rc = _signed(_num(ev.args.get("rc")))
            caller = ev.loc.split(" <- ", 1)[0].strip() if " <- " in ev.loc else None
            if caller and caller.startswith("["):
                # "[unknown/kretprobe'd]": another kretprobe on tpm_transmit_cmd (a second
                # tpmtop, bpftrace) replaced the return address first; desc names the path
                caller = None
            out = []
            for kc, in_rm in done:
                # tpm_transmit_cmd returns the TPM's response code, or -errno
                if rc is not None:
                    kc.rc = rc if rc >= 0 else None
                if caller:
                    kc.caller = caller.split("+", 1)[0]
                    kc.path = kernel_path(kc.cc, kc.desc, kc.comm, True, caller, kc.device, in_rm)
                if kc.cc == 0x165 and kc.op is None and self.op_probes and not in_rm:
                    # A FlushContext outside any extend/get_random: the kernel ending its kept
                    # session (6.12+, before a user-space command, a hwrng read before 6.15, suspend)
                    kc.path = "session end" + (f" [{kc.caller}]" if kc.caller else "")
                out.append(kc)
            return out
        return []  # another tracer's event in the same trace (a shared trace_pipe): not ours

    def _push(self, stacks: dict[int, list[Any]], pid: int, item: Any) -> None:
        """An entry waiting for its return. Bounded: a task nests two calls at most (an
        operation, tpm_transmit_cmd, tpm_transmit), and entries whose returns never come (a
        kretprobe out of instances, a hostile file) must not pile up for ever."""
        stack = stacks.get(pid)
        if stack is None:
            if len(stacks) >= _PIDS_KEPT:
                del stacks[next(iter(stacks))]  # the task waiting longest
                self.dropped += 1
            stack = stacks[pid] = []
        stack.append(item)
        if len(stack) > _DEPTH_KEPT:
            del stack[0]
            self.dropped += 1

    def _in_op(self, kc: KernelCommand, pid: int) -> None:
        """``pid``: the task that sent it (the operation's), not the client it was for."""
        stack = self._op.get(pid)
        if stack:
            op = stack[-1][0]
            kc.op = op.id
            op.commands.append(kc)

    def take_ops(self) -> list[KernelOp]:
        """The operations finished since the last call (their commands came out of feed first)."""
        out, self.ops = self.ops, []
        return out
        return []

    def _rm(self, ev: TraceEvent) -> list[KernelCommand]:
        """The resource manager's functions: who a task works for, and on which device."""
        name, pid = ev.event, ev.pid
        out: list[KernelCommand] = []
        if name in (probes.RM_PREP, probes.RM_DEL):
            out = self._flush_work(pid)  # a held command whose commit was not seen
            space = _num(ev.args.get("space"))
            device = None if space is None else "/dev/tpm0" if space == 0 else "/dev/tpmrm0"
            if name == probes.RM_DEL:  # the client's own close(2)
                self._work[pid] = _Work(ev.comm, pid, "/dev/tpmrm0", depth=1)
                return out
            w = self._take_write(self._swap(_num(ev.args.get("cc"))), ev.t_ns)
            self._work[pid] = _Work(w.comm if w else None, w.pid if w else None, device, depth=1)
            return out
        work = self._work.get(pid)
        if work is None:
            if not name.endswith("_ret"):
                self.orphans += 1
            return out
        if name == probes.RM_COMMIT:
            work.depth += 1
            if work.held is not None:
                rc = self._swap(_num(ev.args.get("rc")))
                work.held.rc = rc
                out.append(work.held)
                work.held = None
            return out
        if name.endswith("_ret"):
            work.depth = max(work.depth - 1, 0)
            if name in (probes.RM_COMMIT + "_ret", probes.RM_DEL + "_ret"):
                out += self._flush_work(pid)
            return out
        return out

    def flush(self) -> list[KernelCommand]:
        """Commands still waiting for a response code that will not come (the trace ended)."""
        out = []
        for pid in list(self._work):
            out += self._flush_work(pid)
        return out

    def _lost(self, cpu: int, n: int) -> list[KernelCommand]:
        """Events of ``cpu`` were overwritten: an entry still open there may have lost its
        return, and pairing it with a later return would invent a latency. Drop those
        entries; commands already returned under a tpm_transmit_cmd that may have lost its
        return come out with the response code unknown."""
        self.lost += n
        out: list[KernelCommand] = []
        for stacks in (self._tx, self._cmd, self._op):
            for pid, stack in list(stacks.items()):
                kept = [e for e in stack if (e[1] if isinstance(e, tuple) else e).cpu != cpu]
                self.dropped += len(stack) - len(kept)
                if kept:
                    stacks[pid] = kept
                else:
                    del stacks[pid]
        for pid in list(self._done_under_cmd):
            if pid not in self._cmd:
                out.extend(kc for kc, _ in self._done_under_cmd.pop(pid))
        return out

    def pending(self) -> int:
        return sum(len(v) for v in self._tx.values())


def _desc(text: str | None) -> str | None:
    """tpm_transmit_cmd's ``desc``: many callers pass NULL, which the kernel prints as ``(fault)``."""
    return None if text in (None, "", "(fault)") else text


def _session_handle(args: dict[str, str], cc: int | None, tag: int | None, byteorder: str) -> int | None:
    """The first session's handle of a command with sessions, from the s14/s18/s22 fetches."""
    if cc is None or tag != 0x8002:
        return None
    from tpmtop.tpm import wire

    nh = wire.num_handles(cc)
    if nh is None:
        return None
    v = _num(args.get(f"s{10 + 4 * nh + 4}"))
    return _swap32(v, byteorder) if v is not None else None


def _signed32(v: int | None) -> int | None:
    """An s32 fetch as tracefs prints it: signed already, or (some versions) unsigned."""
    if v is None:
        return None
    return v - (1 << 32) if (1 << 31) <= v < (1 << 32) else v


def _signed(v: int | None) -> int | None:
    if v is None:
        return None
    if v >= 1 << 63:
        return v - (1 << 64)
    return v


def parse_text(text: str, byteorder: str = sys.byteorder) -> tuple[list[KernelCommand], Parser]:
    p = Parser(byteorder=byteorder)
    out: list[KernelCommand] = []
    for line in text.splitlines():
        out.extend(p.feed(line))
    out.extend(p.flush())
    return out, p
