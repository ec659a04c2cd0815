"""The PCRs panel: per bank whether the boot's event log replays to the TPM's PCRs, the PCRs
that do not match with why, and the bank-health verdicts (tpmtop pcrs, in the dashboard)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.content import Content
from textual.widgets import Static

from tpmtop.textsafe import safe
from tpmtop.tui.widgets.panel import Panel, QuietStatic
from tpmtop.viewmodel.rows.pcrs import PcrsPart


class PcrsPanel(Panel[PcrsPart]):
    title = "PCRs"
    DEFAULT_CSS = """
    PcrsPanel #pcrs-text { height: auto; }
    """

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._quiet = QuietStatic()

    def compose(self) -> ComposeResult:
        yield Static(id="pcrs-text")

    def show_part(self, part: PcrsPart) -> None:
        lines: list[Content] = [Content(safe(part.note))]
        if part.banks:
            lines.append(Content.assemble(*[
                piece for bank, ok in part.banks
                for piece in ((f"{bank} ", ""), ("matches" if ok else "DOES NOT MATCH", "green" if ok else "bold red"),
                              ("  ", ""))]))
        if part.counter is not None:
            lines.append(Content(f"pcrUpdateCounter {part.counter}"))
        for pcr, bank, status, events, reason in part.rows:
            if status == "match":
                continue
            lines.append(Content.assemble((f"PCR {pcr:>2} {bank:<7} ", ""), (status, "bold"),
                                          (f" ({events} events) {safe(reason)}", "")))
        for bank, verdict, detail in part.health:
            lines.append(Content.assemble((f"{bank} ", ""), (verdict, "bold yellow"), (f": {safe(detail)}", "")))
        self._quiet.set(self.query_one("#pcrs-text", Static), Content("\n").join(lines))
