"""The latest TPM commands, newest at the bottom; can be frozen and filtered.

Not a DataTable: at 5,000 commands/s a table spends its time removing and adding rows
(``remove_row`` ~0.8 ms each in Textual 8). This view keeps the newest rows in a list and
renders only the lines that fit, so a refresh costs the same at 10 or 10,000 commands/s.
Frozen, the arrow keys and the wheel scroll back through what was kept.
"""

from __future__ import annotations

import textwrap
import threading
from typing import Any, ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.content import Content
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollDown, ScrollTo, ScrollUp
from textual.strip import Strip
from textual.visual import Visual

from tpmtop.textsafe import safe
from tpmtop.tui.widgets.panel import Panel
from tpmtop.viewmodel.frame import StreamPart
from tpmtop.viewmodel.rows.stream import LazyStreamRows, StreamRow

_decoder_warming = threading.Event()


def _warm_decoder() -> None:
    from tpmtop.decode.warm import warm

    warm()


# (header, width); the last column takes the rest of the line: the handles a command names
# (a FlushContext's target, a PCR) and then its sessions (handle:attributes, what shows an
# HMAC session on the wire), so neither is dropped whole on a narrow panel.
COLUMNS = (("t s", 8), ("origin", 8), ("command", 16), ("µs", 7), ("rc", 6))
RC_WIDE = 22  # the rc column's width when the line has room for the response code's name
# Below this text width (the Stream's at 80×24: 76) the µs and rc columns give a place each to
# the last one: the Stream at 120×40 (68) is narrower than at 80×24, and showed less of each
# command ("00000010 02000000" where 80×24 showed "00000010 · 02000000:00"). "12,345" and
# "0x918" still fit; a wider µs figure widens its column, a response code's name is in Enter's view.
TIGHT_BELOW = 76
TIGHT = {"µs": 6, "rc": 5}
LAST = "handles · sessions"
KEEP = 2000  # rows kept while following; frozen, the whole recorder ring is browsable
LINE_CACHE_PAGES = 2  # rendered lines kept: two pages of the view as it is now (at least LINE_CACHE_MIN lines).
LINE_CACHE_MIN = 16  # Each line is a Strip with 7 caches of its own and the Strips derived from it (~15 objects
# the garbage collector walks on every full collection): a fixed 128 lines were ~1,900 objects for a view of 20
# lines, and while following every line shown is new anyway (benchmarks/ui_load.py --gc-only).


# What a narrow rc column shows for a word that is no code: "no response" cut at its space
# read "no", which looks like an answer; "lost" says the command got none (Enter says why).
_RC_SHORT = {"no response": "lost"}


def _rc_text(rc: str, width: int) -> str:
    """The response code whole: its name goes where the column is too narrow for it
    ("0x918 TPM_RC_…" was cut to "0x918…"; the decode view, Enter, names it)."""
    if len(rc) <= width:
        return rc
    return _RC_SHORT.get(rc) or rc.split(" ", 1)[0]


def _handles_text(handles: str, sessions: str, width: int) -> str:
    """The handles a command names, then its sessions: each handle whole. Where the line is too
    narrow for the separator, the two space-separated (a session still tells itself by its
    ":attributes"); narrower still ("00000010 · 02000000:01" was cut to "00000010 · 020000…"),
    the handles alone."""
    for text in (" · ".join(x for x in (handles, sessions) if x), " ".join(x for x in (handles, sessions) if x)):
        if len(text) <= width:
            return text
    return " ".join([*handles.split(), *(s.split(":", 1)[0] for s in sessions.split())])


def _fit(text: str, width: int, right: bool = False) -> str:
    text = text if len(text) <= width else text[: width - 1] + "…"
    return text.rjust(width) if right else text.ljust(width)


EMPTY_TEXT = "no commands yet"

