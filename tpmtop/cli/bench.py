"""``tpmtop bench``: the cost of each HMAC session strategy on this TPM."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from tpmtop.bench import BenchPlan
    from tpmtop.cli.plot import Series
    from tpmtop.recorder import Recorder
    from tpmtop.sessions.accounting import RunAccount

    # a run's commands -> those a chip profile did not cover (tpmtop.profiles.apply.gaps)
    GapsFn = Callable[[Iterable[int | str | None]], list[str]]
    # a run's commands and mode -> those whose profile figure is an estimate (profiles.apply.estimated)
    EstimatesFn = Callable[[Iterable[int | str | None], str], list[str]]


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.cli import add_tpm_options
    from tpmtop.sessions.modes import ENGINES, MODES, OP_COMMANDS, Op, mode_help

    add_tpm_options(p)
    p.add_argument("--op", default=Op.EXTEND.value,
                   help=f"{', '.join(f'{o} ({c})' for o, c in OP_COMMANDS.items())} (default: extend)")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"comma-separated session modes: {mode_help()} (default: all)")
    p.add_argument("--engine", default=",".join(ENGINES),
                   help="comma-separated crypto engines: native (tpmtop's), esys (tpm2-pytss ESAPI) (default: both)")
    p.add_argument("-n", type=int, default=200, metavar="N", help="operations per (engine, mode) (default: 200)")
    p.add_argument("--warmup", type=int, default=10, metavar="N",
                   help="uncounted operations per pair first (default: 10)")
    p.add_argument("--batch", type=int, default=10, metavar="N",
                   help="operations per pair per round; pairs are interleaved in rounds (default: 10)")
    p.add_argument("--pcr", type=int, default=16, help="PCR to extend (default: 16; 0-15 need --allow-pcr)")
    p.add_argument("--allow-pcr", action="store_true", help="allow extending PCRs 0-15 (changes boot measurements!)")
    p.add_argument("--no-param-encryption", action="store_true",
                   help="clear the decrypt/encrypt session attributes where the kernel sets them")
    p.add_argument("--json", metavar="FILE", help="write a tpmtop.capture/1 file (atomically)")
    p.add_argument("--events", action="store_true", help="include every TPM command in the --json capture")
    p.add_argument("--openmetrics", metavar="FILE",
                   help="also write the histograms as OpenMetrics text (node_exporter textfile collector), atomically")
    p.add_argument("--hist", action="store_true",
                   help="also print each (engine, mode)'s operation latencies as bpftrace prints a hist() "
                        "(power-of-two µs buckets, every one from the lowest to the highest filled): the "
                        "text to paste into a mailing list")
    p.add_argument("--plot", metavar="FILE.svg|png",
                   help="draw the mode comparison (p50/p90/p99 bars, whole distributions) into FILE; the "
                        "format follows the extension (.svg, .png, .pdf). Needs matplotlib: "
                        "pip install 'tpmtop[plot]'")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress bar (there is none anyway when stderr is not a terminal)")
    from tpmtop.profiles.apply import add_profile_options  # issue 7: --profile/--seed

    add_profile_options(p)


def _plan(args: argparse.Namespace) -> BenchPlan:
    from tpmtop.bench import BenchPlan
    from tpmtop.errors import UsageError
    from tpmtop.sessions.modes import ENGINES, MODES, OPS, check_pcr, parse_list

    if args.op not in OPS:
        raise UsageError(f"unknown --op '{args.op}' (choose from {', '.join(OPS)})")
    for name in ("n", "warmup", "batch"):
        v = getattr(args, name)
        if v < (1 if name != "warmup" else 0):
            raise UsageError(f"-{'-' if name != 'n' else ''}{name} must be {'≥ 1' if name != 'warmup' else '≥ 0'}")
    if args.events and args.json is None:
        raise UsageError("--events goes with --json FILE")
    if args.read_only:
        raise UsageError("--read-only: a bench changes TPM state (PCR extends, sessions); refusing")
    check_pcr(args.pcr, args.allow_pcr)
    return BenchPlan(op=args.op, modes=parse_list(args.modes, MODES, "mode"),
                     engines=parse_list(args.engine, ENGINES, "engine"), n=args.n, warmup=args.warmup,
                     batch=args.batch, pcr=args.pcr, param_encryption=not args.no_param_encryption,
                     allow_pcr=args.allow_pcr)


def format_table(accounts: Sequence[RunAccount], gaps: GapsFn | None = None,
                 estimates: EstimatesFn | None = None) -> str:
    """``gaps``: a run's commands a chip profile did not cover (tpmtop.profiles.apply.gaps):
    such a row says which ran at swtpm speed, and a ratio that depends on one is marked. An op
    p99 from fewer than 100 operations is not shown as a figure (:func:`tpmtop.stats.judged`).
    ``estimates``: a run's commands whose profile latency is an estimate
    (tpmtop.profiles.apply.estimated): its mode is marked "*" (the footnote says which)."""
    from tpmtop.cli.common import table
    from tpmtop.stats import tail_cell, tail_note

    base = {a.engine: a.op_hist.percentile_ns(50) for a in accounts if a.mode == "none"}
    missing = {id(a): gaps(a.commands) if gaps else [] for a in accounts}
    base_gap = {a.engine: bool(missing[id(a)]) for a in accounts if a.mode == "none"}
    rows = []
    counts = []
    for a in accounts:
        s, w, h = a.op_hist.summary(), a.wire_hist.summary(), a.host_hist.summary()
        counts.append(s["count"])
        ratio = ""
        if base.get(a.engine):
            ratio = f"{a.op_hist.percentile_ns(50) / base[a.engine]:.1f}x"
            if missing[id(a)] or base_gap.get(a.engine):
                ratio += " (not the chip's)"
        cmds = sum(a.commands.values()) / a.ops if a.ops else 0
        marked = bool(estimates and estimates(a.commands, a.mode))
        row = [a.engine, a.mode + ("*" if marked else ""), str(a.ops), f"{1e6 / s['mean']:.0f}" if s["mean"] else "-",
               _us(s["p50"]), tail_cell(s, fmt=_us), _us(w["p50"]), _us(h["p50"]),
               f"{cmds:g}", ratio]
        if gaps is not None:
            row.append(", ".join(c.removeprefix("TPM2_CC_") for c in missing[id(a)]) + " at swtpm speed"
                       if missing[id(a)] else "")
        rows.append(row)
    header = ["engine", "mode", "ops", "ops/s", "op p50", "op p99", "wire p50", "host p50", "cmds/op", "vs none"]
    if gaps is not None and any(missing.values()):
        header.append("not in the profile")
    else:
        rows = [r[:10] for r in rows]
    note = tail_note(*counts, column="op p99")
    return table(rows, header, right={2, 3, 4, 5, 6, 7, 8, 9}) + (f"\n{note}" if note else "")


def hist_texts(accounts: Sequence[RunAccount]) -> str:
    """Each run's operation latencies in bpftrace's hist() layout, one map per (engine, mode)."""
    from tpmtop.stats import hist_text, pow2_slots

    return "\n".join(hist_text(pow2_slots(a.op_hist), f"@{a.op}_us[{a.engine}, {a.mode}]") for a in accounts)


def plot_series(accounts: Sequence[RunAccount]) -> list[Series]:
    from tpmtop.cli.plot import Series

    base = {a.engine: a.op_hist.percentile_ns(50) for a in accounts if a.mode == "none"}
    out = []
    for a in accounts:
        s = a.op_hist.summary()
        b = base.get(a.engine)
        out.append(Series(f"{a.engine}/{a.mode}", s["p50"], s["p90"], s["p99"], a.op_hist.buckets(per_decade=8),
                          a.op_hist.percentile_ns(50) / b if b else None, per_decade=8))
    return out


def _us(v: float) -> str:
    if v >= 10_000:
        return f"{v / 1000:.1f} ms"
    if v >= 1000:
        return f"{v / 1000:.2f} ms"
    return f"{v:.0f} µs"


def run_bench(args: argparse.Namespace) -> int:
    from tpmtop.bench import run_bench as _run
    from tpmtop.bench import write_capture_file
    from tpmtop.capture import build_capture
    from tpmtop.cli.common import is_stdout, notice, tpm_from_args
    from tpmtop.errors import EXIT_FAILURE, EXIT_INTERRUPTED

    plan = _plan(args)
    # The output files are checked before the TPM is opened: a typo in a path must not cost
    # the whole run (exit 2, one line). Writing may still fail at the end (disk full): then
    # the data is kept in a fallback file named on stderr (exit 1).
    from tpmtop.errors import UsageError
    from tpmtop.output import Output

    json_out = Output(args.json, what="--json", big=True).check() if args.json is not None else None
    om_out = Output(args.openmetrics, what="--openmetrics").check() if args.openmetrics is not None else None
    if args.json is not None and args.json == args.openmetrics:
        raise UsageError("--json and --openmetrics name the same file")
    from tpmtop.cli import plot

    plot.check(args.plot)  # before the TPM is opened: a missing matplotlib must not cost the run
    # With a data file on stdout (-, or /dev/stdout and the like: the same open file), the report
    # goes to stderr so that stdout stays parseable.
    report = sys.stderr if any(is_stdout(p) for p in (args.json, args.openmetrics)) else sys.stdout
    # issue 7: checked (and the file validated) before the TPM is opened: refused on real hardware.
    from tpmtop.profiles.apply import apply_profile, describe, profile_from_args

    profile = profile_from_args(args)
    from tpmtop.cli.progress import Bar

    progress = Bar("bench", plan.n * len(plan.pairs), "ops", quiet=args.quiet)
    with tpm_from_args(args) as conn:
        apply_profile(conn, profile, getattr(args, "seed", None))
        ident = conn.identity()
        print(f"# {ident.manufacturer} {ident.vendor} fw {ident.firmware} via {conn.target.tcti}"
              f"{' (simulated)' if conn.simulated else ''}; op {plan.op}, PCR {plan.pcr}, "
              f"n={plan.n}, warmup={plan.warmup}, batch={plan.batch}", file=report)
        if profile is not None:
            print(f"# {describe(profile, getattr(args, 'seed', None))}", file=report)
        report.flush()
        if args.events:
            cast("Recorder", conn.recorder).reset_stats()
        try:
            result = _run(conn, plan, progress=progress, keep_ops=args.events, notice=notice)
        finally:
            progress.close()
        from tpmtop.profiles.apply import gaps

        def run_gaps(commands: Iterable[int | str | None]) -> list[str]:
            return gaps(conn, commands)

        gap_of = run_gaps if profile is not None else None
        from tpmtop.profiles.apply import estimated

        def run_estimates(commands: Iterable[int | str | None], mode: str) -> list[str]:
            return estimated(profile, commands, mode)

        est_of = run_estimates if profile is not None else None
        for i, period in enumerate(result.periods):
            print(f"## period {i + 1}, ended by: {result.resets[i]}", file=report)
            print(format_table(period, gap_of, est_of), file=report)
        if result.periods:
            print(f"## period {len(result.periods) + 1}, after the TPM reset", file=report)
        if result.accounts:
            print(format_table(result.accounts, gap_of, est_of), file=report)
        if profile is not None and any(estimated(profile, a.commands, a.mode) for a in result.accounts):
            print(f"# *: not only the chip's published figures (`tpmtop profile show {profile.name}`):",
                  file=report)
        for a in result.accounts:
            est = estimated(profile, a.commands, a.mode)
            if est:  # the row is not all the chip's published figures: say which are estimates
                print(f"# {a.mode}*: {', '.join(est)}", file=report)
        unheld = gaps(conn, {c for a in result.accounts for c in a.commands})
        if profile is not None and unheld:
            print(f"# not in profile {profile.name}, so at swtpm speed (the simulator's, not the chip's): "
                  f"{', '.join(c.removeprefix('TPM2_CC_') for c in unheld)}; a ratio marked \"not the chip's\" "
                  "depends on them", file=report)
        if args.hist:
            print(file=report)
            print(hist_texts(result.accounts), end="", file=report)
        if args.plot and result.accounts:
            plot.draw(args.plot, plot_series(result.accounts),
                      f"tpmtop bench: {plan.op} on {ident.manufacturer} fw {ident.firmware}"
                      f"{' (simulated)' if conn.simulated else ''}, n={plan.n} per mode")
            notice(f"plot written to {args.plot}")
        if result.integrity_failures:
            notice(f"{result.integrity_failures} responses failed their HMAC check and were rejected")
        if (json_out or om_out) and (result.accounts or result.periods):
            # Every command the bench sent (the null primary's probe, the reuse/saved set-ups,
            # the clean-up flushes: a pcapng export then shows where a kept session came from),
            # except the warm-up operations', which the runs do not count either.
            counted = {o[0] for o in result.ops_log}
            events = [e for e in cast("Recorder", conn.recorder).events() if e.op_seq is None or e.op_seq in counted] \
                if args.events else None
            with Bar(f"preparing the capture ({len(events):,} commands)" if events else "preparing the capture",
                     quiet=args.quiet, counted=False):
                cap = build_capture(conn, result.accounts, periods=result.periods, events=events,
                                    ops_log=result.ops_log if args.events else None,
                                    extra={"bench": {"n": plan.n, "warmup": plan.warmup, "batch": plan.batch,
                                                     "pcr": plan.pcr, "param_encryption": plan.param_encryption,
                                                     "complete": not (result.interrupted or result.error)}})
                if result.floor is not None and result.floor.blocks:
                    from tpmtop.capture.spec import MINOR

                    cap["minor"], cap["floor"] = MINOR, result.floor.to_json()
                if profile is not None:
                    for run in cap["runs"]:  # in the row itself: which of its commands are not the chip's
                        run["profile_gaps"] = gaps(conn, run.get("commands") or ())
            if json_out:
                with Bar("writing the capture", unit="lines", quiet=args.quiet) as bar:
                    write_capture_file(json_out, cap, progress=bar)
                notice(f"capture written to {'stdout' if args.json == '-' else args.json}")
            if om_out:
                from tpmtop.export.openmetrics import render

                text = render(cap)
                om_out.write_keeping(lambda: [text.encode("utf-8")], suffix=".prom", label="OpenMetrics")
                notice(f"OpenMetrics written to {'stdout' if args.openmetrics == '-' else args.openmetrics}")
    if result.interrupted:
        notice("interrupted: partial results above" + (f", saved to {args.json}" if args.json else ""))
        return EXIT_INTERRUPTED
    if result.error:
        notice(f"stopped: {result.error}")
        return EXIT_FAILURE
    return 0
