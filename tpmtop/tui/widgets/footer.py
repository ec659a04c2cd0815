"""The key bar at the bottom of the dashboard: one widget drawing one line.

Textual's Footer is a container of a dozen ``FooterKey`` widgets, each styled and rendered on
its own. A theme switch (``t``) restyles and repaints every node of the screen, and those keys
were a fifth of it: with them ~50 ms of UI-thread CPU at 140×44, without them ~41 ms
(benchmarks/ui_load.py, ``t``), where the key target needs ≤ 45. Textual's Footer also
rebuilds its keys (mount, layout, render) whenever the screen's bindings may have changed,
on every focus change. This bar draws the same keys, in the same look (Footer's theme
variables), as one line of text: a bindings change that shows nothing new costs a comparison,
one that does costs a repaint of one line. A click on a key presses it and the mouse on a key
shows its binding's tooltip, as on Footer's.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

from rich.text import Text
from textual import events
from textual.screen import Screen
from textual.widget import Widget

from tpmtop.tui.actions import OPTIONAL_IN_FOOTER


class _Key(NamedTuple):
    key: str  # what a click presses
    display: str  # how it is drawn ("?" for question_mark)
    description: str
    action: str
    enabled: bool
    tooltip: str = ""  # the binding's (the help text): shown while the mouse is on the key


class KeyBar(Widget, can_focus=False):
    """The screen's shown bindings, each `` key Description``; the command palette's on the right.
    Keys that are not essential are left out when the screen is ``-narrow`` (below 120 columns),
    so that Help and Quit always show; the rest stay in the help (?) and the palette."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES: ClassVar[set[str]] = {"keybar--key", "keybar--description", "keybar--hover", "keybar--separator"}
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        text-wrap: nowrap;
        color: $footer-foreground;
        background: $footer-background;
        & > .keybar--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        & > .keybar--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        & > .keybar--hover {
            color: $footer-key-foreground;
            background: $block-hover-background;
        }
        & > .keybar--separator { color: $foreground 20%; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._keys: tuple[_Key, ...] = ()
        self._palette: _Key | None = None
        self._spans: list[tuple[int, int, _Key]] = []  # where each key was drawn (for the mouse)
        self._hover: int | None = None  # where the key under the mouse starts

    def on_mount(self) -> None:
        # Drawn from the screen's first bindings update: before it, asking which actions are
        # enabled would reach panels not mounted yet (Footer waits for it too).
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[Any]) -> None:
        if screen is not self.screen or not screen.app.app_focus:
            return  # Footer's rule: an app without focus keeps what it shows
        app = self.app
        keys: dict[str, _Key] = {}
        for _node, binding, enabled, tooltip in screen.active_bindings.values():
            if binding.show and binding.action not in keys:  # one key per action, as Footer
                keys[binding.action] = _Key(binding.key, app.get_key_display(binding), binding.description,
                                            binding.action, enabled, tooltip or binding.tooltip)
        palette = None
        if app.ENABLE_COMMAND_PALETTE:
            found = screen.active_bindings.get(app.COMMAND_PALETTE_BINDING)
            if found is not None:
                _node, binding, enabled, tooltip = found
                palette = _Key(binding.key, app.get_key_display(binding), binding.description, binding.action,
                               enabled, tooltip or binding.tooltip or binding.description)
                keys.pop(binding.action, None)
        shown = tuple(keys.values())
        if shown != self._keys or palette != self._palette:
            self._keys, self._palette = shown, palette
            self.refresh()

    @property
    def keys(self) -> tuple[_Key, ...]:
        """What the bar shows now (the palette's key last), for tests and the help."""
        narrow = self.screen.has_class("-narrow")
        shown = tuple(k for k in self._keys if not (narrow and k.action in OPTIONAL_IN_FOOTER))
        return shown + ((self._palette,) if self._palette is not None else ())

    def render(self) -> Text:
        key_style = self.get_component_rich_style("keybar--key")
        description_style = self.get_component_rich_style("keybar--description")
        hover_style = self.get_component_rich_style("keybar--hover")
        keys = self.keys
        left, right = (keys[:-1], keys[-1]) if self._palette is not None else (keys, None)
        text = Text(no_wrap=True, overflow="crop", end="")
        spans: list[tuple[int, int, _Key]] = []

        def draw(k: _Key, *, key_pad: str = " ") -> None:
            start = len(text)
            text.append(f"{key_pad}{k.display} ", key_style)
            text.append(f"{k.description} ", description_style)
            end = len(text)
            if start == self._hover:
                text.stylize(hover_style, start, end)
            if not k.enabled:
                text.stylize("dim", start, end)
            spans.append((start, end, k))

        for k in left:
            draw(k)
        if right is not None:
            tail = len(right.display) + len(right.description) + 3  # "▏" "^p " "palette "
            text.append(" " * max(1, self.size.width - len(text) - tail))
            text.append("▏", self.get_component_rich_style("keybar--separator"))
            draw(right, key_pad="")
        self._spans = spans
        return text

    def _at(self, x: int) -> tuple[int, _Key] | None:
        return next(((start, k) for start, end, k in self._spans if start <= x < end), None)

    def on_mouse_down(self, event: events.MouseDown) -> None:
        found = self._at(event.x)
        if found is None:
            return
        k = found[1]
        if k.enabled:
            self.app.simulate_key(k.key)
        else:
            self.app.bell()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        found = self._at(event.x)
        start = found[0] if found is not None else None
        if start != self._hover:
            self._hover = start
            self.tooltip = found[1].tooltip or None if found is not None else None
            self.refresh()

    def on_leave(self, event: events.Leave) -> None:
        if self._hover is not None:
            self._hover = None
            self.tooltip = None
            self.refresh()
