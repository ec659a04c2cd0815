"""ftrace ``function_graph`` output → per-function and per-TPM-command durations.

Row layout (kernel/trace/trace_functions_graph.c), each column optional except DURATION and
FUNCTION: ``[TIME |] [CPU)] [TASK-PID |] [mark] DURATION us | FUNCTION``. Durations are in µs
with up to three decimals and are converted exactly to integer ns (Decimal), never via float.
Call nesting is followed with a stack per task — named by the TASK/PID column or by the
context-switch banners, else matched across CPUs (see :class:`_Parser`) — not by indentation
alone, so exits whose entries were not in the buffer (``} /* name */``) and calls that return
on another CPU are handled. Lines are consumed one at a time (a trace can be 100 MB).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import NoReturn

from tpmtop.boot.badline import bad_line
from tpmtop.boot.series import (
    HMAC_FUNCS,
    OP_EXTEND,
    OP_EXTEND_HMAC,
    OP_FUNCS,
    OP_SETUP_UNATTRIBUTED,
    SETUP_SEQUENCE,
    TRANSMIT_FUNCS,
    TraceResult,
)

_ROW = re.compile(r"""
    ^\s*(?:(?P<time>\d+\.\d+)\s*\|)?      # funcgraph-abstime
    \s*(?:(?P<cpu>\d+)\))?                # funcgraph-cpu
    \s*(?:(?P<task>[^|=]*?-\d+)\s*\|)?    # funcgraph-proc
    (?P<dur>[^|]*)\|                      # DURATION cell (may be blank or an IRQ arrow)
    (?P<func>.*)$""", re.X)
_DUR = re.compile(r"^(?:(?P<mark>[+!#*@$])\s*)?(?P<us>\d+(?:\.\d*)?)\s*us$")
_ARROW = re.compile(r"^(?:=+>|<=+)$")
_CALL = re.compile(r"^(?P<name>[A-Za-z_$][\w.$]*)\((?P<args>.*)\)\s*(?P<kind>[;{])\s*(?:/\*(?P<c>.*?)\*/)?\s*$")
_EXIT = re.compile(r"^\}\s*(?:/\*(?P<c>.*?)\*/)?\s*$")
# The context-switch banner verif_pid() prints whenever another task runs on a CPU, whatever
# the columns: ` 1)  migrati-7     =>  systemd-1   ` (comm cut to 7 characters, then -pid).
_SWITCH = re.compile(r"^\s*\|?\s*(?P<cpu>\d+)\)\s*(?P<prev>\S.*?-\d+)\s*=>\s*(?P<next>\S.*?-\d+)\s*$")


def looks_like_row(line: str) -> bool:
    """Whether ``line`` is a function_graph row: columns, a ``|``, then a call (``f() {``,
    ``f();``) or a closing ``}``. The format sniffer asks this, so random bytes that happen to
    hold a ``|`` and a ``}`` are not called an ftrace trace."""
    if "\0" in line or "\ufffd" in line:
        return False
    m = _ROW.match(line)
    if m is None:
        return False
    func = m.group("func").strip()
    return bool(_CALL.match(func) or _EXIT.match(func))


_SKIP = (
    re.compile(r"^\s*-{3,}\s*$"),                     # context-switch rule
    re.compile(r"=>"),                                 # ` 1)  bash-12 => cat-34 ` (a banner without a CPU)
    re.compile(r"^\s*CPU:\s*\d+\s*\[LOST \d+ EVENTS\]"),
)
# Without the CPU/TIME/TASK columns a row starts with its mark, and `#` is also the comment
# character: a `#` line is a row only when a duration follows.
_HASH_ROW = re.compile(r"^#\s+\d+(?:\.\d*)?\s*us\s*\|")
# The kernel prints a duration as `%llu.%03lu` of a u64 nanosecond count: nothing larger is a
# duration a kernel wrote (and Decimal arithmetic on it would overflow the default context).
MAX_DURATION_NS = 2 ** 64 - 1
# Open call chains kept for matching rows that migrated CPU (no TASK column).
MAX_CHAINS = 256
# Lower bound each mark promises (strictly greater than), in µs.
MARKS = {"+": 10, "!": 100, "#": 1_000, "*": 10_000, "@": 100_000, "$": 1_000_000}


@dataclass
class _Frame:
    name: str
    lineno: int
    depth: int  # from the indentation: 2 spaces per level
    time: Decimal | None = None  # funcgraph-abstime of the entry, when shown
    cpu: str | None = None
    hmac: bool = False
    transmits: list[int] = field(default_factory=list)  # ns of commands sent directly from here


def _task_key(task: str) -> str:
    """``systemd-1`` → ``pid 1``: the comm is cut to 7 characters in some places, not the pid."""
    return "pid " + task.rsplit("-", 1)[-1]


def _comment_name(c: str | None) -> str | None:
    """``/* tpm2_pcr_extend */`` or ``/* tpm2_pcr_extend ret=0 */`` → name; ``/* ret=0 */`` → None."""
    if not c:
        return None
    for word in c.split():
        if "=" not in word:
            return word
    return None


class _Parser:
    """Call stacks are kept per *task*. With the TASK/PID column (funcgraph-proc) the task is
    known and a call that starts on one CPU and returns on another is simply followed. Without
    it, each CPU runs one stack at a time; a line that does not fit its CPU's stack (an exit
    whose function is not open there, a call deeper than the stack) is matched against the
    stacks open elsewhere — the ``/* name */`` tail, the depth and, with the TIME column, the
    entry time + duration = exit time decide — and that stack moves to this CPU."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.res = TraceResult(path, "ftrace function_graph")
        self.stacks: dict[object, list[_Frame]] = {}  # task name, or a chain number without TASK
        self.on_cpu: dict[str | None, object] = {}  # CPU → the chain it runs (no TASK column)
        self.chains = 0
        self.bad_marks = 0
        self.orphans = 0
        self.inferred_setups = 0
        self.migrated = 0
        self.migrated_by_task = 0
        self.timed = False
        self.abandoned = 0  # open calls dropped with a parked chain

    def fail(self, lineno: int, why: str, line: str) -> NoReturn:
        raise bad_line(self.path, lineno, why, line)

    def duration_ns(self, cell: str, lineno: int, line: str) -> int | None:
        cell = cell.strip()
        if not cell:
            return None
        m = _DUR.match(cell)
        if not m:
            self.fail(lineno, "unreadable DURATION cell", line)
        digits = m.group("us")
        whole, _, _frac = digits.partition(".")
        if len(whole.lstrip("0")) > 17:  # 2**64 ns is 18,446,744,073,709,551 µs: 17 digits
            self.fail(lineno, "duration larger than a kernel can print (2^64 ns)", line)
        try:
            us = Decimal(digits)
        except InvalidOperation:
            self.fail(lineno, "unreadable duration", line)
        mark = m.group("mark")
        if mark and mark in MARKS and not us > MARKS[mark]:
            self.bad_marks += 1
        ns = int(us * 1000)
        if ns > MAX_DURATION_NS:
            self.fail(lineno, "duration larger than a kernel can print (2^64 ns)", line)
        return ns

    # -- which stack a row belongs to -----------------------------------------------------
    def _chain_of(self, cpu: str | None) -> list[_Frame]:
        key = self.on_cpu.get(cpu)
        if key is None:
            key = self.chains = self.chains + 1
            self.on_cpu[cpu] = key
            self.stacks[key] = []
        return self.stacks[key]

    def _switch(self, cpu: str, prev: str, nxt: str) -> None:
        """A banner: from here on ``nxt`` runs on ``cpu``. The calls seen there so far without
        a task name were ``prev``'s."""
        cur = self.on_cpu.get(cpu)
        prev_key, next_key = _task_key(prev), _task_key(nxt)
        if isinstance(cur, int):
            chain = self.stacks.pop(cur)
            if chain or prev_key not in self.stacks:
                self.stacks[prev_key] = chain
        for c, k in list(self.on_cpu.items()):
            if k == next_key:
                del self.on_cpu[c]  # the task moved here from another CPU
        self.stacks.setdefault(next_key, [])
        self.on_cpu[cpu] = next_key
        if prev_key in self.stacks and not self.stacks[prev_key] and prev_key not in self.on_cpu.values():
            del self.stacks[prev_key]  # nothing open: forget it (a long trace sees many tasks)

    def _adopt(self, cpu: str | None, stack: list[_Frame]) -> None:
        """``stack`` now runs on ``cpu``; the chain that ran there is parked (another task,
        switched out), or forgotten when it holds nothing."""
        key = next(k for k, v in self.stacks.items() if v is stack)
        for c, k in list(self.on_cpu.items()):
            if k == key:
                del self.on_cpu[c]
        old = self.on_cpu.get(cpu)
        if old is not None and not self.stacks[old]:
            del self.stacks[old]
        self.on_cpu[cpu] = key
        # A trace with lost events parks a chain at every gap; each later misfit row looks
        # through them, so keep the newest few (the oldest are calls whose exits were lost).
        if len(self.stacks) > MAX_CHAINS:
            running = set(self.on_cpu.values())
            for k in [k for k in self.stacks if k not in running][:len(self.stacks) - MAX_CHAINS]:
                self.abandoned += len(self.stacks.pop(k))

    def _elsewhere(self, stack: list[_Frame], kind: str, depth: int, name: str | None,
                   ns: int | None, time: Decimal | None) -> list[_Frame] | None:
        """An open stack on another CPU that this row continues: for an exit, one whose
        innermost frame is at this depth (and has this name, when the tail gives it); for a
        call, one whose innermost frame is this call's caller (one level up)."""
        want = depth + 1 if kind == "exit" else depth
        best, best_gap = None, None
        for other in self.stacks.values():
            if other is stack or not other or len(other) != want:
                continue
            top = other[-1]
            if kind == "exit" and name is not None and top.name != name:
                continue
            gap = Decimal(0)
            if time is not None and top.time is not None:
                spent = time - top.time  # s
                if spent < 0:
                    continue
                if kind == "exit" and ns is not None:
                    # Printed when the call returns: entry time + duration ≈ exit time.
                    gap = abs(spent * 1_000_000_000 - ns)
                    if spent * 1_000_000_000 + 1000 < ns:
                        continue  # it would have started before its entry was printed
                else:
                    gap = spent
            if best is None or best_gap is None or gap < best_gap:
                best, best_gap = other, gap
        return best

    # -- attribution ----------------------------------------------------------------------
    def command_done(self, stack: list[_Frame], ns: int) -> None:
        """A tpm_transmit* call finished; ``stack`` holds its callers (innermost last)."""
        if any(f.name in TRANSMIT_FUNCS for f in stack):
            return  # an inner layer of a command already being counted
        for f in reversed(stack):
            if f.name in OP_FUNCS:
                f.transmits.append(ns)
                return
        caller = stack[-1].name if stack else "(caller not in trace)"
        self.res.operation(caller).samples_ns.append(ns)

    def close(self, f: _Frame, stack: list[_Frame]) -> None:
        if f.hmac:
            for outer in stack:
                outer.hmac = True
        if not f.transmits:
            return
        if f.name == "tpm2_start_auth_session":
            names: tuple[str, ...]
            if len(f.transmits) == len(SETUP_SEQUENCE):
                names = SETUP_SEQUENCE
                self.inferred_setups += 1
            elif len(f.transmits) == 1:
                names = ("StartAuthSession",)
            else:
                names = (OP_SETUP_UNATTRIBUTED,) * len(f.transmits)
            for name, ns in zip(names, f.transmits, strict=False):
                self.res.operation(name).samples_ns.append(ns)
            return
        op = OP_FUNCS[f.name]
        if f.name == "tpm2_pcr_extend":
            op = OP_EXTEND_HMAC if f.hmac else OP_EXTEND
        for ns in f.transmits:
            self.res.operation(op).samples_ns.append(ns)

    # -- rows -----------------------------------------------------------------------------
    def row(self, lineno: int, line: str) -> None:
        if line.startswith("#") and not _HASH_ROW.match(line):
            return  # header, `##### CPU 2 buffer started ####`
        if "=>" in line:
            sw = _SWITCH.match(line)
            if sw:
                self._switch(sw.group("cpu"), sw.group("prev"), sw.group("next"))
                return
        m = _ROW.match(line)
        if not m:
            if not line.strip() or any(p.search(line) for p in _SKIP):
                return
            self.fail(lineno, "not a function_graph row", line)
        cell = m.group("dur").strip()
        raw_func = m.group("func")
        func = raw_func.strip()
        if _ARROW.match(cell):
            return  # IRQ entry/exit arrow
        ns = self.duration_ns(cell, lineno, line)
        if not func:
            if ns is None:
                return
            self.fail(lineno, "a duration without a function", line)
        if func.startswith("/*"):
            return  # trace_printk or event annotation
        cpu = m.group("cpu")
        task = (m.group("task") or "").strip() or None
        time = Decimal(m.group("time")) if m.group("time") else None
        self.timed = self.timed or time is not None
        # The kernel indents FUNCTION by 2 spaces, then 2 per call depth.
        depth = max(0, (len(raw_func) - len(raw_func.lstrip(" ")) - 2) // 2)
        if task is not None:
            stack = self.stacks.setdefault(_task_key(task), [])
        else:
            stack = self._chain_of(cpu)
            if isinstance(self.on_cpu.get(cpu), str):
                task = self.on_cpu[cpu]  # named by a context-switch banner
        c = _CALL.match(func)
        if c:
            name = c.group("name")
            if task is None and len(stack) > depth == 0:
                # An outermost call on a CPU whose chain is still open: another task runs here.
                self.chains += 1
                self._adopt(cpu, self.stacks.setdefault(self.chains, []))
                stack = self.stacks[self.chains]
            elif task is None and depth > 0 and len(stack) < depth:  # its caller is open elsewhere
                other = self._elsewhere(stack, "call", depth, name, ns, time)
                if other is not None:
                    self._adopt(cpu, other)
                    stack = other
            if name in HMAC_FUNCS:
                self.res.hmac_seen = True
                for f in stack:
                    f.hmac = True
            if c.group("kind") == "{":
                if ns is not None:
                    self.fail(lineno, "a function entry with a duration", line)
                stack.append(_Frame(name, lineno, depth, time, cpu, hmac=name in HMAC_FUNCS))
                return
            if ns is None:
                self.fail(lineno, "a leaf call without a duration", line)
            self.res.function(name).samples_ns.append(ns)
            if name in TRANSMIT_FUNCS:
                self.command_done(stack, ns)
            return
        e = _EXIT.match(func)
        if not e:
            self.fail(lineno, "unreadable FUNCTION column", line)
        if ns is None:
            self.fail(lineno, "a function exit without a duration", line)
        name = _comment_name(e.group("c"))
        # Look elsewhere only when nothing here can be what closes: an unnamed exit on an empty
        # stack, or a named one whose function is not open here (a deeper or shallower stack
        # here is lost entries or exits of this CPU's own task, handled below as before).
        fits = stack and (name is None or name in {f.name for f in stack})
        if task is None and not fits:
            other = self._elsewhere(stack, "exit", depth, name, ns, time)
            if other is not None:
                self._adopt(cpu, other)
                stack = other
        if stack and (name is None or name in {f.name for f in stack}):
            # Exits whose entries fell out of the buffer close the frames above them too.
            while name is not None and stack[-1].name != name:
                self.close(stack.pop(), stack)
            f = stack.pop()
            if f.cpu != cpu and f.cpu is not None and cpu is not None:
                if task is None:
                    self.migrated += 1
                else:
                    self.migrated_by_task += 1
            self.res.function(f.name).samples_ns.append(ns)
            if f.name in TRANSMIT_FUNCS:
                self.command_done(stack, ns)
            self.close(f, stack)
            return
        # The entry was never in the buffer.
        self.orphans += 1
        name = name or "(entry not in trace)"
        self.res.function(name).samples_ns.append(ns)
        if name in TRANSMIT_FUNCS:
            self.command_done(stack, ns)

    def finish(self) -> TraceResult:
        open_frames = self.abandoned
        for stack in self.stacks.values():
            while stack:
                open_frames += 1
                self.close(stack.pop(), stack)
        notes = self.res.notes
        if open_frames:
            notes.append(f"{open_frames} call(s) still open at the end of the trace (no duration)")
        if self.orphans:
            notes.append(f"{self.orphans} exit(s) whose entry was not in the trace")
        if self.bad_marks:
            notes.append(f"{self.bad_marks} duration mark(s) disagree with their value")
        if self.migrated_by_task:
            notes.append(f"{self.migrated_by_task} call(s) returned on another CPU than they started on "
                         "(followed by the TASK/PID column)")
        if self.migrated:
            notes.append(f"{self.migrated} call(s) returned on another CPU than they started on (matched "
                         "to the open call by name, depth" + (" and time)" if self.timed else ")"))
        if self.inferred_setups:
            notes.append(f"{self.inferred_setups} session setup(s) split into ContextLoad, StartAuthSession, "
                         "FlushContext by the order tpm2_start_auth_session() sends them")
        return self.res


def parse_function_graph(lines: Iterable[str], path: str = "<trace>") -> TraceResult:
    p = _Parser(path)
    for lineno, line in enumerate(lines, 1):
        p.row(lineno, line.rstrip("\n"))
    return p.finish()
