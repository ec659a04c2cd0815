"""Every handle the TPM reports, with what the wire told us about it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from textual.app import ComposeResult
from textual.content import Content

from tpmtop.textsafe import counted, safe
from tpmtop.tui.widgets.panel import Panel
from tpmtop.tui.widgets.table import KeyedTable
from tpmtop.viewmodel.frame import HandlesView
from tpmtop.viewmodel.numbers import fmt_age
from tpmtop.viewmodel.rows.handles import HandleRow, HandleState

# (key, header, width, priority): a narrow panel drops the highest numbers first.
COLUMNS = (("handle", "handle", 10, 0), ("kind", "kind", 7, 1), ("by", "created by", 18, 2), ("age", "age", 6, 3),
           ("last", "used", 6, 5), ("uses", "uses", 5, 4))
KINDS = {"transient": "object", "loaded-session": "session", "saved-session": "saved", "persistent": "persist"}


class HandlesPanel(Panel[HandlesView]):
    title = "Handles"

    def compose(self) -> ComposeResult:
        yield KeyedTable(COLUMNS, id="handles-table")

    @property
    def table(self) -> KeyedTable:
        return self.query_one(KeyedTable)

    @property
    def selected(self) -> int | None:
        key = self.table.selected_key
        return int(key, 16) if key else None

    def selected_row(self) -> HandleRow | None:
        return self._rows.get(self.table.selected_key or "")

    _rows: Mapping[str, HandleRow] = MappingProxyType({})  # replaced whole by each update, never mutated

    def show_part(self, part: HandlesView) -> None:
        self.show(part.rows)

    def show(self, rows: list[HandleRow]) -> None:
        self._rows = {r.key: r for r in rows}
        cells = []
        for r in rows:
            style = {HandleState.NEW: "$handle-new", HandleState.GONE: "$handle-gone strike"}.get(r.state, "")
            # Styled by the owner (an enum); the text is the creator's, made terminal-safe, never markup.
            who = Content.styled(safe(r.who), "$handle-ours" if r.ours else "$handle-foreign")
            h = Content.styled(r.key, style) if style else Content(r.key)
            cells.append((r.key, (h, KINDS.get(r.kind, r.kind), who, "?" if math.isnan(r.age_s) else fmt_age(r.age_s),
                                  "" if r.last_use_s is None else fmt_age(r.last_use_s),
                                  str(r.uses) if r.uses else "")))
        self.table.sync(cells, order=lambda first: first)
        needle = self.table.needle
        self.border_subtitle = (counted(sum(1 for r in rows if r.state is not HandleState.GONE), "handle")
                                + (f" · filter '{needle}'" if needle else ""))
