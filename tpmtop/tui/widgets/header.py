"""Two lines: who the TPM is and over what; what runs, how fast, and the state."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

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


def fit(parts: list[tuple[str, float] | tuple[str, float, str]], width: int, sep: str = "  ") -> str:
    """Join the parts (markup, rank[, separator before it]) that fit ``width`` cells, in their
    order, dropping the highest ranks first: a narrow terminal loses the least telling words
    whole instead of cutting the line's end to "p…" (issue 24: "TPM period 2" pushed the poll
    interval off). Rank 0 is never dropped (the line is then cut with an ellipsis)."""
    kept = [(p[0], p[1], p[2] if len(p) > 2 else sep) for p in parts if p[0]]

    def joined(items: list[tuple[str, float, str]]) -> str:
        return "".join((s if i else "") + m for i, (m, _, s) in enumerate(items))

    if width <= 0:
        return joined(kept)
    while len(kept) > 1:
        total = sum(_cells(m) + (len(s) if i else 0) for i, (m, _, s) in enumerate(kept))
        if total <= width:
            break
        worst = max(range(len(kept)), key=lambda i: (kept[i][1], i))
        if kept[worst][1] == 0:
            break
        del kept[worst]
    return joined(kept)


class StatusHeader(Static):
    DEFAULT_CSS = """
    StatusHeader { height: 2; padding: 0 1; background: $panel; color: $foreground; }
    """

    def show(self, *, state: str, identity: str, tcti: str, simulated: bool, engine: str, mode: str,
             op: str, ops_per_s: float | None, rate: str = "", extra: str = "", profile: str | None = None,
             marker: str = "", cpu: str = "", simulated_reason: str | None = None,
             vs_none: str = "") -> None:
        self._args = dict(state=state, identity=identity, tcti=tcti, simulated=simulated, engine=engine, mode=mode,
                          op=op, ops_per_s=ops_per_s, rate=rate, extra=extra, profile=profile, marker=marker, cpu=cpu,
                          simulated_reason=simulated_reason, vs_none=vs_none)
        # a fallback's reason beside the word (not "--sim was given": the user asked for it)
        # (its first clause: "no /dev/tpmrm0"; the first frame's message has the whole line)
        why = (f" ({e(simulated_reason.split(':')[0].split(', ')[0].split('; ')[0])})"
               if simulated_reason and simulated_reason != "--sim was given" else "")
        width = self.content_size.width
        # Rank: 0 always shown, then the lower the more telling (a narrow terminal drops the rest).
        line1 = fit([("[b]tpmtop[/]", 0), (STATES.get(state, e(state)), 0),
                     (f"[b]{e(identity)}[/]", 0), (f"[dim]via[/] {e(tcti)}", 3),
                     # Latencies on screen are the chip's (held by the transport), not the simulator's.
                     (" ".join(x for x in (f"[b $accent]simulated[/]{why}" if simulated else "",
                                           f"[b $warning]profile {e(profile)}[/]" if profile else "") if x),
                      0 if why else 1)],
                    width)
        ops = f"[b]{ops_per_s:,.1f} ops/s[/]" if ops_per_s is not None else ""
        bits: list[tuple[str, float] | tuple[str, float, str]] = [
                (f"[b $warning]{e(marker)}[/]" if marker else "", 0),
                (f"engine [b]{e(engine)}[/]", 1), (f"mode [b]{e(mode)}[/]", 0),
                # the running mode's ratio to `none` (the Modes panel's first line): on the first screen
                (f"[b $accent]{e(vs_none)}[/]" if vs_none else "", 0.5, " "), (f"op [b]{e(op)}[/]", 1),
                (ops, 2.5), (e(cpu) if cpu else "", 5)]
        bits += [(e(r), 3, "  ") if i == 0 else (e(r), 6, ", ") for i, r in enumerate(rate.split(", ")) if r]
        # extra: the source's own words, most telling first ("retrying: why", a kernel's counts joined
        # with " · "); the poll and refresh intervals last of all.
        words = [(w, "  " if j == 0 else " · ") for chunk in extra.split("  ")
                 for j, w in enumerate(chunk.split(" · ")) if w]
        bits += [(e(w), 7 if w.startswith(("poll ", "refresh ")) else 2 + i / 10, how)
                 for i, (w, how) in enumerate(words)]
        text = line1 + "\n" + fit(bits, width)
        if text != self._last:
            self._last = text
            # Two lines, always (height: 2): a new text never needs a screen relayout.
            self.update(Content.from_markup(text), layout=False)

    _last = ""

    _args: dict[str, Any] | None = None

    def on_resize(self) -> None:
        if self._args is not None:  # refit now: a replay sends no further frame
            self.show(**self._args)
