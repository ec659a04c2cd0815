"""One row per command code (and the operation's total / wire / host), and for the selected
row a logarithmic histogram and a sparkline of recent values."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.content import Content
from textual.markup import escape
from textual.message import Message
from textual.widget import Widget
from textual.widgets import DataTable, Sparkline

from tpmtop.tui.widgets.backdrop import Row
from tpmtop.tui.widgets.panel import Panel
from tpmtop.tui.widgets.table import KeyedTable
from tpmtop.viewmodel.commands import FrozenBuckets
from tpmtop.viewmodel.frame import StatsView
from tpmtop.viewmodel.numbers import fmt_us, tail_us
from tpmtop.viewmodel.rows.histogram import CAPTURE_PER_DECADE, FINE_PER_DECADE, histogram_lines
from tpmtop.viewmodel.rows.latency import CommandRow, ErrorBook

# (key, header, width, priority): a narrow panel drops the highest numbers first.
# µs cells are µs whatever their size, as their headers say (7 wide: up to 9999999 µs, fmt_us).
COLUMNS = (("name", "command", 21, 0), ("count", "count", 7, 1), ("errors", "errors", 6, 4),
           ("p50", "p50 µs", 7, 2), ("p90", "p90 µs", 7, 7), ("p99", "p99 µs", 7, 3), ("max", "max µs", 7, 5),
           ("last", "last µs", 7, 6))
NAME_GROW_TO = 32  # "SetCommandCodeAuditStatus · user": the longest command name with a path
HIST_EVERY_S = 2.0


class HistogramView(Widget):
    """The selected row's histogram, laid out at draw time for the size it has now
    (tpmtop.viewmodel.rows.histogram): a resize — the sparkline beside it appearing, a terminal
    made smaller — can never leave bars laid out for another width wrapping onto the next line."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._title: tuple[str, str] = ("", "")
        # (buckets, per decade, summary); None: title only
        self._data: tuple[list[Any], int, dict[str, Any]] | None = None

    def show(self, title: str, data: tuple[list[Any], int, dict[str, Any]] | None, tail: str = "") -> None:
        """``title`` and ``tail`` (markup) go either side of the slowest sample, which is said
        in the axis' unit."""
        if (title, tail) == self._title and data == self._data:
            return
        self._title, self._data = (title, tail), data
        self.refresh()  # same box, new text: no relayout

    def render(self) -> Content:
        title, tail = self._title
        if self._data is None:
            return Content.from_markup(title + tail)
        buckets, per_decade, summary = self._data
        w, h = self.content_size.width, self.content_size.height
        head, lines = histogram_lines(buckets, per_decade, summary, max(1, h - 1), max(20, w))
        return Content.from_markup("\n".join([f"{title} {head}{tail}", *lines]))


