"""The main screen's layout: its widgets in their rows and columns (from the panel table,
tpmtop.tui.panels), which panels show at a terminal's size (all of them, or one behind tabs
below COMPACT_W × COMPACT_H), and where a panel's key puts the focus. Functions of the screen's
widgets, so the screen's module only calls them."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static, Tab, Tabs

from tpmtop.tui.panels import CONTAINERS, PANELS, Group
from tpmtop.tui.widgets.backdrop import Column, Row
from tpmtop.tui.widgets.footer import KeyBar
from tpmtop.tui.widgets.header import StatusHeader
from tpmtop.tui.widgets.messages import MessageLine
from tpmtop.tui.widgets.panel import Panel

COMPACT_W, COMPACT_H = 110, 32
NARROW_W = 120  # below: the footer shows only the essential keys


def compose_main(panels: list[str], active: str) -> ComposeResult:
    yield StatusHeader(id="header")
    yield Static(id="observer")
    yield Tabs(*[Tab(f"{p.key} {p.title}", id=f"tab-{p.id}") for p in PANELS if p.id in panels],
               active=f"tab-{active}", id="panel-tabs")

    def group(g: Group) -> ComposeResult:
        for p in PANELS:
            if p.group is g:
                yield p.widget(id=p.id)

    with Column(id="body"):
        with Row(id="top"):
            with Column(id="left"):
                yield from group(Group.LEFT)
            yield from group(Group.RIGHT)
        with Row(id="bottom"):
            yield from group(Group.BOTTOM)
    yield MessageLine(id="message-bar")
    yield KeyBar(id="keybar")


def apply_layout(screen: Screen[Any], panels: list[str], active: str) -> bool:
    """Show the panels that fit ``screen``'s size; True: compact (one panel, behind tabs)."""
    w, h = screen.size
    compact = bool(w and h) and (w < COMPACT_W or h < COMPACT_H)
    screen.set_class(compact, "-compact")
    screen.set_class(bool(w) and w < NARROW_W, "-narrow")
    screen.query_one("#panel-tabs").display = compact
    visible = set(panels) if not compact else {active}
    for p in PANELS:
        panel = screen.query_one(f"#{p.id}", Panel)
        panel.display = p.id in visible and (panel.has_content or compact)
    for cid, groups in CONTAINERS.items():
        screen.query_one(f"#{cid}").display = any(p.id in visible for p in PANELS if p.group in groups)
    if compact:
        tabs = screen.query_one("#panel-tabs", Tabs)
        if tabs.active != f"tab-{active}":
            tabs.active = f"tab-{active}"
    return compact


def focus_first(panel: Widget) -> None:
    """A panel with nothing focusable inside (Resources, Modes, System) takes the focus itself:
    its key then visibly lands on it (the focused border), also when every panel shows."""
    focusable = [w for w in panel.query("*") if w.can_focus and w.display] or [panel] * panel.can_focus
    if focusable:
        focusable[0].focus()
