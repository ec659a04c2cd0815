"""Building a ``tpmtop.capture/1`` document from a run: the one builder that ``tpmtop bench
--json`` and the dashboard's export key both use.

It reads the recorder only through its public read API (``events()``, ``marks``,
``started_ns``) and the connection's ``tpm_json()``, so the recorder's internals (how the
transport hands exchanges over, when they are decoded) can change without touching captures.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import time
from typing import Any

from tpmtop.capture.spec import SCHEMA_ID


def capture_head(tpm: dict[str, Any], runs: list[dict[str, Any]], *, recorded_here: bool = True,
                 tuned: bool | None = None) -> dict[str, Any]:
    """The members every capture starts with (schema, created, tool, host, tpm, runs, and
    tuning): the one place they are written, for a run of tpmtop's and for observed traffic
    alike. ``recorded_here`` False: the traffic was recorded elsewhere (an imported pcap), so neither
    this machine's CPU count nor this process's tuning knobs (:mod:`tpmtop.settings`) shaped
    it, and neither is written. ``tuned`` (default: ``recorded_here``): whether tpmtop's own
    transport carried the traffic, so that its knobs shaped it (the lab's guests)."""
    from tpmtop import __version__
    from tpmtop.settings import in_force

    host: dict[str, object] = {"hostname": socket.gethostname(), "kernel": platform.release(),
                               "machine": platform.machine()}
    if recorded_here:
        host["cpus"] = os.cpu_count()
    head: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "tool": {"version": __version__},
        "host": host,
    }
    if recorded_here if tuned is None else tuned:
        head["tuning"] = in_force()  # the knobs in force for this run: two captures differ by them too
    return head | {"tpm": tpm, "runs": runs}


def build_capture(conn: Any, accounts: list[Any], *, events: list[Any] | None = None, ops_log: list[Any] | None = None,
                  extra: dict[str, Any] | None = None, periods: list[list[Any]] | None = None) -> dict[str, Any]:
    """The capture document (validated when written; see tpmtop/schema/capture-1.json).

    ``accounts``: the run accounts (``to_json()`` gives a run); ``events``: recorder events to
    include (None: no ``events``/``ops`` members); ``ops_log``: the workload's operations.
    After a TPM reset the runs of each period are kept apart: every run then carries
    ``period`` (0 = before the first reset) and ``marks`` says when and why.
    """
    cap = capture_head(conn.tpm_json(), [a.to_json() for a in accounts])
    if periods:
        cap["runs"] = [a.to_json() | {"period": i} for i, p in enumerate(periods) for a in p] + \
                      [a.to_json() | {"period": len(periods)} for a in accounts]
    if extra:
        cap.update(extra)
    ops = [_op_tuple(o) for o in ops_log or ()]
    # One time origin for events, operations and marks: the earliest of them.
    starts = ([events[0].t_ns] if events else []) + ([ops[0][4]] if ops else [])
    recorder = conn.recorder
    t0 = min(starts) if starts else recorder.started_ns
    marks = list(recorder.marks)
    if marks:
        cap["marks"] = [{"t_ns": max(t - t0, 0), "text": text} for t, text in marks]
    if events is not None:
        # the wall clock at t_ns 0 (both clocks read now: the monotonic offset is exact), so a
        # reader can say when each event happened (tpmtop health's failure lines)
        cap["t0_wall"] = _dt.datetime.fromtimestamp(time.time() - (time.perf_counter_ns() - t0) / 1e9,
                                                    _dt.UTC).isoformat(timespec="milliseconds")
        cap["events"] = events_json(events, t0)
        # The bytes the recorder kept (for pcapng export and decode) and each event's client.
        attach_raw_bytes(cap, events, t0)
        cap["ops"] = [{"op_seq": s, "engine": _s(e), "mode": _s(m), "op": _s(o), "t_ns": t - t0, "total_ns": tot,
                       "wire_ns": w, "ok": bool(ok)} for (s, e, m, o, t, tot, w, ok) in ops if t >= t0]
    return cap


from tpmtop.capture.event_bytes import attach_raw_bytes  # noqa: E402 - beside its one caller


def _op_tuple(o: Any) -> tuple[Any, ...]:
    """An entry of the workload's ops log: (op_seq, engine, mode, op, t_ns, total_ns, wire_ns, ok)."""
    if isinstance(o, tuple):
        return o
    return (o.op_seq, o.engine, o.mode, o.op, o.t_ns, o.total_ns, o.wire_ns, bool(o.ok))


def events_json(events: list[Any], t0_ns: int | None = None) -> list[dict[str, Any]]:
    """Recorder events as capture ``events`` elements; ``t_ns`` becomes an offset from
    ``t0_ns`` (default: the first event). Events before ``t0_ns`` are dropped: offsets are
    non-negative by the schema."""
    from tpmtop.tpm import names

    if not events:
        return []
    if t0_ns is None:
        t0_ns = events[0].t_ns
    cc_name = names.cc_name
    rc_text = names.rc_text  # cached by rc
    cc_cache: dict[int | None, str] = {}
    h_cache: dict[int, str] = {}

    def hx(h: int) -> str:
        s = h_cache.get(h)
        if s is None:
            s = h_cache[h] = f"0x{h:08x}"
        return s

    out: list[dict[str, Any]] = []
    append = out.append
    for ev in events:
        t = ev.t_ns - t0_ns
        if t < 0:
            continue
        cc = ev.cc
        name = cc_cache.get(cc)
        if name is None:
            name = cc_cache[cc] = cc_name(cc)
        append({
            "t_ns": t, "command": name,
            "handles": [hx(h) for h in ev.handles] if ev.handles else [],
            "sessions": [{"handle": hx(sh), "attrs": a} for sh, a in ev.sessions] if ev.sessions else [],
            "rc": ev.rc, "rc_text": ev.error or rc_text(ev.rc), "wire_ns": ev.wire_ns,
            "origin": str(ev.origin), "engine": _s(ev.engine), "mode": _s(ev.mode), "op": _s(ev.op),
            "op_seq": ev.op_seq,
        })
    return out


def _s(v: Any) -> str | None:
    # Labels may be enums (str subclasses) or plain strings; a capture holds their text.
    return None if v is None else str(getattr(v, "value", v))
