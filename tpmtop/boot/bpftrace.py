"""bpftrace map output → per-function and per-TPM-command series.

``@name[key, …]: value`` maps (a kstack/ustack key spans lines: it starts with a newline,
one frame per line, keys joined by ``, ``), ``@name: value`` scalars, ``hist()``/``lhist()``
blocks (``@name[key]:`` then ``[lo, hi)  count |@@@|`` rows, K/M/G/T = powers of 1024 as
bpftrace prints them), and ``stats()`` values (``count N, average A, total T``).

A plain map value is whatever the script aggregated — usually ``sum()`` of nanoseconds over
the whole run — so it is kept as a sum over an unstated number of calls, never as one call.
Values are taken as nanoseconds unless the map's name says otherwise (``@us``, ``@lat_ms``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NoReturn

from tpmtop.boot.badline import bad_line
from tpmtop.boot.series import HMAC_FUNCS, OP_EXTEND, OP_EXTEND_HMAC, OP_FUNCS, TRANSMIT_FUNCS, Series, TraceResult

_SUFFIX = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4, "P": 1024 ** 5}
_NUM = r"-?\d+[KMGTP]?"
_ROW = re.compile(rf"^\s*(?:\[(?P<exact>{_NUM})\]|\[(?P<lo>{_NUM}),\s*(?P<hi>{_NUM}|\.\.\.)\)|"
                  rf"\(\.\.\.,\s*(?P<below>{_NUM})\))\s+(?P<count>\d+)\s*\|[@ ]*\|\s*$")
_ONE_LINE = re.compile(r"^@(?P<name>\w*)\[(?P<key>.*)\]:\s*(?P<value>.*?)\s*$")
_SCALAR = re.compile(r"^@(?P<name>\w*):\s*(?P<value>.*?)\s*$")
_OPEN_KEY = re.compile(r"^@(?P<name>\w*)\[(?P<key>.*)$")
_KEY_END = re.compile(r"^(?P<key>.*)\]:\s*(?P<value>.*?)\s*$")
_STATS = re.compile(r"^count (?P<count>\d+), average -?\d+, total (?P<total>-?\d+)$")
_NOISE = re.compile(r"^(Attaching \d+ probes?\.\.\.|\^C|Lost \d+ events?)\s*$")
_FRAME = re.compile(r"(?P<sym>[A-Za-z_.$][\w.$]*)\+(?:0x[0-9a-f]+|\d+)")
_UNIT_NAMES = ((re.compile(r"(^|_)(us|usecs?)$"), 1000), (re.compile(r"(^|_)(ms|msecs?)$"), 1_000_000),
               (re.compile(r"(^|_)(ns|nsecs?)$"), 1))
UNITS = {"ns": 1, "us": 1000, "ms": 1_000_000}


def _num(text: str) -> int:
    text = text.strip()
    if text[-1] in "KMGTP":
        return int(text[:-1]) * _SUFFIX[text[-1]]
    return int(text)


def _unit_ns(map_name: str, default: int) -> int:
    for rx, mult in _UNIT_NAMES:
        if rx.search(map_name):
            return mult
    return default


def split_key(key: str) -> list[str | list[str]]:
    """Key text → parts; a stack part is a list of symbols, innermost first ('0x…' if unresolved)."""
    parts: list[str | list[str]] = []
    for chunk in key.split("\n, "):
        if chunk.startswith("\n") or not chunk.strip():
            frames = []
            for line in chunk.split("\n"):
                line = line.strip()
                if not line:
                    continue
                m = _FRAME.search(line)
                frames.append(m.group("sym") if m else line.split()[-1])
            parts.append(frames)  # [] for an empty ustack
        else:
            parts.extend(p.strip() for p in chunk.split(", "))
    return parts


def attribute(parts: list[str | list[str]]) -> tuple[str | None, str | None, bool]:
    """``(function, operation, hmac)``: the innermost traced function and the TPM command it
    belongs to, from the first stack or plain key naming kernel TPM functions."""
    for part in parts:
        if isinstance(part, list):
            if not part:
                continue
            hmac = any(f in HMAC_FUNCS for f in part)
            op = next((OP_FUNCS[f] for f in part if f in OP_FUNCS), None)
            if op is None:
                op = next((f for f in part if f.startswith("tpm") and f not in TRANSMIT_FUNCS), None)
            return part[0], op, hmac
    for part in parts:
        if isinstance(part, str):
            name = part.rsplit(":", 1)[-1].strip('"')
            if name in OP_FUNCS:
                return name, OP_FUNCS[name], name in HMAC_FUNCS
            if name.startswith("tpm"):
                return name, name, name in HMAC_FUNCS
    return None, None, False


class _Parser:
    def __init__(self, path: str, unit_ns: int) -> None:
        self.path = path
        self.default_unit = unit_ns
        self.res = TraceResult(path, "bpftrace")
        self.entries: list[tuple[str, str | None, Series]] = []
        self.hist: Series | None = None
        self.unit = unit_ns
        self.skipped_counts: set[str] = set()

    def fail(self, lineno: int, why: str, line: str) -> NoReturn:
        raise bad_line(self.path, lineno, why, line)

    def entry(self, name: str, key: str | None, value: str, lineno: int, line: str) -> None:
        parts = split_key(key) if key is not None else []
        func, op, hmac = attribute(parts)
        if hmac:
            self.res.hmac_seen = True
        self.unit = _unit_ns(name, self.default_unit)
        s = Series()
        if value == "":
            self.hist = s  # rows follow
        else:
            self.hist = None
            m = _STATS.match(value)
            if m:
                total, calls = int(m.group("total")), int(m.group("count"))
            elif re.fullmatch(r"-?\d+", value):
                total, calls = int(value), None
            else:
                self.fail(lineno, "unreadable map value", line)
            # A sum of durations is never negative: such a value is a counter that wrapped, a
            # map of something else (a difference, a return value), or an edited file.
            if total < 0:
                self.fail(lineno, "negative value: not a sum of durations", line)
            s.sums.append((total * self.unit, calls))
        if func is None:
            func = f"@{name}[{key.strip()}]" if key is not None else f"@{name}"
        self.entries.append((func, op, s))

    def hist_row(self, hist: Series, m: re.Match[str], lineno: int, line: str) -> None:
        count = int(m.group("count"))
        u = self.unit
        if m.group("exact") is not None:
            v = _num(m.group("exact")) * u
            hist.buckets.append((v, v + u, count))
        elif m.group("below") is not None:
            hist.buckets.append((None, _num(m.group("below")) * u, count))
        else:
            lo = _num(m.group("lo")) * u
            hi = None if m.group("hi") == "..." else _num(m.group("hi")) * u
            if hi is not None and hi <= lo:
                self.fail(lineno, "histogram bucket with upper bound <= lower bound", line)
            hist.buckets.append((lo, hi, count))

    def parse(self, lines: Iterable[str]) -> TraceResult:
        key_lines: list[str] | None = None
        key_name = ""
        key_start, key_first = 0, ""
        for lineno, raw in enumerate(lines, 1):
            line = raw.rstrip("\n")
            if key_lines is not None:
                m = _KEY_END.match(line)
                if m and not line.startswith("        "):
                    key_lines.append(m.group("key"))
                    self.entry(key_name, "\n".join(key_lines), m.group("value"), lineno, line)
                    key_lines = None
                elif line.startswith("@") or _ROW.match(line):
                    self.fail(key_start, "map key never closed with ']:'", key_first)
                else:
                    key_lines.append(line)
                continue
            if not line.strip():
                self.hist = None
                continue
            if _NOISE.match(line.strip()):
                continue
            if line.startswith("@"):
                m = _ONE_LINE.match(line)
                if m:
                    self.entry(m.group("name"), m.group("key"), m.group("value"), lineno, line)
                    continue
                m = _SCALAR.match(line)
                if m:
                    self.entry(m.group("name"), None, m.group("value"), lineno, line)
                    continue
                m = _OPEN_KEY.match(line)
                if m:
                    key_lines, key_name, key_start, key_first = [m.group("key")], m.group("name"), lineno, line
                    continue
                self.fail(lineno, "unreadable map line", line)
            m = _ROW.match(line)
            if m:
                if self.hist is None:
                    self.fail(lineno, "histogram row outside a hist()/lhist() block", line)
                self.hist_row(self.hist, m, lineno, line)
                continue
            self.fail(lineno, "not bpftrace map output", line)
        if key_lines is not None:
            self.fail(key_start, "map key never closed with ']:'", key_first)
        return self.finish()

    def finish(self) -> TraceResult:
        # A PCR_Extend in a run that also set up HMAC sessions ran inside one.
        for func, op, s in self.entries:
            self.res.function(func).merge(s)
            if op is not None:
                if op == OP_EXTEND and self.res.hmac_seen:
                    op = OP_EXTEND_HMAC
                self.res.operation(op).merge(s)
        if any(s.sums and c is None for _, _, s in self.entries for _, c in s.sums):
            self.res.notes.append("map values are sums over the whole run; the output does not say "
                                  "how many calls each covers")
        return self.res


def parse_bpftrace(lines: Iterable[str], path: str = "<trace>", unit: str | None = None) -> TraceResult:
    return _Parser(path, UNITS[unit or "ns"]).parse(lines)
