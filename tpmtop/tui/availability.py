"""What the main screen allows now, from the source's capabilities and its state (through the
view-model's commands, tpmtop.viewmodel.commands): which panels exist, which keys act, and
why a refused key does nothing.

One place for it, so a new panel or action (a decode screen, a Clients panel) adds a line
here instead of another branch in the screen. No widget is touched here.
"""

from __future__ import annotations

from typing import Protocol

from tpmtop.tui.actions import ACTIONS
from tpmtop.viewmodel.commands import Capabilities, Commands, SourceKind

SELECTS_RUN = {"next_mode", "next_engine", "next_op", "set_mode", "set_engine", "set_op"}
KEY_ACTIONS = {k: a.action for a in ACTIONS for k in a.key.split(",")}
KEY_ACTIONS.update({"plus": "rate(1)", "minus": "rate(-1)"})

# Which panels a source can fill: each panel's own `needs` (tpmtop.tui.panels.PANELS).


class HasSelection(Protocol):
    def selected_handle(self) -> int | None: ...


def allowed(action: str, caps: Capabilities, src: Commands, screen: HasSelection) -> bool | None:
    """check_action's answer, from the source's capabilities and state."""
    if action in SELECTS_RUN:
        if caps.selects_runs:
            return True
        return None if caps.workload else False
    if action in ("toggle_workload", "rate"):
        if not caps.workload:
            return False
        return True if caps.changes_tpm and src.connected else None
    if action == "inspect_selected":  # read-only: allowed with --read-only
        if not caps.handles:
            return False
        return True if src.connected and screen.selected_handle() is not None else None
    if action in ("flush_selected", "flush_ours"):
        if not caps.handles:
            return False
        if not caps.changes_tpm or not src.connected:
            return None
        if action == "flush_selected":
            return True if screen.selected_handle() is not None else None
        return True
    if action in ("reset_stats", "refresh_rate"):  # a replay is drawn once: nothing to refresh
        return bool(caps.live)
    if action == "export":
        if not caps.export:
            return False
        return True if src.ready() else None
    if action == "show_tcti":
        return caps.handles
    if action in ("toggle_stream", "filter_stream", "show_projection"):
        return caps.timings
    return True


def refused_why(action: str, caps: Capabilities, src: Commands) -> str:
    if action == "export" and caps.export:  # allowed here, only not yet
        return ("nothing to export yet: no kernel command seen" if caps.kind is SourceKind.KERNEL
                else "nothing to export yet: the TPM has not answered")
    if caps.why_not and (not caps.changes_tpm or action in SELECTS_RUN):
        return caps.why_not
    if not src.connected:
        return "the TPM does not answer: wait for it to come back"
    if action == "flush_selected":
        return "select a handle in the Handles panel first (keys 1, then the arrows)"
    if action == "export":
        return "nothing to export yet: the TPM has not answered"
    return "not available now"
