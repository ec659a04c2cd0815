"""Driving a LiveSource's workload by hand (``start_running=True, rate=0``: the test steps it),
and the judge of whether the machine ran at one speed across two phases of a trial, which
benchmarks/estimate_regimes.py prints beside each single trial (the estimate test judges
twenty alternating blocks instead: tests/tui/test_modes_one_basis.py)."""

from __future__ import annotations

import time
from typing import Any

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
