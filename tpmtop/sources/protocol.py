"""What every dashboard source offers, and what it can do: the dashboard reads
:class:`Capabilities` instead of asking which kind of source it has.

A source is six small roles (:class:`Feed`, :class:`Runs`, :class:`TpmControl`,
:class:`Workload`, :class:`Export`, :class:`Where`), each a few documented members with what
they raise; :class:`Source` is their sum, the view-model's one handle on a source (the TUI
reaches it only through the view-model's commands, tpmtop.viewmodel.commands). The four
sources — live (a TPM), replay (a capture), passive (sysfs only) and kernel (kprobes) — derive
from :class:`SourceBase`, which gives the defaults of a source that cannot do a thing (no TPM
to poll, no workload to pause), so a new capability is one field here with its default and an
override where a source has it. ``tests/unit/test_source_contract.py`` walks all four. No Textual here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tpmtop.sources.gate import UiGate
from tpmtop.sources.runs import RunView
from tpmtop.sources.timeline import OpsTimeline
from tpmtop.sources.timings import TimingsView

if TYPE_CHECKING:
    from tpmtop.pcrs.live import PcrSnapshot
    from tpmtop.proxy.server import ProxyServer
    from tpmtop.recorder import Recorder
    from tpmtop.sessions.accounting import RunAccount
    from tpmtop.sources.inspect import HandleFacts
    from tpmtop.sources.sysfs import Sysfs
    from tpmtop.tpm.handles import HandleEntry
    from tpmtop.tpm.identity import Identity
    from tpmtop.unlock.report import DeviceReport


UNSET = "-"  # no engine, mode or op: a source without runs (passive, an empty capture); shown as is


class SourceKind(StrEnum):
    """Which kind of source this is (its word in the header when it has no running/paused state)."""

    LIVE = "live"
    REPLAY = "replay"
    PASSIVE = "passive"
    KERNEL = "kernel"
    NONE = "-"


class Role(StrEnum):
    """The roles a source can fill (:class:`Capabilities.roles`); the protocols of the same names below."""

    FEED = "feed"
    RUNS = "runs"
    TPM_CONTROL = "tpm-control"
    WORKLOAD = "workload"
    EXPORT = "export"


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
    unlock: bool = False  # PCRs to read and a LUKS2 device whose tokens are judged against them (Unlock)
    why_not: str = ""  # said when a key is refused: "replay shows a capture: nothing to change"

    @property
    def roles(self) -> frozenset[Role]:
        """The roles that do something here (the others answer empty or refuse, UsageError)."""
        has = {Role.FEED: True, Role.RUNS: self.timings, Role.TPM_CONTROL: self.handles,
               Role.WORKLOAD: self.workload, Role.EXPORT: self.export or (self.timings and not self.live)}
        return frozenset(r for r, yes in has.items() if yes)


@dataclass
class PollResult:
    entries: list[HandleEntry]
    var: dict[str, int]
    t: float  # monotonic time of the poll
    seq: int = 0  # the recorder's last command when the poll ran (the TPM's list is as of it)


class SourceState(StrEnum):
    """What the header says the source is doing (its first word)."""

    RUNNING = "running"
    PAUSED = "paused"
    DISCONNECTED = "disconnected"
    READ_ONLY = "read-only"
    REPLAY = "replay"
    PASSIVE = "passive"
    KERNEL = "kernel"


class PauseCause(StrEnum):
    """Why the workload paused itself."""

    SLOTS_FULL = "slots full"
    ERRORS = "errors in a row"
    SLOT_FREED = "slot freed"


@dataclass(frozen=True)
class PauseReason:
    """Why the workload paused itself (the view-model says it in words in the header)."""

    cause: PauseCause
    rc: int | None = None  # SLOTS_FULL: the response code of the slot that is full (0x902, 0x903, 0x905)
    failed: int = 0  # ERRORS: failed operations in a row


@dataclass(frozen=True)
class TpmName:
    """Who the TPM says it is (GetCapability's strings, or a capture's); None: not said."""

    manufacturer: str | None = None
    vendor: str | None = None
    firmware: str | None = None


@dataclass(frozen=True)
class LiveFacts:
    """A live TPM's pacing, polling and life (tpmtop.sources.live)."""

    rate: float  # operations a second asked for; 0: unpaced
    burst: int  # operations back to back at that rate
    poll_s: float
    last_error: str | None  # why it stopped answering (the TPM's or the OS's words), while disconnected
    period: int  # this TPM life's number: 1 until the TPM restarted
    pause: PauseReason | None  # why the workload paused itself, while it is paused
    profile_note: str | None  # what the --profile given says of itself (tpmtop.profiles), if any


