"""The main screen's thread workers: every TPM (and sysfs) access happens here, never on the
UI thread. Workers touch no widget; they post past-tense messages (``tpmtop.tui.messages``)
and the screen's handlers change state. Each group is exclusive, and the poller is re-armed
by a one-shot timer only after a poll finished, so polls can never overlap (Dolphie's loop)
even when the TPM answers slower than the poll interval.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work
from textual.worker import get_current_worker

from tpmtop.errors import TpmConnectionError
from tpmtop.tui import messages as m

if TYPE_CHECKING:
    from pathlib import Path

    from textual.screen import Screen

    from tpmtop.sources.protocol import Source
    from tpmtop.viewmodel.dashboard import Dashboard

    _Base = Screen[Any]
else:
    _Base = object


class TpmWorkers(_Base):
    """Mixed into :class:`~tpmtop.tui.screens.main.MainScreen`, which provides ``source``
    (the view-model's) and ``export_dir``."""

    export_dir: str | None  # None: tpmtop's data directory (tpmtop.sources.export_file)
    dash: Dashboard

    if TYPE_CHECKING:
        @property
        def source(self) -> Source: ...

    @work(thread=True, exclusive=True, exit_on_error=False, group="poll", description="poll the TPM")
    def poll_tpm(self) -> None:
        src = self.source
        try:
            if not src.connected:
                src.reconnect()
                self.post_message(m.Reconnected())
            self.post_message(m.PollDone(src.poll()))
        except TpmConnectionError as e:
            self.post_message(m.Disconnected(str(e)))
        except Exception as e:  # noqa: BLE001 - one failed poll must not end the dashboard
            self.post_message(m.PollFailed(f"{type(e).__name__}: {e}"))

    @work(thread=True, exit_on_error=False, group="stats", description="compute the tables' percentiles")
    def compute_stats(self, modes_width: int) -> None:
        """The view-model's once-a-second tables; only the screen's tick starts it, one at a time."""
        generation = self.dash.generation
        view = self.dash.stats(modes_width)
        if view is not None:
            self.post_message(m.StatsReady(view, generation))

    @work(thread=True, exclusive=True, exit_on_error=False, group="workload", description="run the workload")
    def run_workload(self) -> None:
        worker = get_current_worker()
        try:
            self.source.workload_loop(lambda: worker.is_cancelled)
        except TpmConnectionError as e:
            self.post_message(m.Disconnected(str(e)))

    @work(thread=True, exclusive=True, exit_on_error=False, group="sysfs", description="read sysfs")
    def read_sysfs(self, with_pcrs: bool) -> None:
        try:
            sysfs = self.source.sysfs
            if sysfs is not None:
                self.post_message(m.SysfsRead(sysfs.read(with_pcrs=with_pcrs)))
        except Exception as e:  # noqa: BLE001
            self.post_message(m.PollFailed(f"sysfs: {e}"))

    @work(thread=True, exclusive=True, exit_on_error=False, group="user", description="flush handles")
    def flush_handles(self, handles: list[int] | None) -> None:
        """``None``: every handle tpmtop created."""
        src = self.source
        try:
            if handles is None:
                done = src.flush_ours()
            else:
                for h in handles:
                    src.flush(h)
                done = handles
        except TpmConnectionError as e:
            self.post_message(m.Disconnected(str(e)))
        except Exception as e:  # noqa: BLE001
            self.post_message(m.ActionFailed("flush", str(e)))
        else:
            self.post_message(m.HandlesFlushed(done, only_ours=handles is None))

    @work(thread=True, exclusive=True, exit_on_error=False, group="inspect", description="inspect a handle")
    def inspect_handle(self, handle: int, kind: str, ours: bool, created_by: str | None = None) -> None:
        try:
            title, rows = self.source.inspect(handle, kind, ours, created_by)
        except TpmConnectionError as e:
            self.post_message(m.Disconnected(str(e)))
        except Exception as e:  # noqa: BLE001
            self.post_message(m.ActionFailed("inspect", str(e)))
        else:
            self.post_message(m.HandleInspected(title, rows))

    @work(thread=True, exclusive=True, exit_on_error=False, group="export", description="export a capture")
    def export_capture(self, target: Path) -> None:
        """``target``: the file named to the user when the key was pressed."""
        from tpmtop.sources.export_file import export_capture, release_target

        try:
            path = export_capture(self.source.capture(), target)
        except Exception as e:  # noqa: BLE001
            release_target(target)
            self.post_message(m.ActionFailed("export", str(e)))
        else:
            self.post_message(m.CaptureExported(path))
