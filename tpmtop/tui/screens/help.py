"""``?``: every key, from the same table as the footer and the command palette."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Static

from tpmtop.stats import NOT_JUDGED, TAIL_MIN_SAMPLES
from tpmtop.tui.actions import ACTIONS
from tpmtop.tui.panels import PANELS

KEY_NAMES = {"space": "space", "plus": "+", "minus": "-", "slash": "/", "question_mark,f1": "? F1",
             "greater_than_sign": ">", "less_than_sign": "<", "left_square_bracket": "[",
             "right_square_bracket": "]", "q,f10": "q"}


def help_markup(width: int = 96, hidden: frozenset[str] = frozenset(), why_hidden: str = "",
                panels: tuple[str, ...] | None = None) -> str:
    """``width``: the text's width; each key's help wraps under its own column, not under the key.
    ``hidden``: actions this dashboard's source can never do (a kernel trace has no workload to
    pause): listed in one line with ``why_hidden`` instead of as keys that do nothing.
    ``panels``: the panel ids this dashboard has (None: all)."""
    import textwrap

    lines = ["[b]Keys[/]  (all of these are also in the command palette: ctrl+p)", ""]
    for a in ACTIONS:
        if a.action in hidden:
            continue
        body = textwrap.wrap(a.help, max(30, width - 10))
        # padded first, then escaped: a lone "[" (the refresh key) is markup's escape character
        key = f"{KEY_NAMES.get(a.key, a.key):>6}".replace("[", "\\[")
        lines.append(f"  [b $accent]{key}[/]  {escape(body[0])}")
        lines += ["\u00a0" * 10 + escape(more) for more in body[1:]]  # no-break: kept when wrapped
    here = [p for p in PANELS if panels is None or p.id in panels]
    shown = [(p.key, p.title) for p in here]
    span = f"{shown[0][0]}–{shown[-1][0]}" if len(shown) > 1 else shown[0][0] if shown else "–"
    lines.append(f"  [b $accent]{span:>6}[/]  show a panel: " + ", ".join(f"{k} {t}" for k, t in shown))
    tab = textwrap.wrap("the next panel (shift+tab the previous; below 110×32 it turns the tab); arrows move in a "
                        "table; the mouse works too", max(30, width - 10))
    lines.append(f"  [b $accent]{'tab':>6}[/]  {tab[0]}")
    lines += ["\u00a0" * 10 + more for more in tab[1:]]
    if hidden:
        keys = " ".join(KEY_NAMES.get(a.key, a.key) for a in ACTIONS if a.action in hidden)
        why = f": {why_hidden}" if why_hidden else ""
        body = textwrap.wrap(f"not in this view: {keys}{why}", max(30, width - 10))
        # every "[" escaped: a lone one (the refresh key) would swallow the closing tag
        lines += ["\u00a0" * 10 + f"[dim]{part.replace('[', chr(92) + '[')}[/]" for part in body]
    lines += ["", "[b]Reading the panels[/]",
              "  Header: [b]CPU ui[/] is the dashboard's own thread, [b]all[/] the whole process (workload, "
              "poller, recorder), as a share of one core. A paced workload runs in bursts (>= 4 operations "
              "back to back) so each operation runs warm and the ratios match `tpmtop bench`.",
              f"  A [b]{NOT_JUDGED}[/] for a p90 or p99: fewer than "
              f"{TAIL_MIN_SAMPLES['p90']} or {TAIL_MIN_SAMPLES['p99']} samples, so that tail would be their largest."]
    lines += [f"  {p.help}" for p in here]
    lines += ["", "[b]Observer effect[/]: on Linux 6.12+ every command a program sends to /dev/tpmrm0 ends the "
              "kernel's kept HMAC session, so the kernel's next PCR extend pays the whole session setup again. "
              "On a real TPM tpmtop polls rarely (--poll-interval, default 5 s) and --passive sends nothing.",
              "", "[dim]Esc, q or ? closes this screen.[/]"]
    return "\n".join(lines)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "app.pop_screen", "Close", id="help-close", tooltip="Back to the dashboard")]

    def __init__(self, hidden: frozenset[str] = frozenset(), why_hidden: str = "",
                 panels: tuple[str, ...] | None = None) -> None:
        super().__init__()
        self.hidden, self.why_hidden, self.panels = hidden, why_hidden, panels

    def on_screen_resume(self) -> None:
        self.query_one("#help-box").scroll_home(animate=False)  # kept installed: opens at the top again

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            # The box is 100 wide (95 % of a narrower screen), less its border and padding.
            width = min(100, int(self.app.size.width * 0.95)) - 6  # border, padding, scrollbar
            text = help_markup(width, self.hidden, self.why_hidden, self.panels)
            yield Static(Content.from_markup(text), id="help-text")
