"""Driving a LiveSource's workload by hand (``start_running=True, rate=0``: the test steps it);
one block of the not-run reuse estimate against reuse then measured, which the estimate test
(tests/tui/test_modes_one_basis.py) and benchmarks/estimate_regimes.py both run, so that the
benchmark's blocks are the test's; and the judge of whether the machine ran at one speed across
two phases of a single trial, which the benchmark prints beside each."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tpmtop.viewmodel.rows.modes import projection_of

# The baseline bursts' own work, timed beside every mode: a plain extend back to back (wire)
# and its host work and the session's HMAC work (host)
PROBES = ("Eb", "hEb", "hM")
ONE_SPEED = (0.9, 1.1)  # each probe in the second phase over the first
REUSE_AT_EB = (0.67, 1.5)  # reuse's own extend wire p50 over its phase's Eb: it adds the TPM's HMAC work


def step_until(src: Any, ops: int, timeout: float = 300) -> None:
    """Step the workload until it has run ``ops`` operations of its current choice."""
    deadline = time.monotonic() + timeout
    done = 0
    while done < ops:
        assert time.monotonic() < deadline, f"{done} of {ops} operations in {timeout:g} s"
        done += src.step(ops - done)[0]


BLOCKS, BLOCK_PC_OPS, BLOCK_REUSE_OPS = 20, 100, 1_000  # the estimate test's alternating blocks


@dataclass
class Block:
    """One estimate and the measurement after it."""
    estimate: Any  # reuse's price (a projection's ModeCost) as the Modes line shows it, reuse not run
    measured: Any  # reuse's price once it ran: N × its op p50
    comps: dict[str, float]  # the estimate's inputs, by the projection's letters
    measured_modes: list[str]  # the modes the estimate's projection had op p50s for
    line: str  # the Modes panel's boot line as the estimate was read

    @property
    def ratio(self) -> float:
        return float(self.estimate.total_s / self.measured.total_s)


def _priced(src: Any, dash: Any, mode: str, ops: int) -> tuple[Any, dict[str, float], list[str], str]:
    """Run ``ops`` operations of ``mode`` on accounts started again; reuse's price then, with
    the projection's inputs, the modes it had op p50s for, and the boot line."""
    src.reset_stats()
    src.choose(mode=mode)
    step_until(src, ops)
    dash.changed()
    line = dash.stats(80).boot  # the tables' runs, which the projection then reads
    comps, n, _, _, _, per_mode, _ = dash.projection("-")
    return projection_of(comps, n, per_mode).modes["reuse"], comps, list(per_mode), line


def block(src: Any, dash: Any) -> Block:
    """Per-command runs, reuse's estimate is read with reuse not run; then reuse runs and is
    measured: each phase on accounts started again, on a running source."""
    estimate, comps, measured_modes, line = _priced(src, dash, "per-command", BLOCK_PC_OPS)
    measured = _priced(src, dash, "reuse", BLOCK_REUSE_OPS)[0]
    return Block(estimate, measured, comps, measured_modes, line)


def one_speed(before: dict[str, float], then: dict[str, float], reuse_wire: float,
              reuse_wire_before: float | None = None) -> bool:
    """Did the machine run at one speed across a trial's two phases? Each probe within
    ONE_SPEED of itself, and reuse's own extends (in the second phase, and in the first where
    reuse ran there too) at the speed of their phase's bursts."""
    def at_eb(wire: float, comps: dict[str, float]) -> bool:
        return REUSE_AT_EB[0] <= wire / comps["Eb"] <= REUSE_AT_EB[1]

    return (all(ONE_SPEED[0] <= then[k] / before[k] <= ONE_SPEED[1] for k in PROBES)
            and at_eb(reuse_wire, then)
            and (reuse_wire_before is None or at_eb(reuse_wire_before, before)))
