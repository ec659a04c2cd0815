"""What the dashboard shows, as plain data: built from a live recorder and session engine, or
from a capture, by the same functions. No Textual here, so the numbers on screen can be
tested without a terminal and a replayed capture goes through the code a live run does.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from tpmtop.tpm import names

EMPTY = {"count": 0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0}


def fmt_us(us: float | None) -> str:
    """Microseconds for a table cell: 87.4, 4,321, 1.52 s. Blank for no data."""
    if us is None:
        return ""
    if us >= 1_000_000:
        return f"{us / 1e6:.2f} s"
    if us >= 1000:
        return f"{us:,.0f}"
    return f"{us:.1f}"


def fmt_age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"


# -- cached histogram reads ---------------------------------------------------------------------
# hdrh walks its counts array in Python: one summary() costs ~1 ms, and a dashboard reads a
# dozen histograms per refresh. A histogram whose count did not change has the same summary,
# so reads are cached by (histogram, count) — a paused dashboard then costs nearly nothing.
_cache: dict[tuple[int, str], tuple[object, int, object]] = {}


def _cached(h, what: str, compute):
    n = h.count
    key = (id(h), what)
    hit = _cache.get(key)
    if hit is not None and hit[0] is h and hit[1] == n:
        return hit[2]
    if len(_cache) > 4096:
        _cache.clear()
    value = compute()
    _cache[key] = (h, n, value)
    return value


def summary_of(h) -> dict:
    return _cached(h, "summary", h.summary)


def buckets_of(h) -> Callable[[], list]:
    return lambda: _cached(h, "buckets", h.buckets)


# -- latency rows -------------------------------------------------------------------------------
@dataclass
class CommandRow:
    key: str  # stable row key: "cc:0x00000182", "op:total"
    label: str
    summary: dict
    last_us: float | None = None
    errors: int = 0
    buckets: Callable[[], list] | list | None = None  # [[upper_bound_us, count], …]
    recent_us: list[float] = field(default_factory=list)

    def histogram(self) -> list:
        b = self.buckets
        return b() if callable(b) else list(b or [])


def command_rows_live(recorder, origin: str = "workload") -> list[CommandRow]:
    rows = []
    for cc, st in sorted(recorder.command_stats(origin).items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        rows.append(CommandRow(
            key=f"cc:{cc if cc is not None else -1}", label=names.cc_short(cc), summary=summary_of(st.hist),
            last_us=st.last_ns / 1000 if st.last_ns else None, errors=st.errors, buckets=buckets_of(st.hist),
            recent_us=[v / 1000 for v in list(st.recent)]))
    return rows


def command_rows_run(run: "RunView") -> list[CommandRow]:
    rows = []
    for name, d in sorted(run.commands.items(), key=lambda kv: names.cc_from_name(kv[0]) or 0):
        cc = names.cc_from_name(name)
        rows.append(CommandRow(key=f"cc:{cc if cc is not None else name}", label=name.removeprefix("TPM2_CC_"),
                               summary={k: d.get(k, 0) for k in EMPTY}, buckets=d.get("histogram") or [],
                               recent_us=list(d.get("recent_us") or [])))
    return rows


def op_rows(run: "RunView | None") -> list[CommandRow]:
    """Operation-level rows: total / wire / host time of the current (engine, mode, op)."""
    if run is None:
        return []
    return [CommandRow("op:total", f"▸ {run.op} (op)", run.op_us, buckets=run.op_buckets),
            CommandRow("op:wire", "  wire (TPM)", run.wire_us, buckets=run.wire_buckets),
            CommandRow("op:host", "  host", run.host_us, buckets=run.host_buckets)]


# -- runs (one per engine, mode, op) ------------------------------------------------------------
@dataclass
class RunView:
    engine: str
    mode: str
    op: str
    ops: int
    op_us: dict
    wire_us: dict
    host_us: dict
    commands_per_op: dict[str, float]
    commands: dict[str, dict]  # spec name -> summary (+ "histogram")
    op_buckets: Callable[[], list] | list | None = None
    wire_buckets: Callable[[], list] | list | None = None
    host_buckets: Callable[[], list] | list | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.engine, self.mode, self.op)

    @property
    def commands_total(self) -> float:
        return sum(self.commands_per_op.values())


def run_from_account(key: tuple[str, str, str], acc) -> RunView:
    engine, mode, op = key
    ops = int(getattr(acc, "ops", 0) or 0)
    cmds = dict(getattr(acc, "commands", {}) or {})
    hists = dict(getattr(acc, "command_hists", {}) or {})
    return RunView(
        engine, mode, op, ops, summary_of(acc.op_hist), summary_of(acc.wire_hist), summary_of(acc.host_hist),
        commands_per_op={names.cc_name(cc): n / ops for cc, n in cmds.items()} if ops else {},
        commands={names.cc_name(cc): summary_of(h) | {"histogram": buckets_of(h)} for cc, h in hists.items()},
        op_buckets=buckets_of(acc.op_hist), wire_buckets=buckets_of(acc.wire_hist),
        host_buckets=buckets_of(acc.host_hist))


def runs_from_accounts(accounts: dict) -> list[RunView]:
    return [run_from_account(k, a) for k, a in list(accounts.items()) if getattr(a, "ops", 0)]


def run_from_capture(r: dict) -> RunView:
    def summ(d):
        d = d or {}
        return {k: d.get(k, 0) for k in EMPTY}

    commands = {}
    for name, d in (r.get("commands") or {}).items():
        commands[name] = summ(d) | {"histogram": d.get("histogram") or []}
    return RunView(str(r.get("engine", "?")), str(r.get("mode", "?")), str(r.get("op", "?")),
                   int(r.get("ops", 0) or 0), summ(r.get("op_us")), summ(r.get("wire_us")),
                   summ(r.get("host_us")), dict(r.get("commands_per_op") or {}), commands,
                   op_buckets=(r.get("op_us") or {}).get("histogram") or [],
                   wire_buckets=(r.get("wire_us") or {}).get("histogram") or [],
                   host_buckets=(r.get("host_us") or {}).get("histogram") or [])


@dataclass
class CompareRow:
    engine: str
    mode: str
    p50_us: float
    ratio: float | None  # to `none` of the same engine and op
    ops: int
    commands_per_op: float


def comparison(runs: list[RunView], op: str, modes_order: tuple[str, ...]) -> list[CompareRow]:
    """For each (engine, mode) run of ``op``: its operation p50 and the ratio to ``none``."""
    mine = [r for r in runs if r.op == op and r.ops]
    base = {r.engine: r.op_us["p50"] for r in mine if r.mode == "none" and r.op_us["p50"]}
    order = {m: i for i, m in enumerate(modes_order)}
    engines = {"native": 0, "esys": 1}
    mine.sort(key=lambda r: (engines.get(r.engine, 9), r.engine, order.get(r.mode, 99)))
    return [CompareRow(r.engine, r.mode, r.op_us["p50"],
                       r.op_us["p50"] / base[r.engine] if r.engine in base else None,
                       r.ops, r.commands_total) for r in mine]


# -- command stream ---------------------------------------------------------------------------
@dataclass(slots=True)
class StreamRow:
    key: str
    t: str
    origin: str
    command: str
    handles: str
    sessions: str
    rc: str
    us: str
    ok: bool

    def matches(self, needle: str) -> bool:
        n = needle.lower()
        return not n or n in self.command.lower() or n in self.origin


def _sessions_text(sessions) -> str:
    return " ".join(f"{h:08x}:{a:02x}" if h != 0x40000009 else f"PW:{a:02x}" for h, a in sessions)


def stream_row(ev, t0_ns: int) -> StreamRow:
    origin = f"client:{ev.client}" if getattr(ev, "client", None) else ev.origin  # a proxied program (tpmtop --listen)
    return StreamRow(str(ev.seq), f"{(ev.t_ns - t0_ns) / 1e9:9.3f}", origin, ev.name.removeprefix("TPM2_CC_"),
                     " ".join(f"{h:08x}" for h in ev.handles), _sessions_text(ev.sessions),
                     short_rc(ev.rc, ev.error), fmt_us(ev.wire_ns / 1000), ev.rc == 0)


def mark_row(t_ns: int, t0_ns: int, text: str) -> StreamRow:
    """A boundary in the stream (TPM reset, reconnection): origin "mark", the text as command."""
    return StreamRow(f"mark-{t_ns}", f"{(t_ns - t0_ns) / 1e9:9.3f}", "mark", text, "", "", "", "", True)


def stream_row_from_dict(i: int, e: dict) -> StreamRow:
    """An event of a capture's optional ``events`` array (tpmtop.capture/1)."""
    t = e.get("t_ns", e.get("offset_ns", e.get("t", 0))) or 0
    rc = e.get("rc")
    if isinstance(rc, str):
        try:
            rc = int(rc, 0)
        except ValueError:
            rc = None
    handles = e.get("handles") or []
    hs = " ".join(h.removeprefix("0x") if isinstance(h, str) else f"{h:08x}" for h in handles)
    sess = e.get("sessions") or []
    ss = " ".join(_session_text(s) for s in sess)
    name = str(e.get("command") or e.get("cc") or "?").removeprefix("TPM2_CC_")
    wire = e.get("wire_ns")
    origin = f"client:{e['client']}" if e.get("client") is not None else str(e.get("origin", "workload"))
    return StreamRow(str(i), f"{float(t) / 1e9:9.3f}", origin, name, hs, ss,
                     short_rc(rc, None), fmt_us(wire / 1000) if isinstance(wire, (int, float)) else "", rc == 0)


