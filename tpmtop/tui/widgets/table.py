"""A DataTable updated in place by row key (Dolphie's pattern): vanished rows removed,
changed cells updated with ``update_cell(update_width=False)``, new rows added, sorted only
when the set of rows changed. Never ``clear()`` per tick: that resets cursor and scroll.

Columns fit the width: each column has a priority, and the table shows the most important
ones that fit (no horizontal scrollbar hiding `last µs` or `uses` behind it). The set is
recomputed on resize only; then, and only then, the rows are rebuilt.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from textual import events
from textual.widgets import DataTable

CELL_PAD = 2  # DataTable's cell_padding (1) on each side
_UNITS = {"ms": 1e3, "s": 1e6, "µs": 1.0, "": 1.0}
_AGE = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def sort_value(cell: object) -> tuple[int, float, str]:
    """A cell as shown ("1,410", "150 ms", "1m02s", "tpmtop", "") as a sortable value:
    numbers (with their unit) before text, blanks last."""
    text = str(cell).strip()
    if not text or text == "?":
        return (2, 0.0, "")
    m = re.fullmatch(r"([\d,]+(?:\.\d+)?)\s*(ms|s|µs)?", text)
    if m:
        return (0, float(m.group(1).replace(",", "")) * _UNITS[m.group(2) or ""], "")
    a = _AGE.fullmatch(text)
    if a and any(a.groups()):
        h, mi, se = (int(x or 0) for x in a.groups())
        return (0, float(h * 3600 + mi * 60 + se), "")
    return (1, math.inf, text.lower())


Cells = tuple[Any, ...]  # a row's cells: text, Rich Text or Content


class KeyedTable(DataTable[Any]):
    DEFAULT_CSS = """
    KeyedTable { height: 1fr; overflow-x: hidden; }
    """

    def __init__(self, columns: Iterable[tuple[Any, ...]], grow_to: int = 0, grow_priority: float = 0.0,
                 **kw: Any) -> None:
        """``columns``: (key, label, width[, priority]); lower priority numbers stay longest,
        the first column always stays. Cells passed to :meth:`sync` cover every column.
        ``grow_to``: the first column (the names) widens up to that, as far as its longest
        name needs, ranked among the columns at ``grow_priority``: a name is then cut only
        where the panel lacks room even after the less wanted columns are gone."""
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self._all = [(c[0], c[1], c[2], c[3] if len(c) > 3 else i) for i, c in enumerate(columns)]
        self._shown: list[int] = list(range(len(self._all)))
        self._grow_to, self._grow_priority = grow_to, grow_priority
        self._first_w = self._want_w = self._all[0][2] if self._all else 0
        self._shadow: dict[str, Cells] = {}
        self._rows: list[tuple[str, Cells]] = []
        self._order: Callable[[str], object] | None = None
        self.sort_column: str | None = None  # None: the panel's own order
        self.needle = ""  # only rows with a cell containing it (case-insensitive); pinned rows stay
        self.pinned = ""  # row keys starting with this stay on top whatever the sort

    def cycle_sort(self, step: int = 1) -> str:
        """Sort by the next (``step`` 1, ``>``) or previous (-1, ``<``) shown column, biggest
        first; the panel's own order sits between the last column and the first. The header
        marks the column sorted by (▼); returns its name."""
        choices: list[str | None] = [None, *self.shown_columns[1:]]
        i = choices.index(self.sort_column) if self.sort_column in choices else 0
        self.sort_column = choices[(i + step) % len(choices)]
        self._resort()
        self._mark_sorted()
        return str(dict((k, label) for k, label, *_ in self._all).get(self.sort_column or "", "its own order"))

    SORTED_MARK = "▼"

    def _label(self, key: str, label: str) -> str:
        return f"{label}{self.SORTED_MARK}" if key == self.sort_column else label

    def _mark_sorted(self) -> None:
        """The sorted column's header ends with ▼ (a toast used to be the only place saying it).
        A header's label changes only through new columns: the table is built again."""
        from textual.widgets.data_table import ColumnKey

        if any(str(col.label) != self._label(key, label) for key, label, *_ in self._all
               if (col := self.columns.get(ColumnKey(key))) is not None):
            self._rebuild()

    def _resort(self) -> None:
        if self.row_count < 2:
            return
        selected = self.selected_key
        col = self.sort_column if self.sort_column in self.shown_columns else None  # dropped on a resize
        if col is None:
            if self._order is not None:
                order = self._order
                self.sort(key=lambda values: order(str(values[0])))
        else:
            ci = self.shown_columns.index(col)
            arrival = {k: i for i, k in enumerate(self._shadow)}

            def rank(key: str) -> tuple[bool, int, float, str]:
                if self.pinned and key.startswith(self.pinned):
                    # on top, in the panel's own order (an operation's total, wire, host): sorted by
                    # value they swapped whenever a GC pause put host's p99 above wire's
                    return (False, 0, float(arrival[key]), "")
                kind, number, text = sort_value(self._shadow[key][ci])
                return (True, kind, -number if kind == 0 else 0, text)

            self._sort_by_keys(sorted(self._shadow, key=rank))
        if selected in self._shadow:
            self.move_cursor(row=self.get_row_index(selected), animate=False)

    def _sort_by_keys(self, keys: list[str]) -> None:
        """Put the rows in the order of ``keys`` (pinned rows need their key, and DataTable.sort
        sees only cell values): a row is found by the text of its first cell (a handle, a
        command, a client: rows with the same first cell keep their order among themselves)."""
        place: dict[str, int] = {}
        for i, k in enumerate(keys):
            if k in self._shadow:
                place.setdefault(str(self._shadow[k][0]), i)
        self.sort(key=lambda values: place.get(str(values[0]), len(place)))

    @property
    def _columns(self) -> list[tuple[Any, ...]]:
        return [self._all[i][:2] + (self._first_w,) if i == 0 else self._all[i][:3] for i in self._shown]

    @property
    def shown_columns(self) -> list[str]:
        return [self._all[i][0] for i in self._shown]

    def on_mount(self) -> None:
        self._fit(self.size.width)

    def on_resize(self, event: events.Resize) -> None:
        if self._fit(event.size.width):
            self._rebuild()

    def _fit(self, width: int) -> bool:
        """Choose the columns that fit ``width``; True if the choice changed."""
        budget = width if width else 10_000
        GROW = -1  # the first column's extra width, ranked like a column
        items = list(range(len(self._all))) + ([GROW] if self._want_w > self._all[0][2] else [])
        rank = lambda i: (i != 0, self._grow_priority if i == GROW else self._all[i][3])  # noqa: E731
        shown: list[int] = []
        used, first_w = 0, self._all[0][2]
        for i in sorted(items, key=rank):
            if i == GROW:
                extra = min(self._want_w - first_w, budget - used)
                if extra > 0:
                    first_w += extra
                    used += extra
                continue
            w = (self._all[i][2] or 10) + CELL_PAD
            if used + w <= budget or not shown:
                shown.append(i)
                used += w
        shown.sort()
        if shown == self._shown and first_w == self._first_w and self.columns:
            return False
        self._shown, self._first_w = shown, first_w
        if not self.columns:
            for key, label, width in self._columns:
                self.add_column(self._label(key, label), key=key, width=width)
        return True

    def _rebuild(self) -> None:
        selected = self.selected_key
        self.clear(columns=True)
        self._shadow.clear()
        for key, label, width in self._columns:
            self.add_column(self._label(key, label), key=key, width=width)
        self.sync(self._rows, self._order)
        if selected in self._shadow:
            self.move_cursor(row=self.get_row_index(selected), animate=False)

    @property
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def sync(self, rows: list[tuple[str, Cells]], order: Callable[[str], Any] | None = None) -> bool:
        """Make the table show ``rows`` [(key, cells)]; returns True if rows came or went.
        ``order`` ranks a row by the plain text of its first cell."""
        self._rows, self._order = rows, order
        if self._grow_to:
            longest = max((len(str(cells[0])) for _, cells in rows), default=0)
            want = max(self._all[0][2], min(self._grow_to, longest))
            if want != self._want_w:
                self._want_w = want
                if self.columns and self._fit(self.size.width):
                    self._rebuild()  # which syncs these rows into the new columns
                    return True
        if not self.columns:
            return False  # not mounted yet: on_mount adds the columns, the next sync the rows
        shown = self._shown
        n = self.needle.lower()
        if n:
            rows = [(k, c) for k, c in rows if (self.pinned and k.startswith(self.pinned))
                    or any(n in str(x).lower() for x in c)]
        wanted = {k: tuple(cells[i] for i in shown) for k, cells in rows}
        # Taken before any row goes: removing a row above the cursor slides the next row under it
        # (the cursor keeps its index), and `f` then flushed that row's handle, not the one chosen.
        selected = self.selected_key
        structural = changed = False
        col_keys = [self._all[i][0] for i in shown]
        for key in [k for k in self._shadow if k not in wanted]:
            self.remove_row(key)
            del self._shadow[key]
            structural = True
        for key, cells in wanted.items():
            old = self._shadow.get(key)
            if old is None:
                self.add_row(*cells, key=key)
                structural = True
            elif old != cells:
                for col, a, b in zip(col_keys, old, cells, strict=False):
                    if a != b:
                        self.update_cell(key, col, b, update_width=False)
                        changed = True
            self._shadow[key] = cells
        if self.sort_column is not None:
            self._resort()  # values change every second: keep the chosen order
        elif structural and order is not None and self.row_count > 1:
            self.sort(key=lambda values: order(str(values[0])))
        if structural and selected in self._shadow and self.selected_key != selected:
            self.move_cursor(row=self.get_row_index(selected), animate=False)
        if changed or structural:
            self._drop_stale_renders()
        return structural

    def _drop_stale_renders(self) -> None:
        """DataTable keys each rendered row, cell and line by a count that every change bumps,
        so after a change its caches hold only lines no frame will draw again; they are LRUs of
        1,000 rows, 10,000 cells and 1,000 lines, filled a screenful a second by a table that
        changes every second. Those were thousands of small objects (Strips, Segments, their
        caches) for every full GC to walk, growing for minutes. Dropped here through
        DataTable's public hook for "cached renders are stale" (it also refreshes the table,
        as update_cell already did)."""
        self.notify_style_update()

    def set_filter(self, needle: str) -> None:
        self.needle = needle.strip()
        self.sync(self._rows, self._order)
