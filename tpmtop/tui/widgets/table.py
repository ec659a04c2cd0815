"""A DataTable updated in place by row key (Dolphie's pattern): vanished rows removed,
changed cells updated with ``update_cell(update_width=False)``, new rows added, sorted only
when the set of rows changed. Never ``clear()`` per tick: that resets cursor and scroll."""

from __future__ import annotations

from typing import Callable, Iterable

from textual.widgets import DataTable


class KeyedTable(DataTable):
    DEFAULT_CSS = """
    KeyedTable { height: 1fr; }
    """

    def __init__(self, columns: Iterable[tuple[str, str, int | None]], **kw):
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self._columns = list(columns)  # (key, label, width)
        self._shadow: dict[str, tuple] = {}

    def on_mount(self) -> None:
        for key, label, width in self._columns:
            self.add_column(label, key=key, width=width)

    @property
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def sync(self, rows: list[tuple[str, tuple]], order: Callable[[str], object] | None = None) -> bool:
        """Make the table show ``rows`` [(key, cells)]; returns True if rows came or went.
        ``order`` ranks a row by the plain text of its first cell."""
        wanted = dict(rows)
        structural = False
        col_keys = [c[0] for c in self._columns]
        for key in [k for k in self._shadow if k not in wanted]:
            self.remove_row(key)
            del self._shadow[key]
            structural = True
        for key, cells in rows:
            old = self._shadow.get(key)
            if old is None:
                self.add_row(*cells, key=key)
                structural = True
            elif old != cells:
                for col, a, b in zip(col_keys, old, cells):
                    if a != b:
                        self.update_cell(key, col, b, update_width=False)
            self._shadow[key] = cells
        if structural and order is not None and self.row_count > 1:
            selected = self.selected_key
            self.sort(key=lambda values: order(str(values[0])))
            if selected in self._shadow:
                self.move_cursor(row=self.get_row_index(selected), animate=False)
        return structural

    def clear_rows(self) -> None:
        self.clear()
        self._shadow.clear()
