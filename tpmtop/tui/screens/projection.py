"""``p``: what N kernel PCR extends would cost in each session mode, priced with this sitting's
per-command p50s (or a capture's) — the projection `tpmtop boot` makes, with its arithmetic.

N is this machine's IMA measurement count when securityfs tells it, else 1,000; the input sets
another. Nothing here talks to the TPM.
"""

from __future__ import annotations

from decimal import Decimal
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Input, Static

MISSING_LIVE = "not measured yet (run that mode)"
INDENT = 13  # the arithmetic's column, under the formula
NUM_W = 9  # a µs figure's width: "150,000.0" (a chip profile's 150 ms) still lines up


def projection_markup(components_us: dict[str, float], n: int, n_source: str, where: str,
                      missing: str = MISSING_LIVE, width: int | None = None,
                      per_mode_us: dict[str, float] | None = None, per_mode_what: str = "op p50") -> str:
    """``missing``: what a component nobody measured says (a kernel trace cannot be asked to
    run a mode). ``width``: the text's width; a long line of arithmetic wraps under its own
    column instead of under the mode's name. ``per_mode_us``: each mode's own op p50 where it
    ran (the Modes panel's numbers), priced as N × that p50 as the Modes line is."""
    import textwrap

    from tpmtop.boot.projection import COMPONENTS, KEPT_BASIS, Cost, fmt_estimate, project

    comps = {k: Cost(Decimal(repr(v)), where) for k, v in components_us.items()}
    per_mode = {m: Cost(Decimal(repr(v)), per_mode_what) for m, v in (per_mode_us or {}).items()}
    proj = project(n, n_source, comps, per_mode, per_mode_what)
    lines = [f"[b]{n:,} PCR extends[/] ({escape(n_source)}), priced with {escape(where)}", ""]
    for letter, what in COMPONENTS.items():
        v = components_us.get(letter)
        h = components_us.get("h" + letter)  # its host work, measured apart (live only)
        # Numbers right-aligned in a fixed width: a p50 of 411.1 µs beside one of 22.0 µs pushed
        # the host column a place right.
        lines.append(f"  {letter:<2} {what:<28} " + (f"{v:>{NUM_W},.1f} µs" if v is not None else
                                                      f"[dim]{escape(missing)}[/]")
                     + (f"  [dim]host h{letter:<2}[/] {h:>{NUM_W},.1f} µs" if h is not None else ""))
    for letter, what in KEPT_BASIS.items():  # a kept session's basis while it has not run (live only)
        v, h = components_us.get(letter), components_us.get("h" + letter)
        if letter == "hM":
            v, h = None, v  # host work only: blank where the others have their wire figure
        if v is None and h is None:
            continue
        lines.append(f"  {letter:<4} {what:<26} " + (f"{v:>{NUM_W},.1f} µs" if v is not None else " " * (NUM_W + 3))
                     + (f"  [dim]host {letter if letter == 'hM' else 'h' + letter:<3}[/] {h:>{NUM_W},.1f} µs"
                        if h is not None else ""))
    lines.append("")

    def under(text: str, style: str = "") -> None:
        parts = textwrap.wrap(text, max(30, width - INDENT)) if width else [text]
        for part in parts or [""]:  # no-break spaces: the indent survives the widget's wrapping
            body = f"[{style}]{escape(part)}[/]" if style else escape(part)
            lines.append("\u00a0" * INDENT + body)

    for mode, mc in proj.modes.items():
        est = fmt_estimate(mc.estimate_s) if mc.estimate_s is not None else "–"
        lines.append(f"[b]{mode:<12}[/] {est:>10}   [dim]{escape(mc.formula)}[/]")
        if mc.arithmetic:
            under(mc.arithmetic)
        elif mc.reason:
            under(mc.reason, "dim")
        if mc.note:
            under(mc.note, "dim")
    if per_mode and len(per_mode) < len(proj.modes):
        own = any(k.startswith("h") for k in components_us)
        how = ("the commands it would send, each at its wire p50 plus its own host work (hL, hS …, measured "
               "apart in this sitting; a kept session's extend from the baseline's bursts: a plain extend back "
               "to back, Eb + hEb, + T, the TPM's HMAC work, Eh10 − Ew10 where the two are told apart, + hM, the "
               "session's HMACs)" if own
               else "the commands above plus H, per-command's host time per operation")
        lines += ["", f"[dim]A mode that ran here is N × its {escape(per_mode_what)} (host work included, as in "
                      f"the Modes panel); one that did not is priced from {how}, so that it is operation time too "
                      "(without host time its row says it is TPM time only); saved needs C, ContextSave, measured "
                      "when saved runs.[/]"]
    lines += ["", "[dim]The same model as `tpmtop boot` (docs/boot.md says how each mode is priced). "
                  "Type another N, or a chip (slb9670, npct750 …: tpmtop profile list), and Enter; Esc closes.[/]"]
    return "\n".join(lines)