def _session_text(s) -> str:
    if isinstance(s, dict):  # tpmtop.capture/1: {"handle": "0x02000000", "attrs": 65}
        h, a = s.get("handle", "?"), s.get("attrs", 0)
    elif isinstance(s, (list, tuple)) and len(s) == 2:
        h, a = s
    else:
        return str(s)
    h = int(h, 16) if isinstance(h, str) and h.startswith("0x") else h
    if h == 0x40000009:
        return f"PW:{a:02x}" if isinstance(a, int) else f"PW:{a}"
    hs = f"{h:08x}" if isinstance(h, int) else str(h)
    return f"{hs}:{a:02x}" if isinstance(a, int) else f"{hs}:{a}"


def short_rc(rc: int | None, error: str | None) -> str:
    if error or rc is None:
        return "no response"
    if rc == 0:
        return "ok"
    text = names.rc_text(rc)
    return f"0x{rc:03x} {text.split(':')[-1].strip()[:40]}"


# -- handles ------------------------------------------------------------------------------------
@dataclass
class HandleRow:
    handle: int
    kind: str
    ours: bool
    age_s: float
    last_use_s: float | None
    uses: int
    state: str  # "new", "gone" or ""

    @property
    def key(self) -> str:
        return f"0x{self.handle:08x}"


