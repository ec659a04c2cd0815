"""What sysfs and securityfs say (no TPM traffic): the panel --passive lives on."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content
from textual.markup import escape
from textual.widgets import Static

from tpmtop.tui.widgets.panel import Panel
from tpmtop.viewmodel.commands import SysfsSnapshot


def system_markup(s: SysfsSnapshot, ima_rate: float | None) -> str:
    yn = {True: "[$success]yes[/]", False: "no", None: "?"}
    lines = [f"kernel {escape(s.kernel)}   TPM {escape(s.tpm_version or '-')}   "
             f"HMAC sessions compiled in {yn[s.hmac_compiled]}   "
             f"disable_pcr_integrity {escape(s.disable_pcr_integrity or '-')}"]
    if s.ima_count is not None:
        rate = f"{ima_rate:,.1f}/s" if ima_rate is not None else "…"
        lines.append(f"IMA measurements [b]{s.ima_count:,}[/]  ({rate})  violations {s.ima_violations or 0}")
    for i, v in sorted(s.pcrs.items()):
        lines.append(f"PCR {i:>2} sha256 [dim]{escape(v[:32])}…[/]")
    lines += [f"[dim]{escape(n)}[/]" for n in s.notes]
    return "\n".join(lines)


class SystemPanel(Panel[tuple[SysfsSnapshot, float | None]]):
    title = "System · sysfs, no TPM traffic"
    can_focus = True  # nothing inside takes the focus: its key and Tab land on the panel itself

    def compose(self) -> ComposeResult:
        yield Static("reading sysfs…", id="sysfs")

    def show_part(self, part: tuple[SysfsSnapshot, float | None]) -> None:
        """A sysfs reading and the IMA rate (its own worker's clock: a frame of its own)."""
        self.show(*part)

    def show(self, snapshot: SysfsSnapshot, ima_rate: float | None) -> None:
        self.query_one("#sysfs", Static).update(Content.from_markup(system_markup(snapshot, ima_rate)))
