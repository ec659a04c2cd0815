"""The Latency panel's rows: one per command of the current run (and the operation's
total, wire and host rows), and the response codes each command got. No Textual here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpmtop.sources.runs import RunView
from tpmtop.tpm import names
from tpmtop.tpm.exchange import Origin
from tpmtop.viewmodel.numbers import EMPTY, buckets_of, summary_of
from tpmtop.viewmodel.rows.stream import failed, short_rc

if TYPE_CHECKING:
    from tpmtop.recorder import Event, Recorder


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


def command_rows_live(recorder: Recorder, origin: str | None = Origin.WORKLOAD) -> list[CommandRow]:
    rows = []
    for cc, st in sorted(recorder.command_stats(origin).items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        rows.append(CommandRow(
            key=f"cc:{cc if cc is not None else -1}", label=names.cc_short(cc), summary=summary_of(st.hist),
            last_us=st.last_ns / 1000 if st.last_ns else None, errors=st.errors, buckets=buckets_of(st.hist),
            recent_us=[v / 1000 for v in list(st.recent)]))
    return rows


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
