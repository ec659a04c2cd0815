"""``tpmtop bench``'s core: run (engine, mode) pairs interleaved in rounds, then report.

Interleaving matters on shared, noisy machines: a burst of load hits every pair alike, so
their *ratios* stay meaningful even when absolute figures wander.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

from tpmtop import __version__
from tpmtop.errors import Interrupted, NullNameChanged, TpmtopError
from tpmtop.sessions.accounting import RunAccount
from tpmtop.sessions.workload import Workload


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
    ops_log: list = field(default_factory=list)
    resets: list[str] = field(default_factory=list)  # why each earlier period ended
    periods: list[list[RunAccount]] = field(default_factory=list)  # accounts before each reset


def run_bench(conn, plan: BenchPlan, progress: Callable[[int, int], None] | None = None,
              keep_ops: bool = False, notice: Callable[[str], None] | None = None) -> BenchResult:
    """Run the plan; always flush what was created. KeyboardInterrupt/TPM failures stop the
    run early with what was completed kept (``interrupted``/``error`` say why).

    Each operation is one job on the TPM's owner thread; this thread only waits. A signal
    therefore stops the *waiting*: the operation in flight completes, and the clean-up job
    queued behind it finds the TPM stream in step.
    """
    owner = conn.owner
    wl = Workload(conn, plan.engines[0], plan.modes[0], plan.op, pcr=plan.pcr,
                  param_encryption=plan.param_encryption, allow_pcr=plan.allow_pcr)
    total = plan.n * len(plan.pairs)
    done = 0
    t_start = time.perf_counter()
    result = BenchResult([])
    try:
        # Warm-up: each pair's first operations pay for imports, caches and ESAPI set-up.
        for engine, mode in plan.pairs:
            owner.call(wl.set, engine, mode)
            for _ in range(plan.warmup):
                owner.call(wl.run_one)
        wl.accounts.clear()
        if keep_ops:
            wl.ops_log = result.ops_log
        remaining = {p: plan.n for p in plan.pairs}
        while any(remaining.values()):
            for pair in plan.pairs:
                k = min(plan.batch, remaining[pair])
                if not k:
                    continue
                owner.call(wl.set, *pair)
                for _ in range(k):
                    try:
                        owner.call(wl.run_one)
                    except NullNameChanged as e:
                        # A reset TPM (or interference): say so, keep both periods apart, go on.
                        result.resets.append(str(e))
                        if notice:
                            notice(f"{e}; re-establishing sessions; statistics before and after are kept apart")
                        owner.call(wl.recover_from_reset, str(e))
                        continue
                    done += 1
                    if progress:
                        progress(done, total)
                remaining[pair] -= k
    except (KeyboardInterrupt, Interrupted):
        result.interrupted = True
    except Exception as e:  # a TPM failure: keep what was completed, report, exit 1
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
    def ordered(accounts):
        return sorted((a for a in accounts.values() if a.ops), key=lambda a: order.get((a.engine, a.mode), 99))

    result.accounts = ordered(wl.accounts)
    result.periods = [ordered(p) for p in wl.periods]
    result.integrity_failures = wl.integrity_failures
    return result


def capture_dict(conn, accounts: list[RunAccount], *, events: list | None = None,
                 ops_log: list | None = None, extra: dict | None = None,
                 periods: list[list[RunAccount]] | None = None) -> dict:
    """The ``tpmtop.capture/1`` document (see tpmtop/schema/capture-1.json).

    After a TPM reset the runs of each period are kept apart: every run then carries
    ``period`` (0 = before the first reset) and ``marks`` says when and why.
    """
    cap = {
        "schema": "tpmtop.capture/1",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tool": {"version": __version__},
        "host": {"hostname": socket.gethostname(), "kernel": platform.release(),
                 "machine": platform.machine(), "cpus": os.cpu_count()},
        "tpm": conn.tpm_json(),
        "runs": [a.to_json() for a in accounts],
    }
    if periods:
        cap["runs"] = [a.to_json() | {"period": i} for i, p in enumerate(periods) for a in p] + \
                      [a.to_json() | {"period": len(periods)} for a in accounts]
    if extra:
        cap.update(extra)
    # One time origin for events, operations and marks: the earliest of them.
    starts = ([events[0].t_ns] if events else []) + ([ops_log[0][4]] if ops_log else [])
    t0 = min(starts) if starts else conn.recorder.started_ns
    marks = list(conn.recorder.marks)
    if marks:
        cap["marks"] = [{"t_ns": max(t - t0, 0), "text": text} for t, text in marks]
    if events is not None:
        from tpmtop.capture import events_json

        cap["events"] = events_json(events, t0)
        cap["ops"] = [{"op_seq": s, "engine": e, "mode": m, "op": o, "t_ns": t - t0, "total_ns": tot,
                       "wire_ns": w, "ok": ok} for (s, e, m, o, t, tot, w, ok) in (ops_log or [])]
    return cap


def write_capture_file(path: str, cap: dict) -> None:
    from tpmtop.capture import write_capture  # validates, then writes atomically

    write_capture(path, cap)
