"""The Unlock panel: each LUKS2 token sealed to PCRs and whether it would unseal with the PCRs
as they are now (tpmtop unlock, in the dashboard)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.content import Content
from textual.widgets import Static

from tpmtop.textsafe import safe
from tpmtop.tui.widgets.panel import Panel, QuietStatic
from tpmtop.unlock.judge import Verdict
from tpmtop.viewmodel.rows.unlock import UnlockPart

# The verdict's theme colour (as the Health panel's levels): a theme may change what carries meaning.
_STYLE = {Verdict.WOULD_UNSEAL: "$success", Verdict.WOULD_NOT: "bold $error", Verdict.CANNOT_JUDGE: "bold $warning",
          Verdict.NOT_TPM: "", Verdict.UNREADABLE: "$warning"}


class UnlockPanel(Panel[UnlockPart]):
    title = "Unlock"
    DEFAULT_CSS = """
    UnlockPanel #unlock-text { height: auto; }
    """

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._quiet = QuietStatic()

    def compose(self) -> ComposeResult:
        yield Static(id="unlock-text")

    def show_part(self, part: UnlockPart) -> None:
        lines: list[Content] = [Content(safe(part.note))]
        device = None
        for row in part.rows:
            if row.device != device:
                device = row.device
                lines.append(Content.assemble((safe(device), "bold")))
            if row.token:
                lines.append(Content(f"  {safe(row.token)}"))
            lines.append(Content.assemble(("    ", ""), (safe(row.text), _STYLE[row.verdict])))
        self._quiet.set(self.query_one("#unlock-text", Static), Content("\n").join(lines))
