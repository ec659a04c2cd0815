"""The Clients panel: programs using the TPM through `tpmtop --listen P` (and tpmtop's own
workload, one client among them); without the proxy, the processes holding /dev/tpm0 or
/dev/tpmrm0 open. Highlighting a client shows its per-command latencies below the table."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from textual.app import ComposeResult
from textual.markup import escape
from textual.widgets import DataTable, Static

from tpmtop.tui.widgets.panel import Panel
from tpmtop.tui.widgets.table import KeyedTable
from tpmtop.viewmodel.frame import ClientsView

# The view-model's cells, in this order (tpmtop.viewmodel: ClientsView.proxy_rows).
COLUMNS = (("pid", 7), ("name", 22), ("cmds", 7), ("err", 4), ("p50 µs", 9), ("p99 µs", 9), ("held", 5), ("leaked", 6))
HOLDER_COLUMNS = (("pid", 7), ("name", 22), ("user", 10), ("device", 12), ("since", 20))
# Shown: the name first (it widens up to 22 when there is room), then the columns that fit
# whole, by rank (a KeyedTable): in the left column at 120×40 the panel showed pid, name, cmds
# and a clipped "err" of 85 columns' worth.
PROXY_SHOWN = ((1, 0), (2, 1), (3, 1), (7, 2), (6, 3), (0, 4), (4, 5), (5, 6))  # (cell index, rank)
HOLDER_SHOWN = ((1, 0), (0, 1), (2, 2), (3, 3), (4, 4))


def _table_columns(columns: Sequence[tuple[str, int]],
                   shown: Iterable[tuple[int, int]]) -> list[tuple[str, str, int, int]]:
    return [(columns[i][0], columns[i][0], columns[i][1] if i != 1 else 14, rank) for i, rank in shown]


class ClientsPanel(Panel[ClientsView]):
    title = "Clients"
    DEFAULT_CSS = """
    ClientsPanel { height: auto; max-height: 16; padding: 0 1; display: none; }
    ClientsPanel KeyedTable { height: auto; max-height: 9; }
    ClientsPanel #clients-detail { height: auto; max-height: 6; }
    """

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._mode: str | None = None
        self._cells: dict[str, list[str]] = {}  # row key -> the view-model's cells (COLUMNS order)
        self.detail_for: Callable[[str], str] | None = None  # key -> text, set by show()

    def compose(self) -> ComposeResult:
        yield KeyedTable(_table_columns(COLUMNS, PROXY_SHOWN), grow_to=22, id="clients-table")
        yield KeyedTable(_table_columns(HOLDER_COLUMNS, HOLDER_SHOWN), grow_to=22, id="holders-table")
        yield Static("", id="clients-detail")

    @property
    def table(self) -> KeyedTable:
        return self.query_one("#clients-table" if self._mode != "holders" else "#holders-table", KeyedTable)

    def _columns(self, mode: str) -> None:
        if self._mode == mode:
            return
        self._mode = mode
        self._cells.clear()
        self.query_one("#clients-table").display = mode == "proxy"
        self.query_one("#holders-table").display = mode == "holders"

    def _rows(self, rows: list[tuple[str, list[str]]]) -> None:
        shown = PROXY_SHOWN if self._mode == "proxy" else HOLDER_SHOWN
        self._cells = {k: list(c) for k, c in rows}
        self.table.sync([(k, tuple(c[i] for i, _ in shown)) for k, c in rows])

    has_content = False  # until a proxy's clients, or a device's holders, are there to show

    def show_part(self, c: ClientsView) -> None:
        if c.proxy_rows is not None:
            self.show_clients(c.proxy_rows, c.detail)
        elif c.holders is not None:
            self.show_holders(c.holders)
        self.has_content = c.shown

    def show_clients(self, rows: list[tuple[str, list[str]]], detail: Callable[[str], str] | None) -> None:
        self._columns("proxy")
        self.detail_for = detail
        self._rows(rows)
        self.border_subtitle = f"{sum(1 for k, c in rows if not c[1].endswith('(left)'))} connected"
        self._show_detail()

    def show_holders(self, info: dict[str, Any]) -> None:
        self._columns("holders")
        rows = [(f"h{h['pid']}-{h['fd']}", [str(h["pid"]), h["name"], h["user"] or "?", h["device"], h["since"]])
                for h in info["holders"]]
        self._rows(rows)
        ab = info["abrmd"]
        self.border_subtitle = f"holding {'/'.join(info['devices']) or 'no device'} · tpm2-abrmd " + \
            ("running" if ab["running"] else "not running")

    def _show_detail(self) -> None:
        t = self.table
        text = ""
        if self.detail_for is not None and t.row_count:
            try:
                key = t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value
            except Exception:  # no row under the cursor yet
                key = None
            if key:
                text = self.detail_for(key)
        self.query_one("#clients-detail", Static).update(escape(text))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._show_detail()
