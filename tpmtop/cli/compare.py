"""``tpmtop compare A.json B.json [...]``: before/after, p50/p99 side by side."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

HELP_RULE = """Each capture after the first is compared with the first (the baseline): for every
(engine, mode, op) present in both, the whole operation and every command code present in both.
Ratio is later/baseline: above 1 means slower.

Verdict (noise rule): for a percentile p of n samples the distribution-free 95 % confidence
interval spans the samples of rank n*p -/+ 1.96*sqrt(n*p*(1-p)) (binomial order statistics,
no assumption about the shape of the distribution), read from each capture's histogram and
centred on the capture's exact p50; for p99 the interval is widened to whole histogram
buckets (1.78x wide), because interpolation in the sparse tail is too optimistic. Only
when the two intervals do not overlap is a difference called "slower" or "faster"; otherwise
"within noise". A percentile is judged only when both captures hold enough samples for its
interval to be closed on both sides (p50: 8, p90: 53, p99: 563); with fewer the verdict is
"too few samples (n=N < MIN)" whatever the ratio (a p99 of 20 runs is their largest one).
"no histogram": a capture without histograms; the figures of a percentile not judged are
not printed ("-").
Run-to-run noise: two identical runs on a shared machine differ by more than sampling noise,
so a difference is named only when the whole interval of the ratio B/A also lies beyond
x{min_effect} (or below its inverse), p50, and x{min_effect99}, p99: above the ratios
measured between identical `tpmtop bench` runs (docs/captures.md). Smaller changes need
repeated runs.
The floor: a bench capture (capture minor 2) carries the machine's speed
through its run, a 1-byte GetRandom's round trip timed between its rounds (never held by a
chip profile). When both captures have one, of the same TPM, compare prints "normalized by
the floor: xF" and names a change only beyond what the floor's move explains: from x1 to
xF on the whole row, or the floor's difference added to each of the row's TPM commands,
then the minimum effect above. When either side has no floor (an older capture, an
import) the rows are judged as without one, and compare says so.
A p99 is named only when the tail's body (p90) moved the same way too, beyond the floor's
band and the p50's minimum effect: between identical runs a p99 alone moved x30 when a
slow event about 1 % of the time came a little more or less often.

