"""The screen that explains HMAC overhead: each (engine, mode)'s operation p50 as a bar, with
its ratio to `none` of the same engine."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Static

from tpmtop.sources.model import CompareRow, fmt_us
from tpmtop.tui.widgets.panel import Panel, QuietStatic


class ModesPanel(Panel):
    title = "Modes"

    def compose(self) -> ComposeResult:
        yield Static("no operations yet", id="bars")

    _last: tuple | None = None

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._text = QuietStatic()  # refreshed every second, mostly with the same text

    def on_resize(self, event) -> None:
        if self._last is not None:
            self.show(*self._last)

    def show(self, rows: list[CompareRow], op: str, current: tuple[str, str]) -> None:
        self._last = (rows, op, current)
        self.border_title = f"Modes · {op} · op p50"
        bars = self.query_one("#bars", Static)
        if not rows:
            self._text.set(bars, "[dim]no operations yet: each (engine, mode) you run shows up here[/]")
            return
        avail = max(30, self.content_size.width or 60)
        two_lines = avail < 72  # narrow: the numbers, then the bar under them
        width = avail - 5 if two_lines else avail - 50
        top = max(r.p50_us for r in rows) or 1.0
        lines = []
        for r in rows:
            n = max(1, round(r.p50_us / top * width))
            tone = "bar-baseline" if r.mode == "none" else "bar-session"
            mark = "▶" if (r.engine, r.mode) == current else " "
            ratio = f"×{r.ratio:,.1f}" if r.ratio is not None else "–"
            text = f"{mark}{r.engine:<6} {r.mode:<11} {fmt_us(r.p50_us):>8} µs {ratio:>6}"
            if avail >= 48:
                text += f" [dim]{r.commands_per_op:>2.0f} cmd/op[/]"
            bar = f"[${tone}]{'█' * n}[/]"
            lines += [text, f"  {bar}"] if two_lines else [f"{text} {bar}"]
        self._text.set(bars, "\n".join(lines))
