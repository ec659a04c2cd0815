"""Profiles from what tpmtop already measures: a live TPM (record), a capture, a kernel trace.

All three end in :func:`figure_from_ns`: the median of what was seen, deciles once there are
enough samples to mean something, and a histogram of the raw values. Only successful
commands count: an error response is usually fast and would drag a chip's figure down.
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tpmtop.errors import UsageError
from tpmtop.profiles.profile import ANY, HMAC_SESSION, NO_SESSION, Figure, Profile, has_hmac_session
from tpmtop.sessions.modes import OP_COMMANDS, Engine, Op
from tpmtop.tpm import names

# Below this many samples deciles are mostly noise: give the median only (no spread).
MIN_FOR_SPREAD = 10
# Commands that carry an authorization area and cost differently inside an HMAC session;
# every other command the session modes send keeps one "any" figure.
AUTHORIZED = {"PCR_Extend", "GetRandom", "CreatePrimary"}
# Wire times beyond this (146 years) are clamped: they only need to stay "very slow".
_MAX_NS = 1 << 62
# Histogram resolution for raw samples: 20 buckets per decade (12 % wide).
PER_DECADE = 20


def today() -> str:
    return _dt.date.today().isoformat()


def figure_from_ns(values_ns: Iterable[int], source: dict[str, Any]) -> Figure:
    vals = sorted(values_ns)
    med = statistics.median(vals) / 1000
    f = Figure(median_us=max(med, 0.001), source=source, samples=len(vals))
    if len(vals) >= MIN_FOR_SPREAD:
        q = statistics.quantiles(vals, n=10, method="inclusive")
        f.p10_us, f.p90_us = max(q[0] / 1000, 0.001), q[-1] / 1000
        from tpmtop.stats import LatencyHistogram

        h = LatencyHistogram()
        for v in vals:
            h.record(v)
        f.histogram = h.buckets(per_decade=PER_DECADE)
        f.min_us = max(vals[0] / 1000, 0.001)
        f.histogram[0][0] = max(f.histogram[0][0], f.min_us)
    return f


def _variant(short: str, hmac: bool) -> str:
    if short not in AUTHORIZED:
        return ANY
    return HMAC_SESSION if hmac else NO_SESSION


def profile_from_samples(name: str, chip: dict[str, Any], samples: Mapping[tuple[int, str], Sequence[int]],
                         source: dict[str, Any], description: str = "", notes: list[str] | None = None) -> Profile:
    if not samples:
        raise UsageError("nothing to build a profile from: no successful TPM commands with latencies")
    cmds: dict[int, dict[str, Figure]] = {}
    for (cc, variant), vals in sorted(samples.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if vals:
            cmds.setdefault(cc, {})[variant] = figure_from_ns(vals, dict(source))
    return Profile(name=name, chip=chip, commands=cmds, description=description, created=today(),
                   notes=notes or [])


def _add(samples: dict[tuple[int, str], list[int]], cc: int, hmac: bool, ns: int) -> None:
    samples.setdefault((cc, _variant(names.cc_short(cc), hmac)), []).append(int(ns))


# -- from recorder events (profile record) ---------------------------------------------------
def samples_from_events(events: Iterable[Any]) -> dict[tuple[int, str], list[int]]:
    out: dict[tuple[int, str], list[int]] = {}
    for ev in events:
        if ev.cc is None or ev.rc != 0 or ev.garbled or ev.error:
            continue
        _add(out, ev.cc, has_hmac_session(ev.sessions), ev.wire_ns)
    return out


def chip_from_identity(conn: Any) -> dict[str, Any]:
    ident = conn.identity()
    return {"manufacturer": ident.manufacturer, "vendor": ident.vendor, "firmware": ident.firmware,
            "simulated": conn.simulated, "tcti": conn.target.tcti}


# -- from a capture ---------------------------------------------------------------------------
def profile_from_capture(path: str, name: str) -> tuple[Profile, list[str]]:
    """Per-command events when the capture has them (exact, and they tell sessions apart);
    else the runs' per-command histograms (bucket resolution).

    Streamed: the events are read one by one (tpmtop.capture.CaptureReader) and only their
    wire times are kept, 8 bytes each in an array — a million-event capture stays far below
    200 MB instead of a gigabyte of dicts."""
    from array import array

    from tpmtop.capture import CaptureReader  # validates against capture-1.json
    from tpmtop.textsafe import safe_tree

    samples: dict[tuple[int, str], Any] = {}  # key -> array("q") of wire ns
    cc_of: dict[str, int | None] = {}
    hmac_of: dict[bytes, bool] = {}

    def on_event(e: Any) -> None:  # a typed event (tpmtop.capture.spec.EventLine)
        if e.rc != 0:
            return
        cc = cc_of.get(e.command, -1)
        if cc == -1:
            cc = cc_of[e.command] = names.cc_from_name(e.command)
        if cc is None:
            return
        raw = bytes(e.sessions)
        hmac = hmac_of.get(raw)
        if hmac is None:
            sess = [(int(s["handle"], 16), s.get("attrs", 0)) for s in json.loads(raw)
                    if isinstance(s, dict) and isinstance(s.get("handle"), str)]
            hmac = hmac_of[raw] = has_hmac_session(sess)
            if len(hmac_of) > 10_000:  # ever-new session handles must not grow memory
                hmac_of.clear()
        key = (cc, _variant(names.cc_short(cc), hmac))
        a = samples.get(key)
        if a is None:
            a = samples[key] = array("q")
        w = e.wire_ns
        a.append(w if w < _MAX_NS else _MAX_NS)  # schema-valid but absurd (centuries): clamped

    cap = safe_tree(CaptureReader(path, on_event=on_event, on_op=lambda op: None, typed=True).read())
    tpm = cap.get("tpm") or {}
    warnings = []
    if tpm.get("profile"):
        warnings.append(f"{path} was itself recorded under profile '{tpm['profile']}': "
                        "the result describes that profile, not a chip")
    chip = {k: tpm[k] for k in ("manufacturer", "vendor", "firmware", "simulated", "tcti") if k in tpm}
    date = str(cap.get("created", ""))[:10] or None
    src = {"kind": "capture", "file": path, **({"date": date} if date else {})}
    host = cap.get("host") or {}
    where = f"{tpm.get('manufacturer', '?')} via {tpm.get('tcti', '?')} on {host.get('hostname', '?')}"
    if samples:
        src["detail"] = f"median of the capture's per-command wire latencies ({where})"
        return profile_from_samples(name, chip, samples, src, f"derived from capture {path}"), warnings
    prof = _profile_from_runs(cap, name, chip, src, where, path)
    return prof, warnings + ["the capture has no per-command events (bench --json FILE --events gives them): "
                             "figures come from the runs' histograms, 4 buckets per decade"]


def _profile_from_runs(cap: dict[str, Any], name: str, chip: dict[str, Any], src: dict[str, Any], where: str,
                       path: str) -> Profile:
    # Per key: the runs' exact p50s with their counts, and the buckets summed bound by bound
    # (captures bucket on fixed log bounds, so summing counts is an exact merge).
    p50s: dict[tuple[int, str], list[tuple[float, int]]] = {}
    buckets: dict[tuple[int, str], dict[float, int]] = {}
    for run in cap.get("runs") or []:
        op_cc = OP_COMMANDS.get(run.get("op"))
        for cname, summ in (run.get("commands") or {}).items():
            cc = names.cc_from_name(cname)
            if cc is None or not summ.get("count"):
                continue
            short = names.cc_short(cc)
            # In a run, only the operation's own command carries the HMAC session, and only
            # outside mode "none"; set-up commands (ContextLoad, …) never carry one.
            hmac = short == op_cc and run.get("mode") != "none"
            key = (cc, _variant(short, hmac))
            p50s.setdefault(key, []).append((float(summ["p50"]), int(summ["count"])))
            b = buckets.setdefault(key, {})
            for bound, count in summ.get("histogram") or []:
                b[float(bound)] = b.get(float(bound), 0) + int(count)
    if not p50s:
        raise UsageError(f"{path}: no per-command latencies in this capture")
    cmds: dict[int, dict[str, Figure]] = {}
    for key, meds in p50s.items():
        # The count-weighted median of the runs' medians: exact when one run has the command.
        meds.sort()
        total, acc = sum(c for _, c in meds), 0
        med = meds[-1][0]
        for m, c in meds:
            acc += c
            if acc * 2 >= total:
                med = m
                break
        hist = [[b, c] for b, c in sorted(buckets[key].items()) if c]
        how = "its p50" if len(meds) == 1 else f"the count-weighted median of {len(meds)} runs' p50s"
        f = Figure(median_us=max(med, 0.001), samples=total,
                   source=dict(src, detail=f"from the capture's per-command summaries, {how}; spread from its "
                                           f"histograms, 4 buckets per decade ({where})"))
        if hist:
            f.histogram = hist
            f.min_us = round(hist[0][0] / 10 ** 0.25, 3)  # capture buckets are 10**(1/4) wide
        cmds.setdefault(key[0], {})[key[1]] = f
    return Profile(name=name, chip=chip, commands=cmds, description=f"derived from capture {path}", created=today())


# -- from kernel traces -------------------------------------------------------------------------
def profile_from_traces(paths: list[str], name: str, calls: int | None = None,
                        unit: str | None = None) -> tuple[Profile, list[str]]:
    try:
        from tpmtop.boot.series import OP_EXTEND_HMAC
        from tpmtop.boot.traces import load_trace
    except ImportError:
        raise UsageError("profile from-trace needs tpmtop's trace parsers (tpmtop/boot/traces.py), "
                         "which this installation lacks") from None
    cmds: dict[int, dict[str, Figure]] = {}
    warnings: list[str] = []
    for path in paths:
        tr = load_trace(path, unit=unit)
        for op, series in tr.operations.items():
            hmac = op == OP_EXTEND_HMAC or (op == "GetRandom" and tr.hmac_seen)
            short = op.split(" ")[0]
            cc = names.cc_from_name(short)
            if cc is None:
                warnings.append(f"{path}: '{op}' is not a TPM command tpmtop knows; skipped")
                continue
            variant = _variant(short, hmac)
            src = {"kind": "trace", "file": path}
            if series.precision == "exact":
                calls_text = "1 call" if len(series.samples_ns) == 1 else f"median of {len(series.samples_ns)} calls"
                f = figure_from_ns(series.samples_ns, dict(src, detail=f"{tr.format} trace: {calls_text}"))
            else:
                per, how = series.per_call_ns(calls)
                if per is None:
                    raise UsageError(f"{path}: {op}: {how.replace('--bpftrace-calls', '--calls')}")
                f = Figure(median_us=per / 1000, source=dict(src, detail=f"{tr.format} trace: {how}"))
                if series.precision == "sum":
                    f.source["detail"] += " (a mean, not a median: the trace kept only sums)"
            if variant in cmds.get(cc, {}):
                old = cmds[cc][variant]
                warnings.append(f"{path}: {op} also in {old.source.get('file')}: keeping the later one")
            cmds.setdefault(cc, {})[variant] = f
        warnings += [f"{path}: {n}" for n in tr.notes]
    if not cmds:
        raise UsageError(f"{', '.join(paths)}: no TPM commands with durations in the trace(s)")
    return Profile(name=name, chip={}, commands=cmds, created=today(),
                   description=f"derived from kernel trace(s): {', '.join(paths)}"), warnings


# -- from a live TPM ---------------------------------------------------------------------------
RECORD_OPS = (Op.EXTEND, Op.GET_RANDOM)


def record(conn: Any, n: int, pcr: int, ops: Sequence[str] = RECORD_OPS, warmup: int = 2,
           progress: Callable[[int, int], None] | None = None) -> tuple[Profile, object]:
    """Characterise the connected TPM: every session mode of each op, native engine (its wire
    traffic is the same as ESAPI's and it adds no host work between commands).

    Returns (profile, last bench result). Warm-up operations run but are not counted: the
    first commands on a fresh connection pay for caches that a chip in use has warm.
    """
    from tpmtop.bench import BenchPlan, run_bench
    from tpmtop.errors import TpmtopError
    from tpmtop.sessions.modes import MODES

    plans = [BenchPlan(op=op, modes=list(MODES), engines=[Engine.NATIVE], n=n, warmup=warmup, batch=max(1, min(10, n)),
                       pcr=pcr) for op in ops]
    total = sum(p.n * len(p.pairs) for p in plans)
    done_before = 0
    start_seq = conn.recorder.total  # every command so far has a seq ≤ this
    result = None
    for plan in plans:
        def prog(done: int, _t: int, base: int = done_before) -> None:
            if progress:
                progress(base + done, total)

        result = run_bench(conn, plan, progress=prog)
        done_before += plan.n * len(plan.pairs)
        if result.interrupted:
            raise KeyboardInterrupt
        if result.error:
            raise TpmtopError(f"profile record stopped: {result.error}")
    evs = [e for e in conn.recorder.events_since(start_seq) if e.origin == "workload" and e.op_seq is not None]
    # Drop each (mode, op)'s warm-up operations: they are the first `warmup` op_seqs of it.
    seen: dict[tuple[Any, Any], list[int]] = {}
    for e in evs:
        lst = seen.setdefault((e.mode, e.op), [])
        if not lst or lst[-1] != e.op_seq:
            lst.append(e.op_seq)
    skip = {s for lst in seen.values() for s in lst[:warmup]}
    counted = [e for e in evs if e.op_seq not in skip]
    chip = chip_from_identity(conn)
    src = {"kind": "recorded", "date": today(),
           "detail": f"tpmtop profile record: {chip.get('manufacturer')} {chip.get('vendor', '')} "
                     f"via {chip.get('tcti')}, {n} operations per session mode and op ({', '.join(ops)})"}
    prof = profile_from_samples("recorded", chip, samples_from_events(counted), src,
                                description=f"recorded from {chip.get('tcti')}")
    return prof, result