class ProjectionScreen(ModalScreen[int | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,p", "close", "Close", id="projection-close", tooltip="Back to the dashboard"),
        # The input keeps the focus (N can be typed at once), so the text scrolls from here: the
        # box at 120×40 and 80×24 is shorter than the text, and End/PgDn went to the input only.
        Binding("pagedown", "scroll('page_down')", show=False, id="projection-page-down",
                tooltip="Scroll the projection down a page"),
        Binding("pageup", "scroll('page_up')", show=False, id="projection-page-up",
                tooltip="Scroll the projection up a page"),
        Binding("down", "scroll('down')", show=False, id="projection-down", tooltip="Scroll the projection down"),
        Binding("up", "scroll('up')", show=False, id="projection-up", tooltip="Scroll the projection up"),
        Binding("end", "scroll('end')", show=False, priority=True, id="projection-end",
                tooltip="The end of the projection (and of the input's text)"),
        Binding("home", "scroll('home')", show=False, priority=True, id="projection-home",
                tooltip="The top of the projection (and the input's start)")]

    def __init__(self, components_us: dict[str, float], n: int, n_source: str, where: str,
                 missing: str = MISSING_LIVE, per_mode_us: dict[str, float] | None = None,
                 per_mode_what: str = "op p50") -> None:
        super().__init__()
        self.components_us, self.n, self.n_source, self.where = components_us, n, n_source, where
        self.missing = missing
        self.per_mode_us, self.per_mode_what = per_mode_us or {}, per_mode_what

    def compose(self) -> ComposeResult:
        with Vertical(id="projection-dialog"):
            with VerticalScroll(id="projection-box"):
                yield Static(self._markup(), id="projection-text")
            # N, or a chip profile's name (tpmtop profile list) to price with its figures: below the
            # scrolled text, so it is seen wherever the text is scrolled to
            yield Input(str(self.n), placeholder="number of extends, or a chip: slb9672 …", id="projection-n")

    def on_mount(self) -> None:
        # type another N straight away, but open at the top: focusing the input (below the
        # arithmetic) scrolled the box to its bottom, past N and the costs it is priced with
        self.query_one("#projection-n", Input).focus(scroll_visible=False)
        self.query_one("#projection-box", VerticalScroll).scroll_home(animate=False)

    def action_scroll(self, where: str) -> None:
        box = self.query_one("#projection-box", VerticalScroll)
        getattr(box, f"scroll_{where}")(animate=False)
        if where in ("end", "home"):  # the input's own End and Home still move its cursor
            field = self.query_one("#projection-n", Input)
            if where == "end":
                field.action_end()
            else:
                field.action_home()

    def _markup(self) -> Content:
        # The box is 110 wide (95 % of a narrower screen), less its border, padding and scrollbar.
        width = min(110, int(self.app.size.width * 0.95)) - 6
        return Content.from_markup(projection_markup(self.components_us, self.n, self.n_source, self.where,
                                                     self.missing, width, self.per_mode_us, self.per_mode_what))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        from tpmtop.profiles.loader import BUILTIN

        chip = event.value.strip()
        if chip in BUILTIN:  # the chip's figures: TPM time, so no op p50s beside them (one basis)
            from tpmtop.profiles.loader import load_builtin
            from tpmtop.profiles.whatif import letters_us

            self.components_us, self.per_mode_us = letters_us(load_builtin(chip)), {}
            self.where = f"chip profile {chip} (TPM time; tpmtop profile show {chip})"
            self.missing = "not in the profile"
            self.query_one("#projection-text", Static).update(self._markup())
            return
        try:
            n = int(event.value)
        except ValueError:
            return
        if 0 < n <= 10_000_000:
            self.n, self.n_source = n, "set here"
            self.query_one("#projection-text", Static).update(self._markup())

    def action_close(self) -> None:
        self.dismiss(self.n if self.n_source == "set here" else None)
