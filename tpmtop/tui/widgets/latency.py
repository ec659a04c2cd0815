"""One row per command code (and the operation's total / wire / host), and for the selected
row a logarithmic histogram and a sparkline of recent values."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Sparkline, Static

from tpmtop.tui.model import CommandRow, fmt_us
from tpmtop.tui.widgets.panel import Panel
from tpmtop.tui.widgets.table import KeyedTable

COLUMNS = (("name", "command", 24), ("count", "count", 7), ("p50", "p50 µs", 7), ("p90", "p90 µs", 7),
           ("p99", "p99 µs", 7), ("max", "max µs", 7), ("last", "last µs", 7))
HIST_BAR = 24


def histogram_markup(buckets: list, summary: dict, lines: int) -> str:
    if not buckets:
        return "[dim]no samples[/]"
    # Keep the busiest contiguous window that fits.
    if len(buckets) > lines:
        best = max(range(len(buckets) - lines + 1), key=lambda i: sum(c for _, c in buckets[i:i + lines]))
        buckets = buckets[best:best + lines]
    top = max(c for _, c in buckets) or 1
    out = []
    for ub, c in buckets:
        tone = "fast" if ub <= summary.get("p50", 0) * 1.2 else "mid" if ub <= summary.get("p99", 0) * 1.2 else "slow"
        n = max(1, round(c / top * HIST_BAR)) if c else 0
        out.append(f"≤{fmt_us(ub):>8} [$latency-{tone}]{'█' * n}[/]{' ' * (HIST_BAR - n)} {c}")
    return "\n".join(out)


class LatencyPanel(Panel):
    title = "Latency"

    def compose(self) -> ComposeResult:
        yield KeyedTable(COLUMNS, id="latency-table")
        with Horizontal(id="latency-detail"):
            yield Static("", id="histogram")
            yield Sparkline([], id="sparkline")

    @property
    def table(self) -> KeyedTable:
        return self.query_one(KeyedTable)

    _rows: dict = {}
    _order: dict = {}

    run_label = ""

    def show(self, rows: list[CommandRow], subtitle: str = "", run_label: str = "") -> None:
        self.run_label = run_label
        self._rows = {r.key: r for r in rows}
        self._order = {r.label: i for i, r in enumerate(rows)}
        cells = []
        for r in rows:
            s = r.summary
            label = Content.from_markup(f"[b]{r.label}[/]") if r.key.startswith("op:total") else r.label
            err = f" !{r.errors}" if r.errors else ""
            cells.append((r.key, (label, f"{s['count']}{err}", fmt_us(s["p50"]), fmt_us(s["p90"]),
                                  fmt_us(s["p99"]), fmt_us(s["max"]), fmt_us(r.last_us))))
        self.table.sync(cells, order=lambda first: self._order.get(first, 999))
        self.border_subtitle = subtitle
        self.show_detail()

    def show_detail(self) -> None:
        key = self.table.selected_key
        row = self._rows.get(key or "")
        hist = self.query_one("#histogram", Static)
        spark = self.query_one("#sparkline", Sparkline)
        if row is None:
            hist.update("")
            spark.data = []
            return
        lines = max(3, self.query_one("#latency-detail").size.height or 7)
        hist.update(Content.from_markup(f"[b]{row.label.strip(' ▸')}[/] {self.run_label if row.key.startswith('op:') else ''}\n" +
                                        histogram_markup(row.histogram(), row.summary, lines - 1)))
        spark.data = row.recent_us[-60:] if row.recent_us else []
        spark.display = bool(row.recent_us)  # a flat line would claim "all equal"
        spark.tooltip = (f"last {len(row.recent_us)} samples, {fmt_us(min(row.recent_us))}–"
                         f"{fmt_us(max(row.recent_us))} µs" if row.recent_us else "no recent samples")

    def on_data_table_row_highlighted(self, event) -> None:
        self.show_detail()