@dataclass(frozen=True)
class CaptureFacts:
    """Where a replayed capture came from (tpmtop.sources.replay); None: the capture does not say."""

    file: str
    created: str
    hostname: str | None
    kernel: str | None
    paced: bool  # the capture records its pacing (then ``rate`` and ``burst``)
    rate: float = 0.0  # operations a second; 0: unpaced
    burst: int | float | None = None  # None: not recorded


@dataclass(frozen=True)
class KernelFacts:
    """What a kernel tap saw so far (tpmtop.sources.kernel)."""

    commands: int
    extends: int
    lost: int  # trace events the buffer lost
    error: str | None  # why the tap stopped (the OS's or the trace's words)
    foreign: bool  # a trace file that is not tpmtop's probes' (and no command read from it)
    tpm_here: bool  # this machine has the TPM the kernel talks to (sysfs)


@dataclass(frozen=True)
class PassiveFacts:
    """What --passive has: sysfs's TPM directory, and whether it is there."""

    tpm_dir: str
    tpm_here: bool
    note: str | None  # why there is no more than sysfs (the caller's words), kept: a notice goes away


@dataclass(frozen=True)
class HeaderInfo:
    """What a source says of itself in the header, as facts (states, names, numbers); the
    view-model writes the header's words (tpmtop.viewmodel.header)."""

    state: SourceState
    tcti: str
    simulated: bool
    engine: str
    mode: str
    op: str
    name: TpmName | None = None  # who the TPM said it is (None: not yet, or no TPM asked)
    simulated_reason: str | None = None  # why a simulator answers: on the first screen
    profile: str | None = None
    marker: str = ""  # a reason given to the source as is: why only sysfs (the CLI's words)
    facts: LiveFacts | CaptureFacts | KernelFacts | PassiveFacts | None = None


@dataclass(frozen=True)
class CapturedStream:
    """A saved capture's newest events as the capture holds them (dicts of tpmtop.capture/1):
    the view-model makes the stream's rows of them."""

    events: list[object]  # the capture's last MAX_STREAM_ROWS entries; a row's key is its index here
    decoded: bool = False  # --decode: the handles column shows the decoded handles and parameters


@dataclass(frozen=True)
class UnlockReading:
    """This machine's LUKS2 devices, their tokens judged against one PCR reading (the Unlock
    panel's input; the view-model makes its rows of it)."""

    devices: tuple[DeviceReport, ...]  # as last read; a header that could not be read has its error
    update_counter: int | None  # pcrUpdateCounter of the PCRs judged against; None: no PCR reading yet


# -- the roles ---------------------------------------------------------------------------------
# A source is several small roles (Harlequin's adapter, connection and cursor): each consumer
# depends on the role it uses, and Capabilities says which roles do something for this source
# (Capabilities.roles). Every source has every member (SourceBase's defaults): a role a source
# lacks refuses in one line (UsageError, with caps.why_not) or answers "nothing" ([], None, "").
# tests/unit/test_source_contract.py counts each role's members (at most 12, no Any).


@runtime_checkable
class Feed(Protocol):
    """What happened, read by the view-model each frame. Raises nothing: a source with nothing
    to say answers empty."""

    @property
    def caps(self) -> Capabilities: ...
    @property
    def recorder(self) -> Recorder | None: ...  # live and kernel: the commands as they happen

    failures: Counter[tuple[int | None, int | None]]  # (cc, rc) -> count known from the source itself (a capture's)
    boundaries: list[tuple[float, str]]  # (time.time(), why) of each new TPM life

    def header(self) -> HeaderInfo: ...
    def events(self) -> list[dict[str, object]]: ...  # a capture's events (the failure patterns read them once)
    def captured_stream(self) -> CapturedStream: ...
    def stream_note(self) -> str: ...
    def close(self) -> None: ...


