"""The main screen's thread workers: every TPM (and sysfs) access happens here, never on the
UI thread. Workers touch no widget; they post past-tense messages (``tpmtop.tui.messages``)
and the screen's handlers change state. Each group is exclusive; when polls start is the
poll chain's decision (``tpmtop.tui.screens.poller``): one at a time, each armed by the
outcome of the last (Dolphie's loop), even when the TPM answers slower than the interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual.message import Message
from textual.screen import Screen
from textual.worker import get_current_worker

from tpmtop.errors import TpmConnectionError
from tpmtop.tui import messages as m

if TYPE_CHECKING:
    from pathlib import Path

    from tpmtop.viewmodel.commands import Commands
    from tpmtop.viewmodel.dashboard import Dashboard


class TpmWorkers:
    """The main screen's workers (a collaborator, not a mixin): each starts a thread worker
    on ``screen`` and posts its messages to it."""

    def __init__(self, screen: Screen[Any], dash: Dashboard, export_dir: str | None) -> None:
        self.screen = screen
        self.dash = dash
        self.export_dir = export_dir  # None: tpmtop's data directory (tpmtop.sources.export_file)
        self._sysfs_reads = 0

    @property
    def commands(self) -> Commands:
        return self.dash.commands

    def post_message(self, message: Message) -> None:
        self.screen.post_message(message)

    def _start(self, work: Callable[[], None], group: str, description: str, exclusive: bool = True) -> None:
        self.screen.run_worker(work, thread=True, exclusive=exclusive, exit_on_error=False, group=group,
                               description=description)

    def running(self, group: str) -> bool:
        return any(w.group == group and not w.is_finished for w in self.screen.app.workers)

    def poll_tpm(self) -> None:
        self._start(self._poll_tpm, "poll", "poll the TPM")

    def compute_stats(self, modes_width: int) -> None:
        self._start(lambda: self._compute_stats(modes_width), "stats", "compute the tables' percentiles",
                    exclusive=False)

    def run_workload(self) -> None:
        self._start(self._run_workload, "workload", "run the workload")

    def read_sysfs(self, with_pcrs: bool) -> None:
        self._start(lambda: self._read_sysfs(with_pcrs), "sysfs", "read sysfs")

    def read_sysfs_later(self, beside_tpm: bool) -> None:
        """The next sysfs reading: every 5 s beside a live TPM (secondary there), else every
        second; PCR files make the kernel send PCR_Read, so every 5th reading only reads them."""
        self._sysfs_reads += 1
        with_pcrs = self._sysfs_reads % 5 == 0
        self.screen.set_timer(5.0 if beside_tpm else 1.0, lambda: self.read_sysfs(with_pcrs))

    def flush_handles(self, handles: list[int] | None) -> None:
        self._start(lambda: self._flush_handles(handles), "user", "flush handles")

    def inspect_handle(self, handle: int, kind: str, ours: bool, created_by: str | None = None) -> None:
        self._start(lambda: self._inspect_handle(handle, kind, ours, created_by), "inspect", "inspect a handle")

    def export_capture(self, target: Path) -> None:
        self._start(lambda: self._export_capture(target), "export", "export a capture")

    def _poll_tpm(self) -> None:
        cmds = self.commands
        try:
            if cmds.reconnect_if_lost():
                self.post_message(m.Reconnected())
            self.post_message(m.PollDone(cmds.poll()))
        except TpmConnectionError as e:
            self.post_message(m.Disconnected(str(e), from_poll=True))
        except Exception as e:
            self.post_message(m.PollFailed(f"{type(e).__name__}: {e}"))

    def _compute_stats(self, modes_width: int) -> None:
        """The view-model's once-a-second tables; only the screen's tick starts it, one at a time."""
        generation = self.dash.generation
        view = self.dash.stats(modes_width)
        if view is not None:
            self.post_message(m.StatsReady(view, generation))

    def _run_workload(self) -> None:
        worker = get_current_worker()
        try:
            self.commands.run_workload(lambda: worker.is_cancelled)
        except TpmConnectionError as e:
            self.post_message(m.Disconnected(str(e)))

    def _read_sysfs(self, with_pcrs: bool) -> None:
        try:
            snapshot = self.commands.read_sysfs(with_pcrs)
            if snapshot is not None:
                self.post_message(m.SysfsRead(snapshot))
        except Exception as e:
            self.post_message(m.PollFailed(f"sysfs: {e}"))

    def _flush_handles(self, handles: list[int] | None) -> None:
        """``None``: every handle tpmtop created."""
        try:
            done = self.commands.flush(handles)
        except TpmConnectionError as e:
            self.post_message(m.Disconnected(str(e)))
        except Exception as e:
            self.post_message(m.ActionFailed("flush", str(e)))
        else:
            self.post_message(m.HandlesFlushed(done, only_ours=handles is None))

    def _inspect_handle(self, handle: int, kind: str, ours: bool, created_by: str | None = None) -> None:
        try:
            title, rows = self.commands.inspect(handle, kind, ours, created_by)
        except TpmConnectionError as e:
            self.post_message(m.Disconnected(str(e)))
        except Exception as e:
            self.post_message(m.ActionFailed("inspect", str(e)))
        else:
            self.post_message(m.HandleInspected(title, rows))

    def _export_capture(self, target: Path) -> None:
        """``target``: the file named to the user when the key was pressed."""
        try:
            path = self.commands.export(target)
        except Exception as e:
            self.post_message(m.ActionFailed("export", str(e)))
        else:
            self.post_message(m.CaptureExported(path))