class HandleBook:
    """The Handles panel's memory between polls: when each handle was first seen, and the
    ones that just appeared or went away (highlighted for ``HIGHLIGHT_S`` seconds)."""

    HIGHLIGHT_S = 3.0

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.first_seen: dict[int, float] = {}
        self.gone: dict[int, tuple[float, "HandleRow"]] = {}
        self.current: dict[int, tuple[str, bool]] = {}  # handle -> (kind, ours)
        self.polled = False

    def update(self, entries) -> None:
        now = self.clock()
        seen = {}
        for e in entries:
            seen[e.handle] = (e.kind, e.ours)
            self.first_seen.setdefault(e.handle, now if self.polled else now - 1e9)
            self.gone.pop(e.handle, None)
        for h in set(self.current) - set(seen):
            kind, ours = self.current[h]
            self.gone[h] = (now, HandleRow(h, kind, ours, now - self.first_seen.get(h, now), None, 0, "gone"))
            self.first_seen.pop(h, None)
        self.current = seen
        self.polled = True

    def forget(self, handle: int) -> None:
        if handle in self.current:
            kind, ours = self.current.pop(handle)
            self.gone[handle] = (self.clock(), HandleRow(handle, kind, ours, 0, None, 0, "gone"))

    def rows(self, uses: dict, owned: set[int], now_ns: int) -> list[HandleRow]:
        now = self.clock()
        out = []
        for h, (kind, ours) in self.current.items():
            u = uses.get(h)
            first = self.first_seen.get(h, now)
            age = (now_ns - u.first_seen_ns) / 1e9 if u is not None else now - first
            if first < now - 1e8:  # there before tpmtop started: its age is unknown
                age = float("nan") if u is None else age
            state = "new" if now - first < self.HIGHLIGHT_S else ""
            out.append(HandleRow(h, kind, ours or h in owned, age,
                                 (now_ns - u.last_use_ns) / 1e9 if u is not None else None,
                                 u.uses if u is not None else 0, state))
        for h, (t, row) in list(self.gone.items()):
            if now - t > self.HIGHLIGHT_S:
                del self.gone[h]
            else:
                out.append(row)
        out.sort(key=lambda r: r.handle)
        return out


