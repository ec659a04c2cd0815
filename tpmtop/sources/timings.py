"""What a source knows of the commands' timings, as plain numbers: the selected run and each
command code's figures. The view-model turns them into the Latency panel's rows
(:func:`tpmtop.viewmodel.rows.latency.timing_rows`). No Textual here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpmtop.sources.histreads import buckets_of, summary_of
from tpmtop.sources.runs import RunView

if TYPE_CHECKING:
    from tpmtop.recorder import CommandStats


@dataclass
class CommandTiming:
    """One command code's figures as the wire saw them (µs)."""

    cc: int | None  # None: a command whose code could not be read
    summary: dict[str, Any]
    last_us: float | None = None
    errors: int = 0
    buckets: Callable[..., list[Any]] | list[Any] | None = None  # [[upper_bound_us, count], …]
    recent_us: list[float] = field(default_factory=list)
    path: str | None = None  # the kernel's path it came by (tpmtop --kernel): one row per (path, code)
    path_named: bool = False  # the path is worth naming beside the command (unusual, or one of several)


def command_timing(cc: int | None, st: CommandStats, path: str | None = None,
                   path_named: bool = False) -> CommandTiming:
    return CommandTiming(cc, summary_of(st.hist), st.last_ns / 1000 if st.last_ns else None, st.errors,
                         buckets_of(st.hist), [v / 1000 for v in list(st.recent)], path, path_named)


def command_timings(stats: dict[int | None, CommandStats]) -> list[CommandTiming]:
    """The recorder's per-command figures, by command code (an unread code last)."""
    return [command_timing(cc, st) for cc, st in sorted(stats.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))]


@dataclass(frozen=True)
class PeriodFacts:
    """This TPM life, once the TPM restarted: the earlier ones are kept apart."""

    since: float  # time.time() this life began
    earlier: int  # earlier lives (periods)
    earlier_ops: int  # operations they ran


@dataclass(frozen=True)
class KernelSessions:
    """What the kernel's own operations show of its HMAC sessions (tpmtop.kernel.ops)."""

    mode: str | None  # the session behaviour seen (a session mode's name), None: cannot tell yet
    why: str  # what it was told from (tpmtop.kernel.ops's words)
    lost: int  # trace events the buffer lost
    setups_after: dict[str, int] = field(default_factory=dict)  # a kept session's set-ups, by what came before
    blind: bool = False  # one command per extend and no operation probes: no host time seen
    estimated: bool = False  # no operation probes: an extend timed from its first command to its last
    note: str = ""  # the trace file's kind, when it is not tpmtop's probes' (tpmtop.kernel's words)


@dataclass
class TimingsView:
    """What is selected now: its run (the operation's figures, and its commands), or the
    commands as the wire saw them, and the facts the Latency and Modes panels' notes are
    written from (by the view-model: tpmtop.viewmodel.labels)."""

    run: RunView | None = None  # the operation's total/wire/host figures, and its commands unless `commands`
    commands: list[CommandTiming] | None = None  # the wire's commands instead of the run's (live before a run; kernel)
    recent: list[CommandTiming] = field(default_factory=list)  # the wire's newest samples over the run's commands
    host_seen: bool = True  # False: the operation's host time cannot be seen (kernel without operation probes)
    engine: str = ""  # the selected run's engine, mode and op ("" : nothing selected)
    mode: str = ""
    op: str = ""
    period: PeriodFacts | None = None  # live, once the TPM restarted
    kernel: KernelSessions | None = None  # the kernel's traffic (tpmtop --kernel)
