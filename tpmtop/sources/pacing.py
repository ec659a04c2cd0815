"""How the dashboard's workload is paced: a rate, run in bursts so each operation runs warm
(see :meth:`tpmtop.sources.live.LiveSource.workload_loop`), and how a capture records it.
No Textual here."""

from __future__ import annotations

from typing import Any

DEFAULT_RATE = 100.0  # ops/s the dashboard's workload starts at
RATES = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 0.0)  # 0: unpaced
MAX_CONSECUTIVE_ERRORS = 3
BURST_EVERY_S = 0.1  # a paced workload wakes up at most 10 times a second...
MIN_BURST = 4  # ...and runs at least this many operations back to back when it does
BURST_JOB_S = 0.02  # one job on the TPM's owner thread runs at most this long (then the queue turns)
UNPACED_BURST = 10  # unpaced: operations per job (each hand-off between threads costs a wake-up)
# The interleaved baseline (WorkloadDriver._baseline_one): while a mode other than `none` runs,
# `none` operations on the same engine, op and TPM follow its operations in the same job
# (warm, and at the same moments of a shared machine as they are), so Modes shows the mode's
# ratio to `none` without a key. A burst of 4 once a second put `none`'s p50 on a dozen moments
# at the ends of bursts; under two busy loops it then jumped ×2 between 3-s windows and between
# pacings (benchmarks/ui_load.py), while the mode's own p50 stayed put. So they come often and
# short: a few back to back after one of the mode's operations, the basis on which a kept
# session not yet run is priced (its extends follow each other; one after a wait is slower).
BASELINE_WARM_OPS = 40  # until `none` has this many operations, a burst after each of the mode's...
BASELINE_SHARE = 0.02  # ...then one whenever the baseline has had less than this share of the mode's time
# Operations per baseline burst: the first after the mode's operation, the rest back to back.
# On swtpm a plain extend's wire and host time fall over the first four of a row (wire 23 ->
# 17.5 µs, host 10.8 -> 5.2) and level off after (docs/dashboard.md): from the fifth on they are
# a row's steady part, as a kept session's long row of extends is, and price it not yet run.
BASELINE_BURST = 8
BASELINE_STEADY_FROM = 4  # the burst's places (0 = first) recorded as back to back


def burst_size(rate: float) -> int:
    """Operations per burst at ``rate`` ops/s (0: unpaced, never sleeping, UNPACED_BURST a job)."""
    if rate <= 0:
        return UNPACED_BURST
    return max(MIN_BURST, round(rate * BURST_EVERY_S))


def pacing_json(rate: float) -> dict[str, Any]:
    """A capture's ``pacing``: what the operations ran under (ops/s 0 = unpaced)."""
    if rate <= 0:
        return {"rate_ops_per_s": 0, "burst": UNPACED_BURST, "note": "unpaced: operations back to back"}
    n = burst_size(rate)
    return {"rate_ops_per_s": rate, "burst": n, "burst_every_s": round(n / rate, 3),
            "note": f"bursts of {n} operations back to back every {n / rate:g} s; only the first of "
                    "each burst pays the host's wake-up"}


def baseline_pacing_json(ops: int) -> dict[str, Any]:
    """A ``none`` run's pacing entry for the operations it ran as the interleaved baseline."""
    return {"interleaved_ops": ops,
            "note": f"interleaved baseline: bursts of up to {BASELINE_BURST} `none` operations right after "
                    f"another mode's (after each until {BASELINE_WARM_OPS} ran, then whenever the baseline had "
                    f"less than {BASELINE_SHARE:.0%} of the mode's time)"}
