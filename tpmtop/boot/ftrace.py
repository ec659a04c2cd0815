"""ftrace ``function_graph`` output → per-function and per-TPM-command durations.

Row layout (kernel/trace/trace_functions_graph.c), each column optional except DURATION and
FUNCTION: ``[TIME |] [CPU)] [TASK-PID |] [mark] DURATION us | FUNCTION``. Durations are in µs
with up to three decimals and are converted exactly to integer ns (Decimal), never via float.
Call nesting is followed with a stack per CPU (and task, when shown), not by indentation,
so exits whose entries were not in the buffer (``} /* name */``) are handled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from tpmtop.boot.series import (HMAC_FUNCS, OP_EXTEND, OP_EXTEND_HMAC, OP_FUNCS, OP_SETUP_UNATTRIBUTED,
                                SETUP_SEQUENCE, TRANSMIT_FUNCS, TraceResult)
from tpmtop.errors import UsageError

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
_SKIP = (
    re.compile(r"^\s*-{3,}\s*$"),                     # context-switch rule
    re.compile(r"=>"),                                 # ` 1)  bash-12 => cat-34 `
    re.compile(r"^\s*CPU:\s*\d+\s*\[LOST \d+ EVENTS\]"),
)
# Without the CPU/TIME/TASK columns a row starts with its mark, and `#` is also the comment
# character: a `#` line is a row only when a duration follows.
_HASH_ROW = re.compile(r"^#\s+\d+(?:\.\d*)?\s*us\s*\|")
# The kernel prints a duration as `%llu.%03lu` of a u64 nanosecond count: nothing larger is a
# duration a kernel wrote (and Decimal arithmetic on it would overflow the default context).
MAX_DURATION_NS = 2 ** 64 - 1
# Lower bound each mark promises (strictly greater than), in µs.
MARKS = {"+": 10, "!": 100, "#": 1_000, "*": 10_000, "@": 100_000, "$": 1_000_000}


@dataclass
class _Frame:
    name: str
    lineno: int
    hmac: bool = False
    transmits: list[int] = field(default_factory=list)  # ns of commands sent directly from here


def _comment_name(c: str | None) -> str | None:
    """``/* tpm2_pcr_extend */`` or ``/* tpm2_pcr_extend ret=0 */`` → name; ``/* ret=0 */`` → None."""
    if not c:
        return None
    for word in c.split():
        if "=" not in word:
            return word
    return None


class _Parser:
    def __init__(self, path: str) -> None:
        self.path = path
        self.res = TraceResult(path, "ftrace function_graph")
        self.stacks: dict[tuple, list[_Frame]] = {}
        self.bad_marks = 0
        self.orphans = 0
        self.inferred_setups = 0

    def fail(self, lineno: int, why: str, line: str):
        shown = line.strip()
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise UsageError(f"{self.path}:{lineno}: {why}: {shown!r}")

    def duration_ns(self, cell: str, lineno: int, line: str) -> int | None:
        cell = cell.strip()
        if not cell:
            return None
        m = _DUR.match(cell)
        if not m:
            self.fail(lineno, "unreadable DURATION cell", line)
        digits = m.group("us")
        whole, _, frac = digits.partition(".")
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
            if len(f.transmits) == len(SETUP_SEQUENCE):
                names = SETUP_SEQUENCE
                self.inferred_setups += 1
            elif len(f.transmits) == 1:
                names = ("StartAuthSession",)
            else:
                names = (OP_SETUP_UNATTRIBUTED,) * len(f.transmits)
            for name, ns in zip(names, f.transmits):
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
        m = _ROW.match(line)
        if not m:
            if not line.strip() or any(p.search(line) for p in _SKIP):
                return
            self.fail(lineno, "not a function_graph row", line)
        cell = m.group("dur").strip()
        func = m.group("func").strip()
        if _ARROW.match(cell):
            return  # IRQ entry/exit arrow
        ns = self.duration_ns(cell, lineno, line)
        key = (m.group("cpu"), (m.group("task") or "").strip() or None)
        stack = self.stacks.setdefault(key, [])
        if not func:
            if ns is None:
                return
            self.fail(lineno, "a duration without a function", line)
        if func.startswith("/*"):
            return  # trace_printk or event annotation
        c = _CALL.match(func)
        if c:
            name = c.group("name")
            if name in HMAC_FUNCS:
                self.res.hmac_seen = True
                for f in stack:
                    f.hmac = True
            if c.group("kind") == "{":
                if ns is not None:
                    self.fail(lineno, "a function entry with a duration", line)
                stack.append(_Frame(name, lineno, hmac=name in HMAC_FUNCS))
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
        if stack and (name is None or name == stack[-1].name or name in {f.name for f in stack}):
            # Exits whose entries fell out of the buffer close the frames above them too.
            while name is not None and stack[-1].name != name:
                self.close(stack.pop(), stack)
            f = stack.pop()
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
        open_frames = 0
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
        if self.inferred_setups:
            notes.append(f"{self.inferred_setups} session setup(s) split into ContextLoad, StartAuthSession, "
                         "FlushContext by the order tpm2_start_auth_session() sends them")
        return self.res


def parse_function_graph(lines: list[str], path: str = "<trace>") -> TraceResult:
    p = _Parser(path)
    for lineno, line in enumerate(lines, 1):
        p.row(lineno, line.rstrip("\n"))
    return p.finish()
