"""Textual's own floor for benchmarks/ui_load.py's keys: a minimal Textual app with the same
widget tree as the dashboard at the moment it is built, each key doing the same visible thing
with plain Textual and nothing of tpmtop's.

The tree is copied from the running dashboard's screen: every container becomes a Vertical or
Horizontal (as its layout), every table a DataTable with the same columns and cells as text,
every other leaf a Static holding what that widget renders now; ids and classes are kept and the
dashboard's stylesheet is used, so the layout and the styles are the same. The keys:

- state keys (space m e o + - r >): the header's text changes (one Static.update);
- s: the stream panel's border title changes;
- t: the next theme (Textual's restyle);
- x, T: a notification (Textual's toast);
- tab: the focus moves on;
- /: an Input is mounted at the top of the stream panel and takes the focus;
- ? p b i: a modal screen with a text (the help's);
- 1-7: the panel's table (or the panel) takes the focus.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import DataTable, Input, Sparkline, Static, Tab, Tabs

PANEL_KEYS = {"1": "handles", "2": "resources", "3": "latency", "4": "modes", "5": "stream", "6": "system",
              "7": "clients"}
STATE_KEYS = ("space", "m", "e", "o", "plus", "minus", "r", "greater_than_sign")


def copy_tree(w: Widget) -> Widget:
    """A plain-Textual copy of ``w`` and what it shows now."""
    kw: dict[str, Any] = {"id": w.id, "classes": " ".join(w.classes)}
    if isinstance(w, DataTable):
        t: DataTable[Any] = DataTable(cursor_type="row", **kw)
        t.add_columns(*[str(c.label) for c in w.ordered_columns])
        for i in range(w.row_count):
            t.add_row(*[str(c) for c in w.get_row_at(i)])
        return t
    if isinstance(w, Tabs):
        return Tabs(*[Tab(str(tab.label), id=tab.id) for tab in w.query(Tab)], **kw)
    if isinstance(w, Sparkline):
        return Sparkline(list(w.data or []), **kw)
    children = [c for c in w.children if not (c.id or "").startswith("textual-")]
    if children and not isinstance(w, Static):
        horizontal = w.styles.layout is not None and w.styles.layout.name == "horizontal"
        box: Widget = (_FocusableRow if horizontal else _FocusableColumn)(**kw) if w.can_focus else \
            Horizontal(**kw) if horizontal else Vertical(**kw)
        return _Box(box, [copy_tree(c) for c in children])  # type: ignore[return-value]
    return (_FocusableStatic if w.can_focus else Static)(w.render(), **kw)


class _FocusableColumn(Vertical, can_focus=True):
    """A container the dashboard lets take the focus (a panel with nothing focusable inside)."""


class _FocusableRow(Horizontal, can_focus=True):
    pass


class _FocusableStatic(Static, can_focus=True):
    """A leaf the dashboard lets take the focus (the stream's view)."""


class _Box:
    """A container and its copied children, composed together."""

    def __init__(self, box: Widget, children: list[Widget]) -> None:
        self.box, self.children = box, children


def _compose(node: Widget | _Box) -> ComposeResult:
    if isinstance(node, _Box):
        with node.box:
            for c in node.children:
                yield from _compose(c)
    else:
        yield node


class _Modal(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Close")]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.text)


class FloorScreen(Screen[None]):
    def __init__(self, tree: list[Widget | _Box], border_titles: dict[str, str]) -> None:
        super().__init__()
        self.copied = tree
        self.border_titles = border_titles
        self.state = 0

    def compose(self) -> ComposeResult:
        for node in self.copied:
            yield from _compose(node)

    def on_mount(self) -> None:
        for wid, title in self.border_titles.items():
            for w in self.query(f"#{wid}"):
                w.border_title = title


class FloorApp(App[None]):
    """The floor: the same tree, each key the same visible change through Textual alone."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *[Binding(k, f"state('{k}')", k) for k in STATE_KEYS],
        Binding("s", "stream_title", "s"),
        Binding("t", "next_theme", "t"),
        Binding("x", "say('capture written')", "x"),
        Binding("T", "say('tpm2-tools')", "T"),
        Binding("tab", "app.focus_next", "tab", priority=True),
        Binding("slash", "filter", "/"),
        *[Binding(k, "modal", k) for k in ("question_mark", "p", "b", "i")],
        *[Binding(k, f"panel('{pid}')", k) for k, pid in PANEL_KEYS.items()],
    ]

    def __init__(self, tree: list[Widget | _Box], css_path: Any, border_titles: dict[str, str], help_text: str,
                 themes: list[Any], variables: dict[str, str]) -> None:
        self.CSS_PATH = css_path
        self.variables = variables  # tpmtop's theme variables, which its stylesheet names
        super().__init__()
        self.copied, self.border_titles, self.help_text = tree, border_titles, help_text
        for theme in themes:
            self.register_theme(theme)
        self.themes = [t.name for t in themes]
        if self.themes:
            self.theme = self.themes[0]
        self.said = 0

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(self.variables)

    def get_default_screen(self) -> Screen[None]:
        return FloorScreen(self.copied, self.border_titles)

    @property
    def main(self) -> FloorScreen:
        return next(s for s in self.screen_stack if isinstance(s, FloorScreen))

    def action_state(self, key: str) -> None:
        main = self.main
        main.state += 1
        header = main.query_one("#header", Static)
        header.update(f"{key} {main.state}")

    def action_stream_title(self) -> None:
        main = self.main
        main.state += 1
        main.query_one("#stream").border_title = f"Stream {main.state}"

    def action_next_theme(self) -> None:
        i = self.themes.index(self.theme) if self.theme in self.themes else -1
        self.theme = self.themes[(i + 1) % len(self.themes)]

    def action_say(self, text: str) -> None:
        self.said += 1
        self.notify(f"{text} {self.said}")

    def action_filter(self) -> None:
        panel = self.main.query_one("#stream")
        box = Input(placeholder="filter")
        panel.mount(box, before=0)
        box.focus()

    def action_modal(self) -> None:
        self.push_screen(_Modal(self.help_text))

    def action_panel(self, pid: str) -> None:
        panel = self.main.query_one(f"#{pid}")
        target = next((w for w in panel.query("*") if w.can_focus and w.display), panel)
        target.focus()


def floor_app(main: Screen[Any], app: App[Any]) -> FloorApp:
    """The floor for the dashboard ``main`` of ``app``, as it shows now."""
    import tpmtop.tui.app as tui_app
    from tpmtop.tui.screens.help import help_markup
    from tpmtop.tui.themes import VARIABLE_DEFAULTS

    tree = [copy_tree(w) for w in main.children if not (w.id or "").startswith("textual-")]  # not its toast rack
    titles = {w.id: str(w.border_title) for w in main.query("*") if w.id and w.border_title}
    path = Path(tui_app.__file__).parent / str(type(app).CSS_PATH)
    names = list(getattr(app, "tpmtop_themes", []))
    themes = [t for t in (app.get_theme(n) for n in names) if t is not None]
    i = names.index(app.theme) if app.theme in names else 0
    return FloorApp(tree, path, titles, help_markup(), themes[i:] + themes[:i], dict(VARIABLE_DEFAULTS))
