"""What every dashboard source offers, and what it can do: the screens read
:class:`Capabilities` instead of asking which kind of source they have.

Live (a TPM), replay (a capture) and passive (sysfs only) sources all satisfy :class:`Source`;
each answers the same questions in plain data built by :mod:`tpmtop.sources.rows`, so a
replayed capture goes through the panels' code exactly as a live run does. No Textual here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tpmtop.sources.rows.latency import CommandRow, ErrorBook
from tpmtop.sources.runs import RunView


@dataclass(frozen=True)
class Capabilities:
    state_word: str  # the header's state when the source has no running/paused state of its own
    live: bool  # the data changes: the screen re-reads it (recorder, accounts) several times a second
    handles: bool  # the TPM's handles and slots can be polled (Handles, Resources)
    timings: bool  # there are command timings (Latency, Modes, Stream)
    workload: bool  # a workload runs here: pause, rate, and m/e/o change what it runs
    changes_tpm: bool  # actions that change the TPM are allowed (not --read-only, not a capture)
    selects_runs: bool  # m/e/o choose what is shown
    export: bool  # x writes a capture
    sysfs: bool  # a kernel worth reading (System panel): --passive, or a TPM device node
    why_not: str = ""  # said when a key is refused: "replay shows a capture: nothing to change"


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
    extra: str = ""
    profile: str | None = None
    marker: str = ""
    tooltip: str | None = None


@dataclass
class TimingsView:
    """The Latency panel's rows for what is selected now, and notes for it and Modes."""

    rows: list[CommandRow] = field(default_factory=list)
    subtitle: str = ""
    run_label: str = ""
    modes_note: str = ""
    modes_lines: list[str] = field(default_factory=list)  # plain text under the Modes bars (a kernel's verdict)


@runtime_checkable
class Source(Protocol):
    caps: Capabilities
    engine: str
    mode: str
    op: str
    errors: "ErrorBook"  # response codes per command (live: fed from the recorder each tick)

    def header(self) -> HeaderInfo: ...

    def runs(self) -> list[RunView]: ...

    def timings(self) -> TimingsView: ...

    def choose(self, engine: str | None = None, mode: str | None = None, op: str | None = None) -> bool: ...

    def values(self, what: str) -> list[str]: ...
