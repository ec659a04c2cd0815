"""Helpers shared by the dashboard's Pilot tests (real swtpm, nothing mocked); their fixtures
(a private config, a LiveSource on a fresh swtpm) are in tests/tui/conftest.py."""

from __future__ import annotations

import time

from tpmtop.tui.app import TpmtopApp
from tpmtop.tui.screens.main import MainScreen

SIZE = (120, 40)


def app_for(src, tmp_path, **kw) -> TpmtopApp:
    return TpmtopApp(src, theme="dark", remember=False, export_dir=str(tmp_path), **kw)


async def until(pilot, cond, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def mode_ops(src, mode: str, engine: str = "native", op: str = "extend") -> int:
    """The operations one mode has run (0 before its first): what a test waits on, since the
    interleaved `none` baseline, in bursts, can reach any count before the mode does."""
    acc = src.accounts().get((engine, mode, op))
    return acc.ops if acc is not None else 0


def main_screen(app) -> MainScreen:
    return next(s for s in app.screen_stack if isinstance(s, MainScreen))


def header_text(app) -> str:
    return str(main_screen(app).query_one("#header").render())


# A bucket line of the Latency panel's histogram: its upper bound, one unit, and its count (none
# drawn for an empty bucket).
HIST_LINE = r"^≤\s*([\d,.]+) (µs|ms|s)(?:\s+█+\s+([\d,]+))?\s*$"


def histogram_counts(text: str) -> list[int]:
    """Each bucket line's count, 0 for an empty bucket (drawn with no bar and no count)."""
    import re

    return [int((m.group(3) or "0").replace(",", "")) for m in re.finditer(HIST_LINE, text, re.M)]


def message_line(screen) -> str:
    """What the dashboard's message line above the footer says now ("" if the screen has none):
    messages are drawn there, never as toasts."""
    return " ".join(str(w.render()) for w in screen.query("#message-text"))


def drawn(app) -> list[tuple[object, list]]:
    """The screen as its widgets draw it, through Textual's public API: each displayed widget
    with an area (the screen first, then its descendants in order) and the strips its
    ``render_lines`` gives for its whole region (border, padding and content)."""
    from textual.geometry import Region

    out = []
    for w in [app.screen, *app.screen.query("*")]:
        if w.display and w.region.area:
            out.append((w, w.render_lines(Region(0, 0, w.region.width, w.region.height))))
    return out


def theme_applied(app) -> bool:
    """The screen draws in the app's theme: its background is the theme's (what waiting on
    Textual's private CSS update counters told before)."""
    from textual.color import Color

    return app.screen.styles.background == Color.parse(app.get_css_variables()["background"])

