"""Two lines: who the TPM is and over what; what runs, how fast, and the state."""

from __future__ import annotations

from textual.content import Content
from textual.markup import escape as e
from textual.widgets import Static

STATES = {
    "running": "[$success]● running[/]",
    "paused": "[$warning]❚❚ paused[/]",
    "disconnected": "[$error]✕ disconnected[/]",
    "replay": "[$accent]↺ replay[/]",
    "passive": "[$secondary]◌ passive[/]",
    "read-only": "[$warning]❚❚ read-only[/]",
}


class StatusHeader(Static):
    DEFAULT_CSS = """
    StatusHeader { height: 2; padding: 0 1; background: $panel; color: $foreground; }
    """

    def show(self, *, state: str, identity: str, tcti: str, simulated: bool, engine: str, mode: str,
             op: str, ops_per_s: float | None, rate: str = "", extra: str = "", profile: str | None = None,
             marker: str = "", cpu: str = "") -> None:
        sim = "  [b $accent]simulated[/]" if simulated else ""
        if profile:
            # Latencies on screen are the chip's (held by the transport), not the simulator's.
            sim += f" [b $warning]profile {e(profile)}[/]"
        line1 = f"[b]tpmtop[/]  {STATES.get(state, e(state))}  [b]{e(identity)}[/]  [dim]via[/] {e(tcti)}{sim}"
        ops = f"{ops_per_s:,.1f} ops/s" if ops_per_s is not None else ""
        # Most telling first: a narrow terminal cuts the end of the line.
        line2 = (f"engine [b]{e(engine)}[/]  mode [b]{e(mode)}[/]  op [b]{e(op)}[/]  [b]{ops}[/]"
                 f"{('  ' + e(cpu)) if cpu else ''}{('  ' + e(rate)) if rate else ''}"
                 f"{('  ' + e(extra)) if extra else ''}")
        if marker:
            line2 = f"[b $warning]{e(marker)}[/]  " + line2
        text = line1 + "\n" + line2
        if text != self._last:
            self._last = text
            # Two lines, always (height: 2): a new text never needs a screen relayout.
            self.update(Content.from_markup(text), layout=False)

    _last = ""

