"""Two lines: who the TPM is and over what; what runs, how fast, and the state."""

from __future__ import annotations

from functools import lru_cache

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


@lru_cache(maxsize=512)
def _cells(markup: str) -> int:
    return Content.from_markup(markup).cell_length


def fit(parts: list[tuple[str, int]], width: int, sep: str = "  ") -> str:
    """Join the parts (markup, rank) that fit ``width`` cells, in their order, dropping the
    highest ranks first: a narrow terminal loses the least telling words whole instead of
    cutting the line's end to "p…" (issue 24: "TPM period 2" pushed the poll interval off)."""
    kept = [(m, r) for m, r in parts if m]
    if width <= 0:
        return sep.join(m for m, _ in kept)
    while len(kept) > 1:
        total = sum(_cells(m) for m, _ in kept) + len(sep) * (len(kept) - 1)
        if total <= width:
            break
        worst = max(range(len(kept)), key=lambda i: (kept[i][1], i))
        if kept[worst][1] == 0:
            break  # rank 0 is never dropped: the line is cut (ellipsis) instead
        del kept[worst]
    return sep.join(m for m, _ in kept)


class StatusHeader(Static):
    DEFAULT_CSS = """
    StatusHeader { height: 2; padding: 0 1; background: $panel; color: $foreground; }
    """

    def show(self, *, state: str, identity: str, tcti: str, simulated: bool, engine: str, mode: str,
             op: str, ops_per_s: float | None, rate: str = "", extra: str = "", profile: str | None = None,
             marker: str = "", cpu: str = "") -> None:
        width = self.content_size.width
        # Rank: 0 always shown, then the lower the more telling (a narrow terminal drops the rest).
        line1 = fit([("[b]tpmtop[/]", 0), (STATES.get(state, e(state)), 0),
                     (f"[b]{e(identity)}[/]", 1), (f"[dim]via[/] {e(tcti)}", 3),
                     ("[b $accent]simulated[/]" if simulated else "", 2),
                     # Latencies on screen are the chip's (held by the transport), not the simulator's.
                     (f"[b $warning]profile {e(profile)}[/]" if profile else "", 1)], width)
        ops = f"[b]{ops_per_s:,.1f} ops/s[/]" if ops_per_s is not None else ""
        bits = [(f"[b $warning]{e(marker)}[/]" if marker else "", 0),
                (f"engine [b]{e(engine)}[/]", 1), (f"mode [b]{e(mode)}[/]", 0), (f"op [b]{e(op)}[/]", 1),
                (ops, 2), (e(cpu) if cpu else "", 5)]
        bits += [(e(r), 3 if i == 0 else 6) for i, r in enumerate(rate.split(", ")) if r]
        # extra: "poll 1 s  refresh 0.2 s", or why a lost TPM is retried (worth more)
        bits += [(e(x), 2 if x.startswith("retrying") else 7 + i) for i, x in enumerate(extra.split("  ")) if x]
        text = line1 + "\n" + fit(bits, width)
        if text != self._last:
            self._last = text
            # Two lines, always (height: 2): a new text never needs a screen relayout.
            self.update(Content.from_markup(text), layout=False)

    _last = ""

    def on_resize(self) -> None:
        self._last = ""  # refit at the next frame