@runtime_checkable
class Runs(Protocol):
    """What was measured, and which run is shown (caps.timings; m/e/o choose with
    caps.selects_runs). Raises nothing: choose() answers False for a run the source lacks."""

    @property
    def engine(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def op(self) -> str: ...
    @property
    def timeline(self) -> OpsTimeline: ...  # operation p50 per second: the Modes time series
    @property
    def baseline_ops(self) -> dict[tuple[str, str], int]: ...  # (engine, op) -> `none` ops run as the baseline

    def runs(self) -> list[RunView]: ...
    def timings(self, runs: list[RunView] | None = None) -> TimingsView: ...
    def earlier_ops(self) -> int: ...  # operations of earlier TPM lives (kept apart from runs())
    def choose(self, engine: str | None = None, mode: str | None = None, op: str | None = None) -> bool: ...
    def values(self, what: str) -> list[str]: ...
    def reset_stats(self) -> None: ...


@runtime_checkable
class TpmControl(Protocol):
    """The TPM itself: poll, flush, inspect, reconnect (caps.handles; flush needs caps.changes_tpm).
    Raises UsageError where the source has no TPM to ask or may not change it;
    tpmtop.errors.TpmConnectionError when the TPM stops answering (the poller reconnects);
    tpmtop.errors.TpmError for a command the TPM refused."""

    @property
    def connected(self) -> bool: ...

    kernel_device: bool  # polls a kernel's TPM: the observer-effect banner
    poll_interval: float
    identity: Identity | None  # what the TPM said it is (None until it answered)

    def poll(self) -> PollResult: ...
    def reconnect(self) -> None: ...
    def lost(self, error: str) -> None: ...
    def flush(self, handle: int) -> None: ...
    def flush_ours(self) -> list[int]: ...
    def inspect(self, handle: int, kind: str, ours: bool, created_by: str | None = None) -> HandleFacts: ...
    def da_properties(self) -> dict[str, int] | None: ...
    def pcr_report(self) -> PcrSnapshot | None: ...


@runtime_checkable
class Workload(Protocol):
    """The workload tpmtop runs on the TPM: its loop, pause, rate (caps.workload). Raises
    tpmtop.errors.TpmConnectionError from the loop when the TPM stops answering; the other
    members are no-ops where there is no workload."""

    read_only: bool

    @property
    def running(self) -> bool: ...
    @property
    def workload_error(self) -> str | None: ...
    @property
    def pause_reason(self) -> PauseReason | None: ...
    @property
    def gate(self) -> UiGate | None: ...  # the dashboard holds it while it draws (None: no workload)

    def workload_loop(self, cancelled: Callable[[], bool]) -> None: ...
    def set_running(self, running: bool) -> None: ...
    def set_rate_step(self, direction: int) -> float: ...
    def slot_freed(self) -> None: ...


@runtime_checkable
class Export(Protocol):
    """A capture of what the source holds (caps.export, or a replay's own). capture() raises
    UsageError where there is nothing a capture could hold."""

    def ready(self) -> bool: ...  # something to export yet (the TPM answered, the kernel sent a command)
    def capture(self) -> dict[str, object]: ...


@runtime_checkable
class Where(Protocol):
    """Where the commands come from, who else is there, and the LUKS2 devices sealed to its
    PCRs (the header, System, Clients and Unlock panels). Plain reads: raises nothing."""

    @property
    def tcti(self) -> str: ...
    @property
    def sysfs(self) -> Sysfs | None: ...  # passive and kernel always have one

    simulated: bool
    simulated_reason: str | None  # why a simulator answers (the dashboard's fallback says it first)
    proxy: ProxyServer | None  # with --listen
    proxy_log: list[str]
    unlock_devices: list[str] | None  # the Unlock panel's devices (None: crypttab's and LUKS2 block devices)

    def unlock_reading(self) -> UnlockReading | None: ...  # caps.unlock; None: the first header reading is under way


@runtime_checkable
class Source(Feed, Runs, TpmControl, Workload, Export, Where, Protocol):
    """A dashboard source: every role (the view-model's one handle on it). Consumers that need
    one role take that role's type."""


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
    identity: Identity | None = None
    workload_error: str | None = None
    pause_reason: PauseReason | None = None
    sysfs: Sysfs | None = None
    proxy: ProxyServer | None = None
    unlock_devices: list[str] | None = None  # the Unlock panel's devices (None: crypttab's and LUKS2 block devices)

    def __init__(self) -> None:
        # failures known from the source itself (a capture's); live ones the view-model counts
        self.failures: Counter[tuple[int | None, int | None]] = Counter()
        self.boundaries: list[tuple[float, str]] = []
        self.periods: list[dict[tuple[str, str, str], RunAccount]] = []  # accounts of earlier TPM lives
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

    def earlier_ops(self) -> int:
        return sum(a.ops for p in self.periods for a in p.values())

    def events(self) -> list[dict[str, object]]:
        """A saved capture's events (replay): what the failure patterns read once."""
        return []

    def pcr_report(self) -> PcrSnapshot | None:
        """The latest :class:`tpmtop.pcrs.live.PcrSnapshot` (PCRs beside the event log's
        replay), or None: a source with ``caps.pcrs`` reads it in the background."""
        return None

    def unlock_reading(self) -> UnlockReading | None:
        """The LUKS2 devices' tokens judged against the latest PCR reading, or None: a source
        with ``caps.unlock`` reads both in the background."""
        return None

    def captured_stream(self) -> CapturedStream:
        """A saved capture's whole stream (replay); live sources stream from the recorder."""
        return CapturedStream([])

    def stream_note(self) -> str:
        """What the stream says while it has no command to show, when "no commands yet" would
        mislead (a capture recorded without events, a trace file of another kind); "" else."""
        return ""

    def capture(self) -> dict[str, object]:
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

    def inspect(self, handle: int, kind: str, ours: bool, created_by: str | None = None) -> HandleFacts:
        raise self._cannot("inspect a handle")

    def reset_stats(self) -> None:
        pass

    def close(self) -> None:
        pass