class LatencyPanel(Panel[StatsView]):
    title = "Latency"

    def compose(self) -> ComposeResult:
        # A cut name costs more than the last and p90 columns (priorities 6, 7), less than max.
        table = KeyedTable(COLUMNS, grow_to=NAME_GROW_TO, grow_priority=5.5, id="latency-table")
        table.pinned = "op:"  # the operation's total / wire / host stay on top of any sort
        yield table
        with Row(id="latency-detail"):
            yield HistogramView(id="histogram")
            yield Sparkline([], id="sparkline")

    @property
    def table(self) -> KeyedTable:
        return self.query_one(KeyedTable)

    _rows: Mapping[str, CommandRow] = MappingProxyType({})  # replaced whole by each update, never mutated
    _order: Mapping[str, int] = MappingProxyType({})  # replaced whole by each update, never mutated

    run_label = ""

    errors = None  # tpmtop.viewmodel.rows.latency.ErrorBook: which response codes a command got

    def show_part(self, part: StatsView) -> None:
        t = part.timings
        self.show(t.rows, t.subtitle, t.run_label, part.errors)

    def show(self, rows: list[CommandRow], subtitle: str = "", run_label: str = "",
             errors: ErrorBook | None = None) -> None:
        self.run_label = run_label
        self.errors = errors
        self._rows = {r.key: r for r in rows}
        self._order = {r.label: i for i, r in enumerate(rows)}
        cells = []
        for r in rows:
            s = r.summary
            label = Content.from_markup(f"[b]{r.label}[/]") if r.key.startswith("op:total") else r.label
            n_err = r.errors or (errors.count(r.key) if errors is not None else 0)
            err = Content.from_markup(f"[$error]{n_err:,}[/]") if n_err else ""
            cells.append((r.key, (label, f"{s['count']:,}", err, fmt_us(s["p50"]), tail_us(s, "p90"),
                                  tail_us(s, "p99"), fmt_us(s["max"]), fmt_us(r.last_us))))
        self.table.sync(cells, order=lambda first: self._order.get(first, 999))
        needle = self.table.needle
        self.border_subtitle = subtitle + (f" · filter '{needle}'" if needle else "")
        self.show_detail()

    def show_detail(self, force: bool = False) -> None:
        key = self.table.selected_key
        row = self._rows.get(key or "")
        hist = self.query_one(HistogramView)
        spark = self.query_one("#sparkline", Sparkline)
        if row is None:
            hist.show("", None)
            spark.display = False
            return
        s = row.summary
        title = f"[b]{escape(row.label.strip(' ▸'))}[/]"
        tail = f" {escape(self.run_label)}" if row.key.startswith("op:") else ""
        why = self.errors.text(row.key) if self.errors is not None else ""
        if why:  # which errors, decoded: the count alone does not say what went wrong
            tail += f" [$error]errors: {escape(why)}[/]"
        if callable(row.buckets):
            # Live: the buckets are walked in a worker, for the selected row only, once per
            # frame: each frame's row holds its own snapshot (tpmtop.sources.histreads.
            # FrozenBuckets), so the histogram counts what the table's row counts (redrawn every
            # HIST_EVERY_S, the histogram counted samples the table had not: 492 against 473).
            # A live histogram without a snapshot (not a frame's) keeps the time limit.
            now = time.monotonic()
            fresh = (row.buckets is not self._hist_src if isinstance(row.buckets, FrozenBuckets)
                     else now - self._hist_t >= HIST_EVERY_S)
            if force or key != self._hist_key or fresh:
                self._hist_key, self._hist_t, self._hist_src = key, now, row.buckets
                self.compute_histogram(key, row.buckets, s, title, tail)
            if key != self._hist_for:
                hist.show(title, None, tail + "\n[dim]…[/]")
        else:
            hist.show(title, (row.histogram(), CAPTURE_PER_DECADE, s), tail)
        data = row.recent_us[-60:] if row.recent_us else []
        if data != spark.data:
            spark.data = data
        spark.display = len(data) >= 2  # one sample drew a solid block; an empty one claims "all equal"
        spark.tooltip = (f"last {len(row.recent_us)} samples, {fmt_us(min(row.recent_us))}–"
                         f"{fmt_us(max(row.recent_us))} µs" if row.recent_us else "no recent samples")

    _hist_key: str | None = None
    _hist_for: str | None = None
    _hist_src: object = None  # the frame's buckets the histogram was asked for
    _hist_drawn: object = None  # …and those it shows
    _hist_t = 0.0

    class HistogramReady(Message):
        def __init__(self, key: str, title: str, tail: str, buckets: list[Any], summary: dict[str, Any],
                     source: object = None) -> None:
            super().__init__()
            self.source = source  # the row's buckets (a frame's snapshot) these were read from
            self.key = key
            self.title = title
            self.tail = tail
            self.buckets = buckets
            self.summary = summary

    @work(thread=True, exclusive=True, exit_on_error=False, group="histogram", description="histogram")
    def compute_histogram(self, key: str, buckets: Callable[[int], list[Any]], summary: dict[str, Any], title: str,
                          tail: str) -> None:
        # The title's max comes from the same moment as the buckets (the row's summary is the
        # last refresh's: a slower sample since would sit in a bucket above the max said)
        now = getattr(buckets, "summary", None)
        for _ in range(3):
            b = buckets(FINE_PER_DECADE)
            if now is None:
                break
            summary = now()
            if summary.get("count") == sum(c for _, c in b):
                break  # nothing recorded between the two reads
        self.post_message(self.HistogramReady(key, title, tail, b, summary, buckets))

    def on_latency_panel_histogram_ready(self, message: LatencyPanel.HistogramReady) -> None:
        if message.key == self.table.selected_key:
            self._hist_for, self._hist_drawn = message.key, message.source
            self.query_one(HistogramView).show(message.title, (message.buckets, FINE_PER_DECADE, message.summary),
                                               message.tail)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_detail(force=True)
