"""The Health panel: ``tpmtop health``'s verdicts in the dashboard, one line each (and the first
line of its evidence under a warning or failure)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.markup import escape
from textual.widgets import Static

from tpmtop.health.verdicts import Level
from tpmtop.tui.widgets.panel import Panel, QuietStatic
from tpmtop.viewmodel.rows.health import HealthPart

# The level's mark and its theme colour (every string from elsewhere is escaped, never parsed).
_MARK = {Level.OK: "[$success]ok  [/]", Level.INFO: "[dim]info[/]", Level.UNKNOWN: "[dim]?   [/]",
         Level.WARN: "[b $warning]WARN[/]", Level.FAIL: "[b $error]FAIL[/]"}


def health_markup(part: HealthPart) -> str:
    out = []
    for ln in part.lines:
        out.append(f"{_MARK[ln.level]} {escape(ln.kind.label):<13} {escape(ln.text)}")
        if ln.level.problem and ln.evidence:
            out.append(f"[dim]     {'':<13} {escape(ln.evidence)}[/]")
    return "\n".join(out)


def subtitle(part: HealthPart) -> str:
    """The border's count (a line of its own cost a verdict its row beside Clients at 120×40)."""
    n = part.problems
    return f"{n} problem(s): tpmtop health has the evidence" if n else "no problem found"


class HealthPanel(Panel[HealthPart]):
    """One line per verdict, cut at the panel's width (an ellipsis), never wrapped: a verdict
    that wraps pushes the next one below the border at 120×40, where the left column is short."""

    DEFAULT_CSS = "#health-text { text-wrap: nowrap; text-overflow: ellipsis; }"
    title = "Health · lockout, driver, set-up, IMA"
    can_focus = True  # nothing inside takes the focus: its key and Tab land on the panel itself

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._text = QuietStatic()

    def compose(self) -> ComposeResult:
        yield Static("judging…", id="health-text")

    def show_part(self, part: HealthPart) -> None:
        self._text.set(self.query_one("#health-text", Static), health_markup(part))
        self.border_subtitle = subtitle(part)
