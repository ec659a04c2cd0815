"""The screen that explains HMAC overhead: each (engine, mode)'s operation p50 as a bar, with
its ratio to `none` of the same engine."""

from __future__ import annotations

from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.content import Content
from textual.widgets import Static

from tpmtop.sessions.modes import MODE_INFO, Mode
from tpmtop.tui.widgets.panel import Panel, QuietStatic
from tpmtop.viewmodel.frame import StatsView, TimelinePoint
from tpmtop.viewmodel.numbers import fmt_duration
from tpmtop.viewmodel.rows.modes import CompareRow, baseline_note, fmt_ratio

BLOCKS = "▁▂▃▄▅▆▇█"
GAP = "\u00a0"  # a no-break space: wrapping drops leading plain spaces, and the cells must line up
AXIS = "─"  # the time axis under the series; a mode's initial where it starts


def mode_tone(mode: str) -> str:
    """The theme variable a mode's bars are drawn in (the mode's own, tpmtop.sessions.modes)."""
    return MODE_INFO[Mode(mode)].tone if mode in MODE_INFO else "bar-session"


def timeline_markup(series: list[TimelinePoint | None], width: int) -> list[str]:
    """Op p50 per second on a log scale, one cell per second (newest right), coloured by
    the mode that second ran; the mode's initial marks each switch on the line below."""
    import math

    series = series[-width:]
    vals = [p.p50_us for p in series if p is not None]
    lo, hi = math.log10(max(min(vals), 0.1)), math.log10(max(max(vals), 0.1))
    span = (hi - lo) or 1.0
    top, marks, prev = [], [], None
    for p in series:
        if p is None:
            top.append(GAP)
            marks.append(AXIS)
            continue
        level = round((math.log10(max(p.p50_us, 0.1)) - lo) / span * (len(BLOCKS) - 1))
        top.append(f"[${mode_tone(p.mode)}]{BLOCKS[level]}[/]")
        marks.append(p.mode[0] if p.mode != prev else AXIS)
        prev = p.mode
    return ["[dim]op p50 each second (log; letter: mode)[/]",
            "".join(top), "[dim]" + "".join(marks).replace("[", "\\[") + "[/]"]


class ModesPanel(Panel[StatsView]):
    title = "Modes"
    can_focus = True  # nothing inside takes the focus: its key and Tab land on the panel itself

    def compose(self) -> ComposeResult:
        yield Static("no operations yet", id="bars")

    _last: tuple[Any, ...] | None = None

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._text = QuietStatic()  # refreshed every second, mostly with the same text

    def on_resize(self, event: events.Resize) -> None:
        if self._last is not None:
            self.show(*self._last)

    def show_part(self, st: StatsView) -> None:
        self.show(st.compare, st.op, st.current, st.boot, st.series, st.timings.modes_lines, st.headline)
        self.border_subtitle = st.timings.modes_note

    def show(self, rows: list[CompareRow], op: str, current: tuple[str, str], boot: str = "",
             series: list[TimelinePoint | None] | None = None, notes: list[str] | None = None,
             headline: str = "") -> None:
        """``boot``: markup of the boot-cost projection for this sitting (screens/projection.py);
        ``series``: op p50 per second (model.timeline), drawn across mode switches; ``notes``:
        plain text under the bars (a kernel's session verdict, which quotes task names);
        ``headline``: markup of the running mode's ratio to `none` (rows/modes.headline)."""
        self._last = (rows, op, current, boot, series, notes, headline)
        self.border_title = f"Modes · {op} · op p50"
        bars = self.query_one("#bars", Static)
        if not rows:
            texts = [Content.from_markup(headline)] if headline else []
            if notes:  # the source says what it waits for (the kernel: its first extend)
                texts += [Content.from_markup("[dim]$t[/]", t=t) for t in notes]
            else:
                texts.append(Content.from_markup("[dim]no operations yet: each (engine, mode) run shows up here[/]"))
            self._text.set(bars, Content("\n").join(texts))
            return
        parts = [Content.from_markup(headline)] if headline else []
        # The text's own width: the panel's less the scrollbar's gutter (tpmtop.tcss keeps it).
        width = bars.content_size.width or self.content_size.width or 60
        engines = {r.engine for r in rows}
        if len(engines) == 1:  # no engine column then: the border says whose rows these are
            self.border_title = f"Modes · {next(iter(engines))} · {op} · op p50"
        parts.append(Content.from_markup("\n".join(bar_lines(rows, current, width))))
        note = baseline_note(rows, current[1], width)
        parts += [Content.from_markup("[dim]$t[/]", t=t) for t in ([note] if note else []) + list(notes or ())]
        avail = max(30, width)
        tail = ([boot] if boot else []) + (timeline_markup(series, avail) if series and any(series) else [])
        if tail:
            parts.append(Content.from_markup("\n".join(tail)))
        self._text.set(bars, Content("\n").join(parts))


ENGINE_SHORT = {"native": "nat", "esys": "esys"}  # a narrow panel with both engines' rows


def bar_lines(rows: list[CompareRow], current: tuple[str, str], width: int) -> list[str]:
    """A header and one line per (engine, mode), whatever the width (two lines each hid the
    active row at 120×40 once both engines had run), the bar taking what the columns leave:
    the engine column only when two engines ran (the border names a lone one), narrowed below
    58 columns, so a 42-column text (120×40) still draws its bars."""
    engines = {r.engine for r in rows}
    eng_w = 0 if len(engines) < 2 else 7 if width >= 58 else 5
    fixed = 1 + eng_w + 12 + 10 + 7 + 3  # mark, engine, mode, p50, ratio, commands per op
    bar_w = width - fixed - 1
    top = max(r.p50_us for r in rows) or 1.0
    eng_head = f"{'engine':<{eng_w - 1}} " if eng_w == 7 else f"{'eng':<{eng_w - 1}} " if eng_w else ""
    lines = [f"[dim] {eng_head}{'mode':<11} {'op p50':>9} {'×none':>6} cmd[/]"]
    for r in rows:
        tone = mode_tone(r.mode)
        mark = "▶" if (r.engine, r.mode) == current else " "
        eng = ENGINE_SHORT.get(r.engine, r.engine) if eng_w == 5 else r.engine
        eng = f"{eng[:eng_w - 1]:<{eng_w - 1}} " if eng_w else ""
        mode = r.mode + ("*" if r.interleaved else "")
        ratio = fmt_ratio(r.ratio) if r.ratio is not None else "–"
        text = f"{mark}{eng}{mode:<11} {fmt_duration(r.p50_us):>9} {ratio:>6} {r.commands_per_op:>2.0f}"
        if bar_w >= 3:
            n = max(1, round(r.p50_us / top * bar_w))
            text += f" [${tone}]{'█' * n}[/]"
        lines.append(text)
    return lines
