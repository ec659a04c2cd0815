"""The Latency panel's rows: one per command of the current run (and the operation's
total, wire and host rows), and the response codes each command got. No Textual here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpmtop.sources.histreads import EMPTY
from tpmtop.sources.runs import RunView
from tpmtop.sources.timings import CommandTiming, TimingsView
from tpmtop.tpm import names
from tpmtop.viewmodel.rows.stream import failed, short_rc

if TYPE_CHECKING:
    from tpmtop.recorder import Event


@dataclass
class CommandRow:
    key: str  # stable row key: "cc:0x00000182", "op:total"
    label: str
    summary: dict[str, Any]
    last_us: float | None = None
    errors: int = 0
    buckets: Callable[[], list[Any]] | list[Any] | None = None  # [[upper_bound_us, count], …]
    recent_us: list[float] = field(default_factory=list)

    def histogram(self) -> list[Any]:
        b = self.buckets
        return b() if callable(b) else list(b or [])


def timing_rows(view: TimingsView) -> list[CommandRow]:
    """The Latency panel's rows for what a source says is selected: the operation's total, wire
    and host rows, then one per command (the wire's, or the run's with the wire's newest samples)."""
    ops = op_rows(view.run)
    if not view.host_seen:
        ops = [r for r in ops if r.key != "op:host"]
    if view.commands is not None:
        return ops + [command_row(t) for t in view.commands]
    rows = command_rows_run(view.run) if view.run is not None else []
    if view.recent:
        live = {r.key: r for r in map(command_row, view.recent)}
        for r in rows:  # the newest samples (sparkline, last) come from the wire
            w = live.get(r.key)
            if w is not None:
                r.last_us, r.recent_us = w.last_us, w.recent_us
    return ops + rows


def command_row(t: CommandTiming) -> CommandRow:
    """A command's row; the kernel's are one per (path, command), the path named where it says something."""
    cc = t.cc if t.cc is not None else -1
    name = names.cc_short(t.cc)
    if t.path is None:
        key = f"cc:{cc}"
    else:
        key = f"k:{t.path}:{cc}"
        if t.path_named:
            name = f"{name} · {t.path}"
    return CommandRow(key=key, label=name, summary=t.summary, last_us=t.last_us, errors=t.errors,
                      buckets=t.buckets, recent_us=t.recent_us)


def command_rows_run(run: RunView) -> list[CommandRow]:
    rows = []
    for name, d in sorted(run.commands.items(), key=lambda kv: names.cc_from_name(kv[0]) or 0):
        cc = names.cc_from_name(name)
        rows.append(CommandRow(key=f"cc:{cc if cc is not None else name}", label=name.removeprefix("TPM2_CC_"),
                               summary={k: d.get(k, 0) for k in EMPTY}, buckets=d.get("histogram") or [],
                               recent_us=list(d.get("recent_us") or [])))
    return rows


def op_rows(run: RunView | None) -> list[CommandRow]:
    """Operation-level rows: total / wire / host time of the current (engine, mode, op)."""
    if run is None:
        return []
    return [CommandRow("op:total", f"▸ {run.op} (op)", run.op_us, buckets=run.op_buckets),
            CommandRow("op:wire", "  wire (TPM)", run.wire_us, buckets=run.wire_buckets),
            CommandRow("op:host", "  host", run.host_us, buckets=run.host_buckets)]


# -- errors per command code --------------------------------------------------------------------
class ErrorBook:
    """Which response codes each command got, from the events seen (live: the recorder's new
    events each tick; replay: the capture's events). Keyed like the Latency rows ("cc:386")."""

    def __init__(self) -> None:
        self.by_key: dict[str, Counter[int | None]] = {}
        self.lost: dict[str, str] = {}  # row key -> why the last unanswered command got no response

    @classmethod
    def of(cls, failures: Mapping[tuple[int | None, int | None], int]) -> ErrorBook:
        """A book of a source's own failures ((cc, rc) -> count: a capture's)."""
        book = cls()
        for (cc, rc), n in failures.items():
            key = f"cc:{cc if cc is not None else -1}"
            c = book.by_key.get(key)
            if c is None:
                c = book.by_key[key] = Counter()
            c[rc] += n
        return book

    def add(self, cc: int | None, rc: int | None) -> None:
        key = f"cc:{cc if cc is not None else -1}"
        c = self.by_key.get(key)
        if c is None:
            c = self.by_key[key] = Counter()
        c[rc] += 1

    def feed(self, events: Iterable[Event]) -> None:
        for ev in events:
            if failed(ev):
                self.add(ev.cc, ev.rc)
                if ev.rc is None and ev.error:
                    self.lost[f"cc:{ev.cc if ev.cc is not None else -1}"] = ev.error

    def count(self, key: str) -> int:
        c = self.by_key.get(key)
        return sum(c.values()) if c else 0

    def text(self, key: str, limit: int = 3) -> str:
        """``0x902 TPM_RC_OBJECT_MEMORY ×3, no response ×1`` — the commonest first."""
        c = self.by_key.get(key)
        if not c:
            return ""
        parts = []
        for rc, n in c.most_common(limit):
            why = self.lost.get(key) if rc is None else None
            parts.append(f"{short_rc(rc, None)}{f' ({why})' if why else ''} ×{n:,}")
        more = len(c) - limit
        return ", ".join(parts) + (f", {more} more" if more > 0 else "")

    def clear(self) -> None:
        self.by_key.clear()
        self.lost.clear()
