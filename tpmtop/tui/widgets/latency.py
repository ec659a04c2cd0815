"""One row per command code (and the operation's total / wire / host), and for the selected
row a logarithmic histogram and a sparkline of recent values."""

from __future__ import annotations

import time

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.markup import escape
from textual.message import Message
from textual.widgets import Sparkline, Static

from tpmtop.sources.numbers import fmt_us
from tpmtop.sources.rows.latency import CommandRow
from tpmtop.tui.widgets.panel import Panel
from tpmtop.tui.widgets.table import KeyedTable
from tpmtop.viewmodel.frame import Frame

# (key, header, width, priority): a narrow panel drops the highest numbers first.
COLUMNS = (("name", "command", 21, 0), ("count", "count", 7, 1), ("errors", "errors", 6, 4),
           ("p50", "p50 µs", 7, 2), ("p90", "p90 µs", 7, 7), ("p99", "p99 µs", 7, 3), ("max", "max µs", 7, 5),
           ("last", "last µs", 7, 6))
NAME_GROW_TO = 32  # "SetCommandCodeAuditStatus · user": the longest command name with a path
HIST_BAR = 24
HIST_EVERY_S = 2.0


def histogram_markup(buckets: list, summary: dict, lines: int, width: int = 44) -> str:
    """One bucket per line, never wrapped: the bar gets what ``width`` leaves."""
    if not buckets:
        return "[dim]no samples[/]"
    # Keep the busiest contiguous window that fits.
    if len(buckets) > lines:
        best = max(range(len(buckets) - lines + 1), key=lambda i: sum(c for _, c in buckets[i:i + lines]))
        buckets = buckets[best:best + lines]
    top = max(c for _, c in buckets) or 1
    bar_w = max(4, min(HIST_BAR, width - 10 - 1 - len(str(top)) - 1))
    out = []
    for ub, c in buckets:
        tone = "fast" if ub <= summary.get("p50", 0) * 1.2 else "mid" if ub <= summary.get("p99", 0) * 1.2 else "slow"
        n = max(1, round(c / top * bar_w)) if c else 0
        out.append(f"≤{fmt_us(ub):>8} [$latency-{tone}]{'█' * n}[/]{' ' * (bar_w - n)} {c}")
    return "\n".join(out)


class LatencyPanel(Panel):
    title = "Latency"

    def compose(self) -> ComposeResult:
        # A cut name costs more than the last and p90 columns (priorities 6, 7), less than max.
        table = KeyedTable(COLUMNS, grow_to=NAME_GROW_TO, grow_priority=5.5, id="latency-table")
        table.pinned = "op:"  # the operation's total / wire / host stay on top of any sort
        yield table
        with Horizontal(id="latency-detail"):
            yield Static("", id="histogram")
            yield Sparkline([], id="sparkline")

    @property
    def table(self) -> KeyedTable:
        return self.query_one(KeyedTable)

    _rows: dict = {}
    _order: dict = {}

    run_label = ""

    errors = None  # tpmtop.sources.rows.latency.ErrorBook: which response codes a command got

    def show_frame(self, frame: Frame) -> None:
        if frame.stats is not None:
            t = frame.stats.timings
            self.show(t.rows, t.subtitle, t.run_label, frame.stats.errors)

    def show(self, rows: list[CommandRow], subtitle: str = "", run_label: str = "", errors=None) -> None:
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
            cells.append((r.key, (label, f"{s['count']:,}", err, fmt_us(s["p50"]), fmt_us(s["p90"]),
                                  fmt_us(s["p99"]), fmt_us(s["max"]), fmt_us(r.last_us))))
        self.table.sync(cells, order=lambda first: self._order.get(first, 999))
        needle = self.table.needle
        self.border_subtitle = subtitle + (f" · filter '{needle}'" if needle else "")
        self.show_detail()

    def show_detail(self, force: bool = False) -> None:
        key = self.table.selected_key
        row = self._rows.get(key or "")
        hist = self.query_one("#histogram", Static)
        spark = self.query_one("#sparkline", Sparkline)
        if row is None:
            self._set(hist, "")
            spark.display = False
            return
        lines = max(3, self.query_one("#latency-detail").size.height or 7) - 1
        width = hist.size.width or 44
        title = f"[b]{escape(row.label.strip(' ▸'))}[/] {escape(self.run_label) if row.key.startswith('op:') else ''}"
        why = self.errors.text(row.key) if self.errors is not None else ""
        if why:  # which errors, decoded: the count alone does not say what went wrong
            title += f" [$error]errors: {escape(why)}[/]"
        if callable(row.buckets):
            # Live: walking an HDR histogram takes up to ~170 ms of Python, so it runs in a
            # worker, for the selected row only, at most every HIST_EVERY_S.
            now = time.monotonic()
            if force or key != self._hist_key or now - self._hist_t >= HIST_EVERY_S:
                self._hist_key, self._hist_t = key, now
                self.compute_histogram(key, row.buckets, row.summary, lines, title, width)
            if key != self._hist_for:
                self._set(hist, title + "\n[dim]…[/]")
        else:
            self._set(hist, title + "\n" + histogram_markup(row.histogram(), row.summary, lines, width))
        data = row.recent_us[-60:] if row.recent_us else []
        if data != spark.data:
            spark.data = data
        spark.display = len(data) >= 2  # one sample drew a solid block; an empty one claims "all equal"
        spark.tooltip = (f"last {len(row.recent_us)} samples, {fmt_us(min(row.recent_us))}–"
                         f"{fmt_us(max(row.recent_us))} µs" if row.recent_us else "no recent samples")

    _hist_key: str | None = None
    _hist_for: str | None = None
    _hist_t = 0.0

    class HistogramReady(Message):
        def __init__(self, key: str, markup: str) -> None:
            super().__init__()
            self.key = key
            self.markup = markup

    @work(thread=True, exclusive=True, exit_on_error=False, group="histogram", description="histogram")
    def compute_histogram(self, key, buckets, summary, lines, title, width) -> None:
        self.post_message(self.HistogramReady(key, title + "\n" + histogram_markup(buckets(), summary, lines, width)))

    def on_latency_panel_histogram_ready(self, message: LatencyPanel.HistogramReady) -> None:
        if message.key == self.table.selected_key:
            self._hist_for = message.key
            self._set(self.query_one("#histogram", Static), message.markup)

    _shown = ""

    def _set(self, hist: Static, markup: str) -> None:
        if markup != self._shown:
            self._shown = markup
            hist.update(Content.from_markup(markup), layout=False)  # fixed-size box (#latency-detail)

    def on_data_table_row_highlighted(self, event) -> None:
        self.show_detail(force=True)
