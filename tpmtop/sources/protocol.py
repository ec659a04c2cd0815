"""What every dashboard source offers, and what it can do: the dashboard reads
:class:`Capabilities` instead of asking which kind of source it has.

:class:`Source` is the whole contract: every member the view-model
(:mod:`tpmtop.viewmodel.dashboard`), the screens' workers and the CLI use. The four sources —
live (a TPM), replay (a capture), passive (sysfs only) and kernel (kprobes) — derive from
:class:`SourceBase`, which gives the defaults of a source that cannot do a thing (no TPM to
poll, no workload to pause), so a new capability is one field here with its default and an
override where a source has it. ``tests/unit/test_source_contract.py`` walks all four. No Textual here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tpmtop.sources.gate import UiGate
from tpmtop.sources.runs import RunView
from tpmtop.sources.timeline import OpsTimeline
from tpmtop.sources.timings import TimingsView

if TYPE_CHECKING:
    from tpmtop.recorder import Recorder
    from tpmtop.sources.sysfs import Sysfs
    from tpmtop.tpm.handles import HandleEntry


UNSET = "-"  # no engine, mode or op: a source without runs (passive, an empty capture); shown as is


class SourceKind(StrEnum):
    """Which kind of source this is (its word in the header when it has no running/paused state)."""

    LIVE = "live"
    REPLAY = "replay"
    PASSIVE = "passive"
    KERNEL = "kernel"
    NONE = "-"


@dataclass(frozen=True)
class Capabilities:
    kind: SourceKind
    live: bool = False  # the data changes: the screen re-reads it (recorder, accounts) several times a second
    handles: bool = False  # the TPM's handles and slots can be polled (Handles, Resources)
    timings: bool = False  # there are command timings (Latency, Modes, Stream)
    workload: bool = False  # a workload runs here: pause, rate, and m/e/o change what it runs
    changes_tpm: bool = False  # actions that change the TPM are allowed (not --read-only, not a capture)
    selects_runs: bool = False  # m/e/o choose what is shown
    export: bool = False  # x writes a capture
    sysfs: bool = False  # a kernel worth reading (System panel): --passive, or a TPM device node
    clients: bool = False  # who else uses the TPM: a proxy's clients, or a device's holders (Clients)
    pcrs: bool = False  # the TPM's PCRs can be read (PCR_Read) beside the boot's event log (PCRs)
    health: bool = False  # a TPM whose lockout state the polls read, or a kernel worth judging (Health)
    why_not: str = ""  # said when a key is refused: "replay shows a capture: nothing to change"


@dataclass
class PollResult:
    entries: list[HandleEntry]
    var: dict[str, int]
    t: float  # monotonic time of the poll
    seq: int = 0  # the recorder's last command when the poll ran (the TPM's list is as of it)


@dataclass
class HeaderInfo:
    state: str
    identity: str
    tcti: str
    simulated: bool
    engine: str
    mode: str
    op: str
    rate: str = ""
    simulated_reason: str | None = None  # why a simulator answers: on the first screen
    extra: str = ""
    profile: str | None = None
    marker: str = ""
    tooltip: str | None = None


@dataclass(frozen=True)
class CapturedStream:
    """A saved capture's newest events as the capture holds them (dicts of tpmtop.capture/1):
    the view-model makes the stream's rows of them."""

    events: list[Any]  # the capture's last MAX_STREAM_ROWS entries; a row's key is its index here
    decoded: bool = False  # --decode: the handles column shows the decoded handles and parameters


@runtime_checkable
class Source(Protocol):
    """Everything a consumer of a source uses; :class:`SourceBase` has the defaults."""

    @property
    def caps(self) -> Capabilities: ...
    @property
    def mode(self) -> str: ...
    @property
    def tcti(self) -> str: ...

    engine: str
    op: str
    failures: Counter[tuple[int | None, int | None]]  # (cc, rc) -> count known from the source itself (a capture's)
    connected: bool
    running: bool
    read_only: bool
    simulated: bool
    simulated_reason: str | None  # why a simulator answers (the dashboard's fallback says it first)
    kernel_device: bool  # polls a kernel's TPM: the observer-effect banner
    poll_interval: float
    identity: Any  # what the TPM said it is (None until it answered): export waits for it
    boundaries: list[tuple[float, str]]  # (time.time(), why) of each new TPM life
    periods: list[dict[Any, Any]]  # accounts of earlier TPM lives
    timeline: OpsTimeline  # operation p50 per second: the Modes time series
    baseline_ops: dict[tuple[str, str], int]  # (engine, op) -> `none` ops run as the interleaved baseline
    workload_error: str | None
    pause_reason: str | None
    proxy: Any  # tpmtop.proxy.server.ProxyServer with --listen
    proxy_log: list[str]

    @property
    def sysfs(self) -> Sysfs | None: ...  # read-only here: passive and kernel always have one

    @property
    def recorder(self) -> Recorder | None: ...  # live and kernel: the commands as they happen
    @property
    def gate(self) -> UiGate | None: ...  # a workload's: the dashboard holds it while it draws (None: none)

    def ready(self) -> bool: ...
    def header(self) -> HeaderInfo: ...
    def runs(self) -> list[RunView]: ...
    def timings(self, runs: list[RunView] | None = None) -> TimingsView: ...
    def choose(self, engine: str | None = None, mode: str | None = None, op: str | None = None) -> bool: ...
    def values(self, what: str) -> list[str]: ...
    def events(self) -> list[dict[str, Any]]: ...
    def captured_stream(self) -> CapturedStream: ...
    def stream_note(self) -> str: ...
    def capture(self) -> dict[str, Any]: ...
    def poll(self) -> PollResult: ...
    def reconnect(self) -> None: ...
    def lost(self, error: str) -> None: ...
    def slot_freed(self) -> None: ...
    def workload_loop(self, cancelled: Callable[[], bool]) -> None: ...
    def da_properties(self) -> dict[str, int] | None: ...
    def set_running(self, running: bool) -> None: ...
    def set_rate_step(self, direction: int) -> float: ...
    def flush(self, handle: int) -> None: ...
    def flush_ours(self) -> list[int]: ...
    def inspect(self, handle: int, kind: str, ours: bool,
                created_by: str | None = None) -> tuple[str, list[tuple[str, str]]]: ...
    def reset_stats(self) -> None: ...
    def pcr_report(self) -> Any: ...
    def close(self) -> None: ...


