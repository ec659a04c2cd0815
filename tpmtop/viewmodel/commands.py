"""What the screen may ask of its source, as the view-model's commands: the TUI calls these,
never a source (the import contract "the dashboard sees the view-model, not the sources").
Each is plain blocking code; those that touch the TPM or a file run in the screen's thread
workers (tpmtop.tui.screens.workers), and raise what the source's role says it raises
(tpmtop.sources.protocol). No Textual here.

The types a screen names (a poll's result, a sysfs reading, the gate's holds, the source's
capabilities, a frame's frozen histogram) are re-exported here, so the TUI needs no import from tpmtop.sources.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tpmtop.sources.gate import UiHold as UiHold
from tpmtop.sources.histreads import FrozenBuckets as FrozenBuckets
from tpmtop.sources.protocol import Capabilities as Capabilities
from tpmtop.sources.protocol import PollResult as PollResult
from tpmtop.sources.protocol import Source as Source
from tpmtop.sources.protocol import SourceKind as SourceKind
from tpmtop.sources.sysfs import SysfsSnapshot as SysfsSnapshot

if TYPE_CHECKING:
    from tpmtop.decode.plaintext import History
    from tpmtop.viewmodel.rows.stream import StreamRow


class Commands:
    """The screen's handle on the source: its state to allow keys by, its gate, its TPM
    actions, export and the decode screen's bytes."""

    def __init__(self, source: Source) -> None:
        self._source = source

    # -- state the screen allows keys by --------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._source.connected

    @property
    def poll_interval(self) -> float:
        return self._source.poll_interval

    @property
    def kernel_device(self) -> bool:
        """Polls a kernel's TPM: the observer-effect banner."""
        return self._source.kernel_device

    def ready(self) -> bool:
        """Something to export yet."""
        return self._source.ready()

    # -- the workload's gate (tpmtop.sources.gate) ----------------------------------------------
    @property
    def gated(self) -> bool:
        """A workload the screen holds while it draws."""
        return self._source.gate is not None

    @property
    def busy(self) -> bool:
        """An operation is under way."""
        gate = self._source.gate
        return gate is not None and gate.busy

    def hold(self, why: UiHold) -> None:
        gate = self._source.gate
        if gate is not None:
            gate.hold(why)

    def release(self, why: UiHold) -> None:
        gate = self._source.gate
        if gate is not None:
            gate.release(why)

    # -- the TPM (thread workers) --------------------------------------------------------------
    def reconnect_if_lost(self) -> bool:
        """True when the TPM was lost and answers again; raises TpmConnectionError while it does not."""
        if self._source.connected:
            return False
        self._source.reconnect()
        return True

    def poll(self) -> PollResult:
        return self._source.poll()

    def run_workload(self, cancelled: Callable[[], bool]) -> None:
        self._source.workload_loop(cancelled)

    def read_sysfs(self, with_pcrs: bool) -> SysfsSnapshot | None:
        sysfs = self._source.sysfs
        return sysfs.read(with_pcrs=with_pcrs) if sysfs is not None else None

    def flush(self, handles: list[int] | None) -> list[int]:
        """``None``: every handle tpmtop created. The handles flushed."""
        if handles is None:
            return self._source.flush_ours()
        for h in handles:
            self._source.flush(h)
        return handles

    def inspect(self, handle: int, kind: str, ours: bool,
                created_by: str | None = None) -> tuple[str, list[tuple[str, str]]]:
        """The inspector's title and rows: the source's facts, in the view-model's words."""
        from tpmtop.viewmodel.rows.inspect import inspect_rows

        return inspect_rows(self._source.inspect(handle, kind, ours, created_by))

    # -- export ----------------------------------------------------------------------------------
    def export_target(self, directory: str | None) -> Path:
        """The file a capture will go to, named (and reserved) when the key is pressed."""
        from tpmtop.sources.export_file import export_target

        return export_target(directory)

    def export(self, target: Path) -> Path:
        """Write the source's capture to ``target``; on failure the reserved name is let go."""
        from tpmtop.sources.export_file import export_capture, release_target

        try:
            return export_capture(dict(self._source.capture()), target)
        except Exception:
            release_target(target)
            raise

    # -- the decode screen -----------------------------------------------------------------------
    def command_bytes(self, row: StreamRow) -> tuple[bytes | None, bytes | None, str]:
        """(command, response, why not) for a stream row."""
        from tpmtop.viewmodel.rows.stream import command_bytes

        return command_bytes(self._source, row)

    def decode_history(self, row: StreamRow) -> History | None:
        from tpmtop.viewmodel.rows.stream import decode_history

        return decode_history(self._source, row)
