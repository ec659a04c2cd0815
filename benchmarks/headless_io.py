"""The two costs behind issue 24's "long work without feedback", before and after, in one run.

    .venv/bin/python benchmarks/headless_io.py [--events 400000] [--rounds 3]

1. A capture's histograms: ``LatencyHistogram.buckets()`` read the HDR histogram through
   hdrh's recorded iterator (pure Python over every sub-bucket) — a bench capture holds ~40
   histograms, the silence before "capture written". Now only the non-zero slots are read
   (``tpmtop.stats.recorded``). Timed on histograms of 5,000 latencies like a bench's.
2. The same, whole: a real bench run (``--sim``, every engine and mode), its capture built and
   written as ``bench --events --json`` does, the histograms read each way.
3. ``tpmtop compare`` read each capture twice (its summary, then its events for the failure
   patterns); now once (``tpmtop.patterns.summary_and_patterns``). Timed on the synthetic
   capture of benchmarks/export.py.

Old and new alternate, best of ``--rounds``; the ratio is the figure to quote (the machine is
shared). Prints the machine and the load average.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from machine import describe  # noqa: E402 - benchmarks/machine.py


def _best(old, new, rounds: int) -> tuple[float, float]:
    """Best of ``rounds`` of each, old and new alternating (a burst of load hits both)."""
    import gc

    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, fn in enumerate((old, new)):
            gc.collect()
            t = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return best[0], best[1]


def histograms(rounds: int) -> None:
    from tpmtop.stats import LatencyHistogram

    rng = random.Random(1)
    hists = []
    for _ in range(40):
        h = LatencyHistogram()
        for _ in range(5000):
            h.record(int(rng.lognormvariate(11, 1.2)) + 20_000)
        h.count  # noqa: B018 - drain the pending values before timing
        hists.append(h)

    def old():
        for h in hists:
            with h._lock:
                [(it.value_iterated_to, it.count_at_value_iterated_to) for it in h._h.get_recorded_iterator()]

    def new():
        from tpmtop.stats import recorded

        for h in hists:
            with h._lock:
                recorded(h._h)

    t_old, t_new = _best(old, new, rounds)
    print(f"40 histograms' buckets: recorded iterator {t_old * 1e3:,.0f} ms, non-zero slots {t_new * 1e3:,.1f} ms "
          f"(x{t_old / t_new:,.0f})")


def bench_capture(n: int, rounds: int) -> None:
    """What `bench --events --json` does after its last operation: build the capture and write
    it, with the histograms read the old way (hdrh's iterator) and the new."""
    import tpmtop.stats as stats
    from tpmtop.bench import BenchPlan, run_bench
    from tpmtop.capture import build_capture, write_capture
    from tpmtop.connect import open_tpm
    from tpmtop.sessions.modes import ENGINES, MODES

    conn = open_tpm(sim=True)
    try:
        plan = BenchPlan(op="extend", modes=list(MODES), engines=list(ENGINES), n=n, warmup=2)
        conn.recorder.reset_stats()
        res = run_bench(conn, plan, keep_ops=True)
        counted = {o[0] for o in res.ops_log}
        events = [e for e in conn.recorder.events() if e.op_seq is None or e.op_seq in counted]
        new_recorded = stats.recorded

        def old_recorded(h):
            return [(it.value_iterated_to, it.count_at_value_iterated_to) for it in h.get_recorded_iterator()]

        with tempfile.TemporaryDirectory(prefix="tpmtop-bench-") as d:
            def run(way):
                def go():
                    stats.recorded = way
                    try:
                        write_capture(os.path.join(d, "c.json"), build_capture(conn, res.accounts, events=events,
                                                                                ops_log=res.ops_log))
                    finally:
                        stats.recorded = new_recorded
                return go

            t_old, t_new = _best(run(old_recorded), run(new_recorded), rounds)
            mb = os.path.getsize(os.path.join(d, "c.json")) / 1e6
    finally:
        conn.close()
    print(f"bench --events capture after {len(plan.pairs)} pairs x n={n} ({len(events):,} commands, {mb:,.0f} MB): "
          f"build and write with hdrh's iterator {t_old:,.1f} s, non-zero slots {t_new:,.1f} s (x{t_old / t_new:.1f})")


def compare_reads(n_events: int, rounds: int) -> None:
    from export import synthetic_capture  # benchmarks/export.py

    from tpmtop.capture import load_summary
    from tpmtop.patterns import detect_in_capture, summary_and_patterns

    with tempfile.TemporaryDirectory(prefix="tpmtop-bench-") as d:
        path = os.path.join(d, "big.json")
        synthetic_capture(path, n_events)
        mb = os.path.getsize(path) / 1e6

        def old():
            doc = load_summary(path)
            if doc.get("_n_events"):
                detect_in_capture(path)

        def new():
            summary_and_patterns(path)

        t_old, t_new = _best(old, new, rounds)
    print(f"compare's reading of one {mb:,.0f} MB capture ({n_events:,} events): twice {t_old:,.1f} s, "
          f"once {t_new:,.1f} s (x{t_old / t_new:.2f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=300, help="bench operations per (engine, mode) for the capture timing")
    a = ap.parse_args()
    os.environ.setdefault("TSS2_LOG", "all+NONE")  # as tpmtop's CLI: ESAPI's clean-up warnings are noise here
    print(f"# {describe()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    bench_capture(a.n, a.rounds)
    compare_reads(a.events, a.rounds)
    histograms(a.rounds)
    print(f"# load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
