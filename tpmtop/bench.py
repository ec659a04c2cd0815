"""``tpmtop bench``'s core: run (engine, mode) pairs interleaved in rounds, then report.

Interleaving matters on shared, noisy machines: a burst of load hits every pair alike, so
their *ratios* stay meaningful even when absolute figures wander.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpmtop.errors import Interrupted, NullNameChanged, TpmConnectionError, TpmtopError
from tpmtop.sessions.accounting import RunAccount
from tpmtop.sessions.workload import Workload

if TYPE_CHECKING:
    from tpmtop.tpm.connection import TpmConnection


@dataclass
class BenchPlan:
    op: str
    modes: list[str]
    engines: list[str]
    n: int = 200
    warmup: int = 10
    batch: int = 10
    pcr: int = 16
    param_encryption: bool = True
    allow_pcr: bool = False

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(e, m) for e in self.engines for m in self.modes]


@dataclass
class BenchResult:
    accounts: list[RunAccount]
    interrupted: bool = False
    error: str | None = None
    elapsed_s: float = 0.0
    integrity_failures: int = 0
    ops_log: list[Any] = field(default_factory=list)
    resets: list[str] = field(default_factory=list)  # why each earlier period ended
    periods: list[list[RunAccount]] = field(default_factory=list)  # accounts before each reset
    floor: Floor | None = None  # the machine's speed through the run, measured each round


# The floor: a 1-byte TPM2_GetRandom with no session, the most trivial TPM round trip there is,
# sent back to back as one more pair would be: a batch before each round and one after the
# last, as many round trips as each pair's operations (its p99 is as closed as theirs). Sent
# on the backend itself, below the transport: no chip profile holds it (the floor is the
# machine's, never a chip's figure) and the recorder does not see it (it is not the
# workload's). Measured on this project's VM (docs/captures.md, "Run-to-run noise"): when a
# run's operations stepped ×2–2.4 slower, this round trip stepped with them (×2.3–2.5); a
# pure-Python work unit and a pipe round trip to a child process did not.
GET_RANDOM_1 = bytes.fromhex("80010000000c0000017b0001")
FLOOR_WHAT = ("TPM2_GetRandom of 1 byte, no session, sent below the transport (no chip profile): "
              "a batch before each round of the bench and after the last")


@dataclass
class Floor:
    """The floor's round trips, in µs, one list per round (block) of the bench."""

    blocks: list[list[float]] = field(default_factory=list)

    def probe(self, conn: TpmConnection, k: int) -> None:
        """One block of ``k`` round trips; runs on the TPM's owner thread, between two batches."""
        transport = conn.transport
        if transport is None:
            raise TpmConnectionError("not connected")
        backend, now = transport.backend, time.perf_counter_ns
        block = []
        for _ in range(k):
            t0 = now()
            rsp = backend.transact(GET_RANDOM_1)
            t = now() - t0
            if int.from_bytes(rsp[6:10], "big") != 0:
                return  # an answer that is not the trivial one is no floor (a TPM in failure mode)
            block.append(round(t / 1000, 3))
        self.blocks.append(block)

    def to_json(self) -> dict[str, Any]:
        return {"what": FLOOR_WHAT, "blocks_us": self.blocks}


class _Batch:
    """``k`` operations back to back as one job on the TPM's owner thread: one hand-over per
    batch instead of two thread wake-ups per operation (~20 µs each here, more on a loaded
    machine). The recorder decodes and the GC catches up after the batch, as between jobs.
    ``stop`` (set by the waiting thread when a signal stopped it) ends the batch after the
    operation in flight, so clean-up waits for one operation, not the batch."""

    def __init__(self, wl: Workload):
        self.wl = wl
        self.stop = False
        self.resets: list[str] = []  # NullNameChanged seen inside a batch, for the caller to report

    def __call__(self, k: int, pair: tuple[str, str] | None = None) -> int:
        if pair is not None:
            self.wl.set(*pair)
        done = 0
        for _ in range(k):
            if self.stop:
                break
            try:
                self.wl.run_one()
            except NullNameChanged as e:
                # A reset TPM (or interference): keep both periods apart and go on.
                self.resets.append(str(e))
                self.wl.recover_from_reset(str(e))
                continue
            done += 1
        return done