# -- resources ----------------------------------------------------------------------------------
@dataclass
class Gauge:
    label: str
    used: int
    total: int
    note: str = ""

    @property
    def fraction(self) -> float:
        return self.used / self.total if self.total else 0.0

    @property
    def level(self) -> str:
        f = self.fraction
        return "full" if f >= 1.0 else "warn" if f >= 0.66 else "ok"


def gauges(var: dict, fixed: dict, gap: int | None, transient_loaded: int) -> list[Gauge]:
    out = []
    if "HR_TRANSIENT_AVAIL" in var:
        # HR_TRANSIENT_AVAIL is what is left; the slots in use are the transient handles listed.
        used = transient_loaded
        out.append(Gauge("object slots", used, used + var["HR_TRANSIENT_AVAIL"]))
    if "HR_LOADED" in var and "HR_LOADED_AVAIL" in var:
        out.append(Gauge("loaded sessions", var["HR_LOADED"], var["HR_LOADED"] + var["HR_LOADED_AVAIL"]))
    if "HR_ACTIVE" in var:
        total = fixed.get("ACTIVE_SESSIONS_MAX") or var["HR_ACTIVE"] + var.get("HR_ACTIVE_AVAIL", 0)
        out.append(Gauge("active sessions", var["HR_ACTIVE"], total))
    gmax = fixed.get("CONTEXT_GAP_MAX")
    if gmax:
        out.append(Gauge("context gap", gap or 0, gmax,
                         "" if gap is not None else "none saved"))
    return out


class ContextGapTracker:
    """How far the context counter has moved past the oldest still-saved session, from the
    ContextSave responses and ContextLoad commands seen on the wire. When it reaches
    CONTEXT_GAP_MAX the TPM refuses further saves (TPM_RC_CONTEXT_GAP) until that session is
    loaded and re-saved — the kernel's /dev/tpmrm0 does not re-gap."""

    CC_CONTEXT_SAVE = 0x162
    CC_CONTEXT_LOAD = 0x161
    CC_FLUSH = 0x165

    def __init__(self):
        self.saved: dict[int, int] = {}  # session handle -> contextID (sequence)
        self.last = 0

    def feed(self, ev) -> None:
        if ev.rc != 0:
            return
        if ev.cc == self.CC_CONTEXT_SAVE and ev.response is not None and len(ev.response) >= 18 and ev.handles:
            h = ev.handles[0]
            if h >> 24 in (0x02, 0x03):
                seq = int.from_bytes(ev.response[10:18], "big")
                self.saved[h] = seq
                self.last = max(self.last, seq)
        elif ev.cc == self.CC_CONTEXT_LOAD and ev.command is not None and len(ev.command) >= 22:
            self.saved.pop(int.from_bytes(ev.command[18:22], "big"), None)
        elif ev.cc == self.CC_FLUSH and ev.command is not None and len(ev.command) >= 14:
            self.saved.pop(int.from_bytes(ev.command[10:14], "big"), None)

    def reset(self) -> None:
        self.saved.clear()
        self.last = 0

    @property
    def gap(self) -> int | None:
        if not self.saved:
            return None
        return max(0, self.last - min(self.saved.values()))


# -- rates --------------------------------------------------------------------------------------
class RateMeter:
    """Operations per second over a sliding window of a few seconds."""

    def __init__(self, window_s: float = 3.0, clock: Callable[[], float] = time.monotonic):
        self.window = window_s
        self.clock = clock
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, total: int) -> float:
        now = self.clock()
        self.samples.append((now, total))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window:
            self.samples.popleft()
        (t0, n0), (t1, n1) = self.samples[0], self.samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 and n1 >= n0 else 0.0

    def reset(self) -> None:
        self.samples.clear()