examples:
  tpmtop compare kernel-6.10.json kernel-6.12.json
  tpmtop compare infineon.json ftpm.json --json | jq '.comparisons[0].rows'"""


def add_compare_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.compare import MIN_EFFECT

    rule = HELP_RULE.replace("{min_effect}", f"{MIN_EFFECT[0.5]:g}").replace("{min_effect99}",
                                                                             f"{MIN_EFFECT[0.99]:g}")
    p.epilog = rule + "\n\n" + (p.epilog or "")
    p.add_argument("captures", nargs="+", metavar="CAPTURE.json",
                   help="two or more captures (tpmtop bench --json); the first is the baseline")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("--hist", action="store_true",
                   help="also print each capture's operation latencies per (engine, mode, op) as bpftrace "
                        "prints a hist() (power-of-two µs buckets), from its per-operation times (a capture "
                        "recorded with --events)")
    p.add_argument("--plot", metavar="FILE.svg|png",
                   help="draw the comparison (p50/p90/p99 bars of every capture's runs, whole "
                        "distributions) into FILE (.svg, .png, .pdf). Needs matplotlib: pip install 'tpmtop[plot]'")


def _fmt_us(v: float) -> str:
    if v >= 10_000:
        return f"{v / 1000:,.1f} ms"
    return f"{v:,.1f} µs"


def _fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"×{r:.2f}"


def _print_patterns(label: str, pats: list[dict[str, Any]]) -> None:
    from tpmtop.patterns import fmt_ms

    for p in pats:
        print(f"failure pattern in {label}: {p['title']}: {p['count']} times, "
              f"{fmt_ms(int(p['lost_ms'] * 1e6))} lost")


def run_compare(args: argparse.Namespace) -> int:
    from tpmtop.cli.common import print_json, table
    from tpmtop.compare import compare, floor_move, judged, only_in
    from tpmtop.errors import UsageError
    from tpmtop.textsafe import safe

    if len(args.captures) < 2:
        raise UsageError("compare: give at least two captures (the first is the baseline)")
    from tpmtop.cli import plot

    plot.check(args.plot)
    from tpmtop.cli.progress import Reading
    from tpmtop.patterns import summary_and_patterns

    docs, patterns = [], {}
    slots: list[dict[tuple[str, str, str], dict[int, int]]] = []  # --hist: per capture, run -> pow2 slots
    with Reading(args.captures):  # a 200 MB capture takes a while: show how far, on a terminal
        for path in args.captures:  # each read once: its summary and its events' failure patterns
            mine: dict[tuple[str, str, str], dict[int, int]] = {}
            slots.append(mine)
            doc, pats = summary_and_patterns(path, on_op=_slots_into(mine) if args.hist else None)
            docs.append(doc)
            patterns[path] = [x.to_json() for x in pats]
    base = docs[0]
    results = []
    for path, doc in zip(args.captures[1:], docs[1:], strict=False):
        moves, why = floor_move(base, doc)
        rows = compare(base, doc, moves)
        floor: dict[str, Any] = {"used": bool(moves), "why": why}
        floor |= {f"p{round(p * 100)}": m.to_json() for p, m in moves.items()}
        results.append({"baseline": args.captures[0], "capture": path, "floor": floor, "rows": rows,
                        "only_in_baseline": [list(k) for k in only_in(base, doc)],
                        "only_in_capture": [list(k) for k in only_in(doc, base)]})
    if args.plot:
        _plot(args, docs)
    if args.json:
        print_json({"schema": "tpmtop.compare/1", "comparisons": results, "patterns": patterns})
        return 0

    def who(doc: dict[str, Any], path: str) -> str:
        t, host = doc.get("tpm") or {}, doc.get("host") or {}
        # What the capture knows, and "not named"/"unknown" for what it does not (an imported
        # capture names no TPM: "( fw , kernel unknown)"). Every capture string goes through safe().
        tpm = " ".join(x for x in (str(t.get("manufacturer") or ""),
                                   f"fw {t['firmware']}" if t.get("firmware") else "") if x) or "TPM not named"
        return safe(f"{path}  ({tpm}, kernel {host.get('kernel') or 'unknown'})")

    for res, doc in zip(results, docs[1:], strict=False):
        print(f"A: {who(base, res['baseline'])}")
        print(f"B: {who(doc, res['capture'])}")
        print(_floor_text(res["floor"]))
        if not res["rows"]:
            print("no (engine, mode, op) in common: nothing to compare")
            _print_patterns("A", patterns[res["baseline"]])
            _print_patterns("B", patterns[res["capture"]])
            print()
            continue
        out = []
        for r in res["rows"]:
            if r["kind"] == "operation":
                what = f"{r['engine']}/{r['mode']}/{r['op']}"
            else:
                what = f"  {r['command'].removeprefix('TPM2_CC_')}"
            cells = [safe(what), f"{r['count'][0]}/{r['count'][1]}"]
            for pn in ("p50", "p99"):
                v = r[f"{pn}_verdict"]
                # a percentile too few samples cannot judge is not printed beside that verdict
                shown = judged(v) or v == "no histogram"
                cells += [_fmt_us(r[pn][0]) if shown else "-", _fmt_us(r[pn][1]) if shown else "-",
                          _fmt_ratio(r[f"{pn}_ratio"]) if shown else "-", v]
            out.append(cells)
        print(table(out, ["operation / command", "n A/B", "p50 A", "p50 B", "B/A", "p50 verdict",
                          "p99 A", "p99 B", "B/A", "p99 verdict"], right={1, 2, 3, 4, 6, 7, 8}))
        for label, keys in (("only in A", res["only_in_baseline"]), ("only in B", res["only_in_capture"])):
            if keys:
                print(f"{label}: " + safe(", ".join("/".join(k) for k in keys)))
        _print_patterns("A", patterns[res["baseline"]])
        _print_patterns("B", patterns[res["capture"]])
        print()
    if args.hist:
        _print_hists(args.captures, docs, slots)
    return 0


def _floor_text(floor: dict[str, Any]) -> str:
    """Lines (80 columns) on the floor: its move and what a row must exceed."""
    from tpmtop.compare import min_effect

    lines = []
    for pn, p in (("p50", 0.5), ("p99", 0.99)):
        f = floor.get(pn)
        if f:
            lo, hi = sorted((1.0, f["ratio"]))
            lines.append(f"normalized by the floor: ×{f['ratio']:.2f} at {pn} (A {_fmt_us(f['a_us'])}, "
                         f"B {_fmt_us(f['b_us'])})\n  a {pn} is judged beyond ×{lo:.2f}–×{hi:.2f} or "
                         f"{f['b_us'] - f['a_us']:+,.1f} µs a command, then ×{min_effect(p):g}")
    if floor["why"]:
        lines.append(str(floor["why"]))
    return "\n".join(lines)


def _slots_into(into: dict[tuple[str, str, str], dict[int, int]]) -> Callable[[Any], None]:
    from tpmtop.stats import pow2_index

    def one(o: Any) -> None:  # a typed operation line
        if o.ok:
            d = into.setdefault((o.engine, o.mode, o.op), {})
            i = pow2_index(o.total_ns // 1000)
            d[i] = d.get(i, 0) + 1

    return one


def _print_hists(paths: list[str], docs: list[dict[str, Any]], slots: list[dict[Any, Any]]) -> None:
    """bpftrace's hist() of every capture's runs, the capture named by its letter (A, B …)."""
    from tpmtop.stats import hist_text
    from tpmtop.textsafe import safe

    for n, (path, doc, mine) in enumerate(zip(paths, docs, slots, strict=True)):
        letter = _letter(n)
        if not mine:
            print(f"{letter}: {safe(path)} holds no per-operation times (record with --events): no histogram\n")
            continue
        print(f"{letter}: {safe(path)}")
        # The summary's runs in its order, then operations of a run the summary does not list.
        listed = [k for k in dict.fromkeys((r["engine"], r["mode"], r["op"]) for r in doc["runs"]) if k in mine]
        for key in listed + [k for k in mine if k not in listed]:
            print(hist_text(mine[key], safe(f"@{key[2]}_us[{letter}, {key[0]}, {key[1]}]")))


def _letter(n: int) -> str:
    return chr(ord("A") + n) if n < 26 else f"#{n + 1}"


def _plot(args: argparse.Namespace, docs: list[dict[str, Any]]) -> None:
    from tpmtop.cli import plot
    from tpmtop.cli.common import notice

    series = []
    for n, doc in enumerate(docs):
        base = {r["engine"]: r["op_us"]["p50"] for r in doc["runs"] if r["mode"] == "none"}
        for r in doc["runs"]:
            s = r["op_us"]
            b = base.get(r["engine"])
            series.append(plot.Series(f"{_letter(n)} {r['engine']}/{r['mode']}/{r['op']}", s["p50"], s.get("p90"),
                                      s["p99"], s.get("histogram") or [], s["p50"] / b if b else None))
    names = " vs ".join(f"{_letter(n)} {os.path.basename(p)}" for n, p in enumerate(args.captures))
    plot.draw(args.plot, series, f"tpmtop compare: {names}")
    notice(f"plot written to {args.plot}")