def run_bench(conn: TpmConnection, plan: BenchPlan, progress: Callable[[int, int], None] | None = None,
              keep_ops: bool = False, notice: Callable[[str], None] | None = None) -> BenchResult:
    """Run the plan; always flush what was created. KeyboardInterrupt/TPM failures stop the
    run early with what was completed kept (``interrupted``/``error`` say why).

    Each batch of operations is one job on the TPM's owner thread; this thread only waits. A
    signal therefore stops the *waiting*: the operation in flight completes (the batch stops
    there), and the clean-up job queued behind it finds the TPM stream in step.
    """
    owner = conn.owner
    if owner is None:
        raise TpmConnectionError("not connected")
    wl = Workload(conn, plan.engines[0], plan.modes[0], plan.op, pcr=plan.pcr,
                  param_encryption=plan.param_encryption, allow_pcr=plan.allow_pcr)
    batch = _Batch(wl)
    total = plan.n * len(plan.pairs)
    done = 0
    t_start = time.perf_counter()
    result = BenchResult([])

    def reported_resets() -> None:
        for why in batch.resets:
            result.resets.append(why)
            if notice:
                notice(f"{why}; re-establishing sessions; statistics before and after are kept apart")
        batch.resets.clear()

    try:
        # Warm-up: each pair's first operations pay for imports, caches and ESAPI set-up.
        for engine, mode in plan.pairs:
            owner.call(wl.set, engine, mode)
            if plan.warmup:
                owner.call(batch, plan.warmup)
            reported_resets()
        wl.accounts.clear()
        if keep_ops:
            wl.ops_log = result.ops_log
        remaining = {p: plan.n for p in plan.pairs}
        floor = result.floor = Floor()
        while any(remaining.values()):
            owner.call(floor.probe, conn, plan.batch)
            for pair in plan.pairs:
                k = min(plan.batch, remaining[pair])
                if not k:
                    continue
                n = owner.call(batch, k, pair)  # an operation a TPM reset cost is not run again
                reported_resets()
                remaining[pair] -= k
                for _ in range(n):  # per operation, as the caller counts them
                    done += 1
                    if progress:
                        progress(done, total)
        owner.call(floor.probe, conn, plan.batch)  # and after the last round
    except (KeyboardInterrupt, Interrupted):
        batch.stop = True  # the batch in flight ends after its current operation
        result.interrupted = True
    except Exception as e:  # a TPM failure: keep what was completed, report, exit 1
        batch.stop = True
        if not isinstance(e, TpmtopError) and type(e).__name__ != "TSS2_Exception":
            raise
        result.error = str(e)
    finally:
        try:
            owner.call(wl.close)
        except Exception as e:  # the TPM may be gone; nothing more can be flushed then
            if result.error is None and not result.interrupted:
                result.error = f"clean-up failed: {e}"
    result.elapsed_s = time.perf_counter() - t_start
    order = {p: i for i, p in enumerate(plan.pairs)}
    def ordered(accounts: dict[Any, RunAccount]) -> list[RunAccount]:
        return sorted((a for a in accounts.values() if a.ops), key=lambda a: order.get((a.engine, a.mode), 99))

    result.accounts = ordered(wl.accounts)
    result.periods = [ordered(p) for p in wl.periods]
    result.integrity_failures = wl.integrity_failures
    return result




def write_capture_file(path: Any, cap: dict[str, Any],
                       progress: Callable[[int, int | None], None] | None = None) -> None:
    """``path``: a file name or a checked :class:`tpmtop.output.Output`. Validate and write
    (atomically for a file); on a late write failure the capture is kept
    in a fallback file named in the error (an OutputError, exit status 1). ``progress(done,
    total)``: elements written."""
    from tpmtop.capture import write_capture

    write_capture(path, cap, keep=True, progress=progress)
