"""What the dashboard's view-model (:mod:`tpmtop.viewmodel.dashboard`) hands the screen: one
immutable :class:`Frame` per tick, each panel's part in its own field, and the notices to
show. No Textual here: the screen only places the parts in its widgets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tpmtop.sources.sysfs import SysfsSnapshot
from tpmtop.sources.timeline import TimelinePoint as TimelinePoint  # a part of StatsView: the widgets take it from here
from tpmtop.viewmodel.rows.handles import HandleRow
from tpmtop.viewmodel.rows.latency import CommandRow, ErrorBook
from tpmtop.viewmodel.rows.modes import CompareRow
from tpmtop.viewmodel.rows.resources import Gauge
from tpmtop.viewmodel.rows.stream import StreamRow


class Severity(StrEnum):
    """A notice's weight (Textual's notification severities, by the same words)."""

    INFORMATION = "information"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Notice:
    text: str
    title: str = ""
    severity: Severity = Severity.INFORMATION
    timeout: float = 5


@dataclass(frozen=True)
class HeaderText:
    """The header's words for what the source says of itself (tpmtop.viewmodel.labels)."""

    state: str  # a tpmtop.sources.protocol.SourceState
    identity: str
    tcti: str
    simulated: bool
    engine: str
    mode: str
    op: str
    rate: str = ""
    simulated_reason: str | None = None  # why a simulator answers: on the first screen
    extra: str = ""  # the source's own words, most telling first, joined with " · "
    profile: str | None = None
    marker: str = ""
    tooltip: str | None = None


@dataclass(frozen=True)
class HeaderView:
    """What the source says of itself, and what the view-model measured: the rate of
    operations and tpmtop's own CPU (live sources only)."""

    info: HeaderText
    ops_per_s: float | None
    cpu: str = ""
    vs_none: str = ""  # the running mode's ratio to `none`, as the Modes panel says it ("×44.4 vs none")


@dataclass(frozen=True)
class TimingsPart:
    """The Latency panel's rows for what is selected now, and notes for it and Modes."""

    rows: list[CommandRow]
    subtitle: str = ""
    run_label: str = ""
    modes_note: str = ""
    modes_lines: list[str] = field(default_factory=list)  # plain text under the Modes bars (a kernel's verdict)


@dataclass(frozen=True)
class StatsView:
    """Latency and Modes: the current run's rows and the comparison of every run."""

    timings: TimingsPart
    errors: ErrorBook
    compare: list[CompareRow]
    op: str
    current: tuple[str, str]  # (engine, mode)
    boot: str  # the projection's one line
    series: list[TimelinePoint | None] | None  # the op p50 time series (live workload only)
    headline: str = ""  # the running mode's ratio to `none` (markup), Modes' first line


@dataclass(frozen=True)
class HandlesView:
    rows: list[HandleRow]
    gauges: list[Gauge] | None  # None before the first poll


@dataclass(frozen=True)
class ClientsView:
    """A proxy's clients (``--listen``), or who holds a device node (``holders``)."""

    proxy_rows: list[tuple[str, list[str]]] | None = None
    detail: Callable[[str], str] | None = None
    holders: dict[str, Any] | None = None
    shown: bool = True  # holders: only when someone holds the device


@dataclass(frozen=True)
class StreamPart:
    rows: list[StreamRow]
    keep_all: bool = False  # a capture's whole stream (replay), not the newest rows only
    empty_note: str = ""  # said in the border when there is nothing to show
    replace: bool = False  # the rows replace what the panel holds (its filter changed: searched anew)


@dataclass(frozen=True)
class Frame:
    """One tick of the dashboard. ``None``: that part did not change (nothing to redraw).

    The typed parts are the view-model's own (their state outlives a frame: the handle book,
    slot peaks, the stream's filter); ``parts`` holds what the panels built from the source
    return (tpmtop.tui.panels.PanelSpec.build), by the panel's id. Each panel's spec says which
    part is its own (PanelSpec.part_of)."""

    header: HeaderView | None = None
    stream: StreamPart | None = None
    stats: StatsView | None = None
    handles: HandlesView | None = None
    clients: ClientsView | None = None
    parts: Mapping[str, object] = field(default_factory=dict)  # PanelSpec.build's parts, by panel id
    notices: tuple[Notice, ...] = ()
    system: tuple[SysfsSnapshot, float | None] | None = None  # a sysfs reading, and the IMA rate it shows