class StreamView(ScrollView, can_focus=True):
    """The rows on Textual's :class:`~textual.scroll_view.ScrollView`: each visible line is
    rendered alone (:meth:`render_line`) and kept in a line cache (Toolong's log view), so a
    refresh costs the lines that changed, whatever the number of rows kept. Line 0 is the
    column header and stays put; below it, ``back`` rows back from the newest (0: following)
    end the page, the scroll offset follows it, and the scrollbar (frozen only) or the wheel
    move both."""

    DEFAULT_CSS = """
    /* Frozen, the 1-wide scrollbar takes the right padding's place: the text is as wide frozen
       as following, so both draw the same columns (a 2-wide one cut the sessions frozen only). */
    StreamView { height: 1fr; padding: 0 1; overflow-x: hidden; overflow-y: hidden; scrollbar-size-vertical: 1; }
    StreamView.-frozen { overflow-y: auto; padding: 0 0 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "scroll_back(1)", "Back", show=False, id="stream-back", tooltip="Older commands (frozen)"),
        Binding("down", "scroll_back(-1)", "Forward", show=False, id="stream-forward", tooltip="Newer commands"),
        Binding("pageup", "page(1)", show=False, id="stream-page-back", tooltip="A page of older commands"),
        Binding("pagedown", "page(-1)", show=False, id="stream-page-forward", tooltip="A page of newer commands"),
        Binding("home", "scroll_back(1_000_000)", show=False, id="stream-oldest", tooltip="The oldest command kept"),
        Binding("end", "scroll_back(-1_000_000)", show=False, id="stream-newest", tooltip="The newest command"),
        Binding("enter", "decode", "Decode", show=False, id="stream-decode",
                tooltip="Decode the selected (bottom, highlighted) command and its response"),
    ]

    class DecodeRequested(Message):
        """Enter on a row: the screen opens the decode view for it."""

        def __init__(self, row: StreamRow) -> None:
            super().__init__()
            self.row = row

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.rows: list[StreamRow] | LazyStreamRows = []
        self._back = 0  # rows scrolled back from the newest
        self.empty_text = EMPTY_TEXT  # the source's word for an empty stream (Source.stream_note)
        # Rendered lines by what they show (the row's text, the column widths, highlighted or not):
        # a refresh that only scrolls or adds rows renders the new lines alone.
        self._lines: LRUCache[tuple[object, ...], Strip] = LRUCache(LINE_CACHE_MIN)

    # -- which rows are shown ------------------------------------------------------------------
    @property
    def back(self) -> int:
        return self._back

    @back.setter
    def back(self, n: int) -> None:
        self._back = max(0, min(len(self.rows) - 1, n))
        self._follow()

    @property
    def _height(self) -> int:
        """The lines below the header line."""
        return max(1, self.scrollable_content_region.height) - 1

    def _start(self) -> int:
        """The first row shown: the page ending at the selected row; scrolled back to the oldest
        (Home), the first page whole with the selected row in it, not one row above blank lines."""
        return max(0, len(self.rows) - self._back - self._height)

    def _follow(self) -> None:
        """Draw the page ``back`` chose; the scroll offset (the scrollbar's thumb) follows it once
        the layout has the view's size. The page is drawn from ``back``, not from the offset,
        which Textual clamps to sizes of the moment (a frame before the first layout)."""
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.rows) + 1)
        self.scroll_to(y=self._start(), animate=False)
        self.refresh()

    def _to_top(self, top: float) -> None:
        """The scrollbar put the page's first row at ``top``: the selected row is its bottom one."""
        end = min(len(self.rows), round(top) + self._height)
        self.back = len(self.rows) - end

    def on_scroll_to(self, message: ScrollTo) -> None:
        message.prevent_default()
        message.stop()
        if message.y is not None:
            self._to_top(message.y)

    def on_scroll_up(self, message: ScrollUp) -> None:
        message.prevent_default()
        message.stop()
        self.action_page(1)

    def on_scroll_down(self, message: ScrollDown) -> None:
        message.prevent_default()
        message.stop()
        self.action_page(-1)

    def on_resize(self) -> None:
        self._follow()

    def selected(self) -> StreamRow | None:
        """The bottom visible row: the newest when following, the scrolled-to one when frozen."""
        end = len(self.rows) - self._back
        last = self.rows[max(end - 1, 0):end]  # slicing: rows may be a lazy sequence
        return last[0] if end > 0 and len(last) else None

    def on_focus(self) -> None:
        """Focus on the stream is the step before Enter: load the decoder's tables now (~1 s of
        imports on this project's VM, once), in a thread, so the first Enter opens at once.
        Even the import of tpmtop.decode.warm runs the package's __init__, which imports those
        tables: on the UI thread it held tab/5 for seconds under load (benchmarks/ui_load.py)."""
        if not _decoder_warming.is_set():
            _decoder_warming.set()
            threading.Thread(target=_warm_decoder, name="tpmtop-decode-import", daemon=True).start()

    def action_decode(self) -> None:
        row = self.selected()
        if row is not None and row.origin != "mark":
            self.post_message(self.DecodeRequested(row))

    def set_rows(self, rows: list[StreamRow] | LazyStreamRows) -> None:
        """``rows``: a list of StreamRow, or anything with len() and slicing (LazyStreamRows)."""
        self.rows = rows
        self._back = max(0, min(self._back, len(rows) - 1))  # a shorter (filtered) list stays in view
        self._follow()

    def action_page(self, direction: int) -> None:
        self.action_scroll_back(direction * max(1, self.size.height - 2))  # the rows shown, less one

    def action_scroll_back(self, n: int) -> None:
        self.back = self._back + n

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.prevent_default()  # scrolled here, following or frozen (the view's own wheel needs a scrollbar)
        self.action_scroll_back(3)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.prevent_default()
        self.action_scroll_back(-3)

    # -- drawing -------------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._lines.clear()  # a theme's colours are in the rendered lines

    def _layout(self, shown: list[StreamRow]) -> tuple[dict[str, int], int]:
        """The columns' widths for the rows shown, and the last column's."""
        widths = dict(COLUMNS)
        if self.scrollable_content_region.width < TIGHT_BELOW:
            widths.update(TIGHT)
        # µs whole ("12345678" for a command over ten seconds), the column no wider than the page needs
        widths["µs"] = max([widths["µs"], *(len(r.us) for r in shown)])
        if self.scrollable_content_region.width >= 110:
            widths["rc"] = RC_WIDE
        rest = max(8, self.scrollable_content_region.width - sum(w + 1 for w in widths.values()))
        return widths, rest

    def _page(self) -> tuple[list[Content], int]:
        """The visible lines as Content (the header first), and where the page starts."""
        # Every piece of text is a markup *variable* ($t, $origin …): substituted as plain text,
        # never parsed. A row's text can be anyone's (a task named "x[" under the kernel probes,
        # a replayed capture), and a cut "[" once paired with the next line's tag: MarkupError.
        start = self._start()
        shown = self.rows[start:start + self._height]
        selected = len(self.rows) - self._back - 1 - start  # its place among the shown rows
        widths, rest = self._layout(shown)
        last_header = LAST if rest >= len(LAST) else "handles sessions"
        header = " ".join(_fit(h, w, right=h == "µs") for h, w in widths.items()) + " " + _fit(last_header, rest)
        lines = [Content.from_markup("[b $foreground-muted]$h[/]", h=header)]
        lines += [self._row_content(r, widths, rest, self.has_focus and i == selected) for i, r in enumerate(shown)]
        if not shown:
            needle = getattr(self.parent, "needle", "")
            note = (Content.from_markup("[dim]no command matches '$n'[/]", n=safe(needle)) if needle
                    else Content.from_markup("[dim]$e[/]", e="\n".join(
                        textwrap.wrap(safe(self.empty_text), max(20, self.size.width - 1)))))
            lines += note.split("\n")
        return lines, start

    @staticmethod
    def _row_content(r: StreamRow, widths: dict[str, int], rest: int, highlight: bool) -> Content:
        t = _fit(safe(r.t), widths["t s"], right=True)
        if r.origin == "mark":  # a boundary: one line across every column
            return Content.from_markup("$t [b $warning]── $m ──[/]", t=t, m=safe(r.command))
        last = _handles_text(r.handles, r.sessions, rest)
        fields = {"t": t, "origin": _fit(safe(r.origin), 8), "cmd": _fit(safe(r.command), widths["command"]),
                  "us": _fit(safe(r.us), widths["µs"], right=True), "rc": _fit(safe(_rc_text(r.rc, widths["rc"])),
                                                                               widths["rc"]),
                  "last": _fit(safe(last), rest)}
        origin = "$origin" if r.origin == "workload" else "[dim]$origin[/]"
        rc = "$rc" if r.ok else "[$error]$rc[/]"
        line = f"$t {origin} $cmd $us {rc} $last"
        if highlight:  # what Enter decodes
            line = f"[reverse]{line}[/]"
        return Content.from_markup(line, **fields)

    def render(self) -> Content:
        """The visible page as text, header first: what :meth:`render_line` draws line by line."""
        return Content("\n").join(self._page()[0])

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        start = self._start()
        i = start + y - 1
        row = self.rows[i] if 0 <= i < len(self.rows) and y > 0 else None
        shown = self.rows[start:start + self._height]
        widths, rest = self._layout(shown)
        if row is not None:
            highlight = self.has_focus and i == len(self.rows) - self._back - 1
            key: tuple[object, ...] = (row.key, row.t, row.origin, row.command, row.handles, row.sessions, row.rc,
                                       row.us, row.ok, highlight, width, rest, *widths.values())
            cache = self._line_cache()
            strip = cache.get(key)
            if strip is None:
                strip = self._strip(self._row_content(row, widths, rest, highlight), width)
                cache[key] = strip
            return strip
        lines = self._page()[0]  # the header, or the note of an empty page: few, not cached
        return self._strip(lines[y], width) if y < len(lines) else Strip.blank(width, self.rich_style)

    def _line_cache(self) -> LRUCache[tuple[object, ...], Strip]:
        """The rendered lines, sized to LINE_CACHE_PAGES pages of the view now: a new, empty
        cache when the view's height changed (a full LRUCache keeps its size)."""
        want = max(LINE_CACHE_MIN, LINE_CACHE_PAGES * self.size.height)
        if self._lines.maxsize != want:
            self._lines = LRUCache(want)
        return self._lines

    def _strip(self, content: Content, width: int) -> Strip:
        """One line, ``width`` cells wide. Extended then cropped (what ``crop_extend`` does)
        without ``crop_extend``'s cache: a line already ``width`` wide (every padded one)
        came back as the same Strip, cached in itself, a cycle that only a full garbage
        collection frees. Kept past a refresh, each such line (a Strip, its 7 caches, its
        segments) waited for the next full collection and lengthened it."""
        strips = Visual.to_strips(self, content, width, 1, self.visual_style, pad=True)
        if not strips:
            return Strip.blank(width, self.rich_style)
        return strips[0].extend_cell_length(width, self.rich_style).crop(0, width)


class StreamPanel(Panel[StreamPart]):
    title = "Command stream"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.frozen = False
        self.needle = ""
        self.buffer: list[StreamRow] = []  # the latest rows, unfiltered
        self.snapshot: tuple[list[Any], int] | None = None  # frozen: (events and marks, t0_ns)

    def compose(self) -> ComposeResult:
        yield StreamView(id="stream-view")

    @property
    def view(self) -> StreamView:
        return self.query_one(StreamView)

    def show_part(self, part: StreamPart) -> None:
        if part.replace and not self.frozen:
            self.buffer = []
            if not part.rows:
                self._render_rows()
        self.add(part.rows, keep=None if part.keep_all else KEEP)
        if part.empty_note:
            self.border_subtitle = part.empty_note
        if not part.rows:  # said in the body too, where "no commands yet" would stand
            self.view.empty_text = part.empty_note or EMPTY_TEXT
            self.view.refresh()

    def add(self, rows: list[StreamRow], keep: int | None = KEEP) -> None:
        if self.frozen or not rows:
            return
        self.buffer.extend(rows)
        if keep is not None:
            del self.buffer[:-keep]
        self._render_rows()

    def clear(self) -> None:
        self.buffer.clear()
        self._render_rows()
        self.view.back = 0

    def _render_rows(self) -> None:
        if self.frozen and self.snapshot is not None:
            items, t0 = self.snapshot
            self.view.set_rows(LazyStreamRows(items, t0, self.needle))
            self._subtitle()
            return
        n = self.needle.lower()
        # Marks stay through any filter: a boundary matters whatever the command.
        self.view.set_rows([r for r in self.buffer if r.origin == "mark" or r.matches(n)] if n else list(self.buffer))
        self._subtitle()

    def _subtitle(self) -> None:
        bits = []
        if self.frozen:
            n = len(self.view.rows)
            bits.append(f"frozen (s) · {n:,} kept · ↑↓ PgUp Home scroll")
        if self.needle:
            bits.append(f"filter '{self.needle}'")
        self.border_subtitle = " · ".join(bits)

    def toggle(self, snapshot: tuple[list[Any], int] | None = None) -> bool:
        """Frozen: nothing is ingested and ↑/↓ scroll back — through ``snapshot`` (every
        event the recorder kept, and the marks) when given; unfrozen: follow the newest."""
        self.frozen = not self.frozen
        self.snapshot = snapshot if self.frozen else None
        self.view.set_class(self.frozen, "-frozen")  # its scrollbar shows
        if not self.frozen:
            self.view.back = 0
        self._render_rows()
        return self.frozen

    def set_filter(self, needle: str) -> None:
        """``/``'s text (tpmtop.tui.screens.filter.PanelFilter): rows now, every kept command
        searched at the next refresh (the view-model's backfill)."""
        self.needle = needle.strip()
        self._render_rows()
        self.view.focus()
