"""Every dashboard panel, once: its key, title, what it needs from the source, where it sits,
its widget and its help line. The screen's layout, its tabs and keys, the footer, the help
screen, the command palette and what a source can show (:mod:`tpmtop.tui.availability`) all
read :data:`PANELS`, so a panel cannot be half-added (``tests/unit/test_registries.py``).

A panel is a widget (:mod:`tpmtop.tui.widgets`, a ``Panel[Part]``) that draws its part of the
view-model's frame, and how that part is built: a new panel's ``build`` (a function of the source
in :mod:`tpmtop.viewmodel.rows`, which the view-model calls once a second; docs/extending.md),
or, for the view-model's own parts, ``part`` (which typed field of the frame is this panel's).
The screen routes each frame to every panel through :meth:`PanelSpec.part_of`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar, cast

from tpmtop.tui.widgets.clients import ClientsPanel
from tpmtop.tui.widgets.handles import HandlesPanel
from tpmtop.tui.widgets.health import HealthPanel
from tpmtop.tui.widgets.latency import LatencyPanel
from tpmtop.tui.widgets.modes import ModesPanel
from tpmtop.tui.widgets.panel import Panel
from tpmtop.tui.widgets.pcrs import PcrsPanel
from tpmtop.tui.widgets.resources import ResourcesPanel
from tpmtop.tui.widgets.stream import StreamPanel
from tpmtop.tui.widgets.system import SystemPanel
from tpmtop.tui.widgets.unlock import UnlockPanel
from tpmtop.viewmodel.commands import Capabilities, Source, SysfsSnapshot
from tpmtop.viewmodel.frame import ClientsView, Frame, HandlesView, StatsView, StreamPart
from tpmtop.viewmodel.rows import health, pcrs, unlock
from tpmtop.viewmodel.rows.resources import Gauge

P = TypeVar("P")


class Group(StrEnum):
    """Where a panel sits at full size: the left column, beside it (top right), or the bottom row."""

    LEFT = "left"
    RIGHT = "right"
    BOTTOM = "bottom"


@dataclass(frozen=True)
class PanelSpec(Generic[P]):
    key: str  # shows the panel (a tab below 110×32)
    id: str  # the widget's id
    title: str
    needs: Callable[[Capabilities], bool]  # the source can fill it
    group: Group
    widget: type[Panel[P]]
    help: str  # "Reading the panels" in the help screen
    build: Callable[[Source], P] | None = None  # the source -> this panel's part, once a second (Frame.parts)
    part: Callable[[Frame], P | None] | None = None  # or: which of the view-model's typed parts is this panel's

    def __post_init__(self) -> None:
        if (self.build is None) == (self.part is None):
            raise ValueError(f"panel {self.id}: give it a build or a part, one of them")

    def part_of(self, frame: Frame) -> P | None:
        """This panel's part of ``frame`` (None: it did not change)."""
        if self.part is not None:
            return self.part(frame)
        # put there by the view-model from this spec's own build: of type P
        return cast("P | None", frame.parts.get(self.id))


def _gauges(f: Frame) -> list[Gauge] | None:
    return f.handles.gauges if f.handles is not None else None


def _handles(f: Frame) -> HandlesView | None:
    return f.handles


def _stats(f: Frame) -> StatsView | None:
    return f.stats


def _stream(f: Frame) -> StreamPart | None:
    return f.stream


def _clients(f: Frame) -> ClientsView | None:
    return f.clients


def _system(f: Frame) -> tuple[SysfsSnapshot, float | None] | None:
    return f.system


PANELS: tuple[PanelSpec[Any], ...] = (
    PanelSpec("1", "handles", "Handles", lambda c: c.handles, Group.LEFT, HandlesPanel,
              "Handles: every handle the TPM lists, tpmtop's marked; new ones and flushed ones stay highlighted "
              "for a few seconds. f flushes the selected one, Enter or i inspects it.", part=_handles),
    PanelSpec("2", "resources", "Resources", lambda c: c.handles, Group.LEFT, ResourcesPanel,
              "Resources: object and session slots in use as of the last poll, with the peak the traffic reached "
              "between polls, and the context gap of saved sessions.", part=_gauges),
    PanelSpec("3", "latency", "Latency", lambda c: c.timings, Group.RIGHT, LatencyPanel,
              "Latency: the current run's operation (total, wire, host) and its commands; [b]errors[/] counts "
              "failed commands, and the selected row's response codes are decoded above its histogram. "
              "Every time column is in µs.", part=_stats),
    PanelSpec("4", "modes", "Modes", lambda c: c.timings, Group.BOTTOM, ModesPanel,
              "Modes: the running mode's ratio to `none` first (live, [b]none*[/] is measured in short bursts "
              "between the mode's own operations: no key needed); then each (engine, mode) run's operation p50, "
              "its ratio to `none` of the same engine, and the commands per operation.", part=_stats),
    PanelSpec("5", "stream", "Stream", lambda c: c.timings, Group.BOTTOM, StreamPanel,
              "Stream: s freezes it on every command the recorder keeps; / filters (a command, an origin, "
              "or [b]errors[/]); PgUp/PgDn/Home/End scroll.", part=_stream),
    PanelSpec("6", "system", "System", lambda c: c.sysfs, Group.LEFT, SystemPanel,
              "System: what sysfs and securityfs say (kernel, HMAC sessions compiled in, IMA count, PCRs), "
              "read without a TPM command of tpmtop's.", part=_system),
    PanelSpec("7", "clients", "Clients", lambda c: c.clients, Group.LEFT, ClientsPanel,
              "Clients: with --listen, the programs using the TPM through tpmtop's proxy (tpmtop's workload one "
              "of them); on a device, the processes holding it open.", part=_clients),
    PanelSpec("8", "pcrs", "PCRs", lambda c: c.pcrs, Group.LEFT, PcrsPanel,
              "PCRs: whether the boot's event log (and IMA's list) replays to each bank's PCRs, read every 10 s "
              "with PCR_Read; the PCRs that do not match and why; bank-health verdicts (tpmtop pcrs).",
              build=pcrs.part),
    PanelSpec("9", "health", "Health", lambda c: c.health, Group.LEFT, HealthPanel,
              "Health: tpmtop health's verdicts — the TPM's dictionary-attack counter (from the handle poll, no "
              "command of its own) and who sent wrong passwords through the proxy; the driver, set-up and IMA "
              "from sysfs and dmesg (read every 30 s).", build=health.part),
    PanelSpec("u", "unlock", "Unlock", lambda c: c.unlock, Group.LEFT, UnlockPanel,
              "Unlock: each LUKS2 token sealed to PCRs (systemd-cryptenroll, clevis) and whether it would unseal "
              "with the PCRs of the PCRs panel's reading (every 10 s), worked out in software: no unseal "
              "(tpmtop unlock).", build=unlock.part),
)
BY_ID = {p.id: p for p in PANELS}
# Containers of the full-size layout, and the groups each holds (shown when one of its panels is).
CONTAINERS = {"left": (Group.LEFT,), "top": (Group.LEFT, Group.RIGHT), "bottom": (Group.BOTTOM,)}


def available(caps: Capabilities) -> list[str]:
    """The panels this source can fill: no "live only" box taking the room of one with something to say."""
    return [p.id for p in PANELS if p.needs(caps)]