class SourceBase:
    """The defaults: a source that shows something and can change nothing."""

    engine = op = UNSET
    recorder: Recorder | None = None
    connected = True
    running = False
    read_only = True
    simulated = False
    simulated_reason: str | None = None  # "--sim was given", or why no TPM was usable (dashboard fallback)
    kernel_device = False
    poll_interval = 1.0
    identity: Any = None
    workload_error: str | None = None
    pause_reason: str | None = None
    sysfs: Sysfs | None = None
    proxy: Any = None

    def __init__(self) -> None:
        # failures known from the source itself (a capture's); live ones the view-model counts
        self.failures: Counter[tuple[int | None, int | None]] = Counter()
        self.boundaries: list[tuple[float, str]] = []
        self.periods: list[dict[Any, Any]] = []
        self.timeline = OpsTimeline()
        self.baseline_ops: dict[tuple[str, str], int] = {}
        self.proxy_log: list[str] = []

    @property
    def caps(self) -> Capabilities:
        raise NotImplementedError  # each source says what it can do

    @property
    def gate(self) -> UiGate | None:
        """Where the dashboard holds this source's workload while it draws (tpmtop.sources.gate)."""
        return None

    def ready(self) -> bool:
        """Something to export yet (the TPM answered, the kernel sent a command)."""
        return self.identity is not None

    def _cannot(self, what: str) -> Exception:
        from tpmtop.errors import UsageError

        return UsageError(self.caps.why_not or f"this view cannot {what}")

    def header(self) -> HeaderInfo:
        raise NotImplementedError

    def runs(self) -> list[RunView]:
        return []

    def timings(self, runs: list[RunView] | None = None) -> TimingsView:
        return TimingsView()

    def choose(self, engine: str | None = None, mode: str | None = None, op: str | None = None) -> bool:
        return False

    def values(self, what: str) -> list[str]:
        return []

    def events(self) -> list[dict[str, Any]]:
        """A saved capture's events (replay): what the failure patterns read once."""
        return []

    def pcr_report(self) -> Any:
        """The latest :class:`tpmtop.pcrs.live.PcrSnapshot` (PCRs beside the event log's
        replay), or None: a source with ``caps.pcrs`` reads it in the background."""
        return None

    def captured_stream(self) -> CapturedStream:
        """A saved capture's whole stream (replay); live sources stream from the recorder."""
        return CapturedStream([])

    def stream_note(self) -> str:
        """What the stream says while it has no command to show, when "no commands yet" would
        mislead (a capture recorded without events, a trace file of another kind); "" else."""
        return ""

    def capture(self) -> dict[str, Any]:
        raise self._cannot("export a capture")

    def poll(self) -> PollResult:
        raise self._cannot("poll a TPM")

    def reconnect(self) -> None:
        pass

    def lost(self, error: str) -> None:
        """A worker found the TPM gone (the poller re-arms and reconnects)."""
        self.connected = False

    def slot_freed(self) -> None:
        """A handle was flushed: a workload paused on a full TPM may go on."""

    def workload_loop(self, cancelled: Callable[[], bool]) -> None:
        pass

    def da_properties(self) -> dict[str, int] | None:
        """The TPM's variable properties as its latest poll read them (the dictionary-attack
        state among them: the Health panel), or None: no TPM polled. No command of its own."""
        return None

    def set_running(self, running: bool) -> None:
        pass

    def set_rate_step(self, direction: int) -> float:
        return 0.0

    def flush(self, handle: int) -> None:
        raise self._cannot("flush")

    def flush_ours(self) -> list[int]:
        raise self._cannot("flush")

    def inspect(self, handle: int, kind: str, ours: bool,
                created_by: str | None = None) -> tuple[str, list[tuple[str, str]]]:
        raise self._cannot("inspect a handle")

    def reset_stats(self) -> None:
        pass

    def close(self) -> None:
        pass
