"""The Clients panel: programs using the TPM through `tpmtop --listen P` (and tpmtop's own
workload, one client among them); without the proxy, the processes holding /dev/tpm0 or
/dev/tpmrm0 open. Highlighting a client shows its per-command latencies below the table."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.markup import escape
from textual.widgets import DataTable, Static

from tpmtop.tui.widgets.panel import Panel
from tpmtop.viewmodel.frame import Frame

COLUMNS = (("pid", 7), ("name", 22), ("cmds", 7), ("err", 4), ("p50 µs", 9), ("p99 µs", 9), ("held", 5), ("leaked", 6))
HOLDER_COLUMNS = (("pid", 7), ("name", 22), ("user", 10), ("device", 12), ("since", 20))


class ClientsPanel(Panel):
    title = "Clients"
    DEFAULT_CSS = """
    ClientsPanel { height: auto; max-height: 16; padding: 0 1; display: none; }
    ClientsPanel DataTable { height: auto; max-height: 9; }
    ClientsPanel #clients-detail { height: auto; max-height: 6; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._mode: str | None = None
        self._cells: dict[str, list[str]] = {}
        self.detail_for = None  # key -> text, set by show()

    def compose(self) -> ComposeResult:
        yield DataTable(id="clients-table", cursor_type="row", zebra_stripes=False)
        yield Static("", id="clients-detail")

    def _columns(self, mode: str) -> None:
        if self._mode == mode:
            return
        t = self.query_one(DataTable)
        t.clear(columns=True)
        self._cells.clear()
        for name, width in (COLUMNS if mode == "proxy" else HOLDER_COLUMNS):
            t.add_column(name, width=width, key=name)
        self._mode = mode

    def _rows(self, rows: list[tuple[str, list[str]]]) -> None:
        t = self.query_one(DataTable)
        cols = [c for c, _ in (COLUMNS if self._mode == "proxy" else HOLDER_COLUMNS)]
        keep = {k for k, _ in rows}
        for k in list(self._cells):
            if k not in keep:
                t.remove_row(k)
                del self._cells[k]
        for k, cells in rows:
            old = self._cells.get(k)
            if old is None:
                t.add_row(*cells, key=k)
            else:
                for col, a, b in zip(cols, old, cells, strict=False):
                    if a != b:
                        t.update_cell(k, col, b, update_width=False)
            self._cells[k] = cells

    has_content = False  # until a proxy's clients, or a device's holders, are there to show

    def show_frame(self, frame: Frame) -> None:
        c = frame.clients
        if c is None:
            return
        if c.proxy_rows is not None:
            self.show_clients(c.proxy_rows, c.detail)
        elif c.holders is not None:
            self.show_holders(c.holders)
        self.has_content = c.shown

    def show_clients(self, rows: list[tuple[str, list[str]]], detail) -> None:
        self._columns("proxy")
        self.detail_for = detail
        self._rows(rows)
        self.border_subtitle = f"{sum(1 for k, c in rows if not c[1].endswith('(left)'))} connected"
        self._show_detail()

    def show_holders(self, info: dict) -> None:
        self._columns("holders")
        rows = [(f"h{h['pid']}-{h['fd']}", [str(h["pid"]), h["name"], h["user"] or "?", h["device"], h["since"]])
                for h in info["holders"]]
        self._rows(rows)
        ab = info["abrmd"]
        self.border_subtitle = f"holding {'/'.join(info['devices']) or 'no device'} · tpm2-abrmd " + \
            ("running" if ab["running"] else "not running")

    def _show_detail(self) -> None:
        t = self.query_one(DataTable)
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
