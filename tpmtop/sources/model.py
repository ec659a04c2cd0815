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
    if us >= 100_000:  # six digits of µs would touch a 7-wide column's border
        return f"{us / 1000:.0f} ms"
    if us >= 1000:
        return f"{us:,.0f}"
    return f"{us:.1f}"


def fmt_duration(us: float | None) -> str:
    """:func:`fmt_us` with its unit: 87.4 µs, 4,321 µs, 151 ms, 1.52 s."""
    text = fmt_us(us)
    return text if not text or " " in text else f"{text} µs"


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


# -- errors per command code --------------------------------------------------------------------
class ErrorBook:
    """Which response codes each command got, from the events seen (live: the recorder's new
    events each tick; replay: the capture's events). Keyed like the Latency rows ("cc:386")."""

    def __init__(self):
        from collections import Counter

        self.by_key: dict[str, Counter] = {}
        self._counter = Counter

    def add(self, cc: int | None, rc: int | None) -> None:
        key = f"cc:{cc if cc is not None else -1}"
        c = self.by_key.get(key)
        if c is None:
            c = self.by_key[key] = self._counter()
        c[rc] += 1

    def feed(self, events) -> None:
        for ev in events:
            if failed(ev):
                self.add(ev.cc, ev.rc)

    def count(self, key: str) -> int:
        c = self.by_key.get(key)
        return sum(c.values()) if c else 0

    def text(self, key: str, limit: int = 3) -> str:
        """``0x902 TPM_RC_OBJECT_MEMORY ×3, no response ×1`` — the commonest first."""
        c = self.by_key.get(key)
        if not c:
            return ""
        parts = []
        for rc, n in c.most_common(limit):
            parts.append(f"{short_rc(rc, None)} ×{n:,}")
        more = len(c) - limit
        return ", ".join(parts) + (f", {more} more" if more > 0 else "")

    def clear(self) -> None:
        self.by_key.clear()


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


def boot_components(runs: list[RunView], engine: str = "native") -> dict[str, float]:
    """Per-command p50s (µs) for the boot projection (tpmtop.boot.projection's letters) from
    this sitting's extend runs: E0 = PCR_Extend in ``none``; L, S, F and Eh (PCR_Extend in an
    HMAC session) from ``per-command``, whose sequence is the kernel's 6.10 one."""
    if engine == "kernel":
        return _kernel_components(runs)
    by_mode = {r.mode: r for r in runs if r.op == "extend" and r.engine == engine and r.ops}
    out: dict[str, float] = {}
    want = {"E0": ("none", "TPM2_CC_PCR_Extend"), "L": ("per-command", "TPM2_CC_ContextLoad"),
            "S": ("per-command", "TPM2_CC_StartAuthSession"), "F": ("per-command", "TPM2_CC_FlushContext"),
            "Eh": ("per-command", "TPM2_CC_PCR_Extend")}
    for letter, (mode, cc) in want.items():
        run = by_mode.get(mode)
        d = run.commands.get(cc) if run is not None else None
        if d and d.get("p50"):
            out[letter] = float(d["p50"])
    return out


def _kernel_components(runs: list[RunView]) -> dict[str, float]:
    """The same letters from the kernel's own extends (tpmtop --kernel): the set-up commands
    whatever the session mode, and its PCR_Extend as Eh when it ran in an HMAC session (the
    kernel started sessions), else as E0."""
    run = next((r for r in runs if r.engine == "kernel" and r.op == "extend" and r.ops), None)
    if run is None:
        return {}
    hmac = "TPM2_CC_StartAuthSession" in run.commands or run.mode in ("per-command", "reuse")
    out: dict[str, float] = {}
    for letter, cc in (("L", "TPM2_CC_ContextLoad"), ("S", "TPM2_CC_StartAuthSession"),
                       ("F", "TPM2_CC_FlushContext"), ("Eh" if hmac else "E0", "TPM2_CC_PCR_Extend")):
        d = run.commands.get(cc)
        if d and d.get("p50"):
            out[letter] = float(d["p50"])
    return out


@dataclass
class TimelinePoint:
    t: float  # end of the second, monotonic s
    mode: str
    p50_us: float
    ops: int


def timeline(points, op: str, engine: str, now: float, seconds: int) -> list[TimelinePoint | None]:
    """Operation p50 per second over the last ``seconds`` (None: no operation that second),
    each second labelled with the mode most of its operations ran in: one series across mode
    switches, so a switch shows as a step."""
    from statistics import median

    start = now - seconds
    per: list[list] = [[] for _ in range(seconds)]
    modes: list[dict] = [{} for _ in range(seconds)]
    for t, e, m, o, total in reversed(points):
        if t < start:
            break
        if o != op or e != engine:
            continue
        i = min(seconds - 1, int(t - start))
        per[i].append(total)
        modes[i][m] = modes[i].get(m, 0) + 1
    out: list[TimelinePoint | None] = []
    for i in range(seconds):
        if per[i]:
            out.append(TimelinePoint(start + i + 1, max(modes[i], key=modes[i].get), median(per[i]) / 1000, len(per[i])))
        else:
            out.append(None)
    return out


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
        """Command or origin contains ``needle``; the word ``errors`` keeps failed commands."""
        n = needle.lower()
        if n == "errors":
            return not self.ok
        return not n or n in self.command.lower() or n in self.origin


def _sessions_text(sessions) -> str:
    return " ".join(f"{h:08x}:{a:02x}" if h != 0x40000009 else f"PW:{a:02x}" for h, a in sessions)


def _handles_of(ev) -> list[int]:
    """The handles a command names; FlushContext's target is a parameter, not in the handle
    area, yet it is the one thing worth seeing on that line."""
    handles = list(ev.handles)
    cmd = getattr(ev, "command", None)
    if ev.cc == ContextGapTracker.CC_FLUSH and not handles and cmd is not None and len(cmd) >= 14:
        handles.append(int.from_bytes(cmd[10:14], "big"))
    return handles


def stream_row(ev, t0_ns: int) -> StreamRow:
    note = getattr(ev, "note", None)
    handles = " ".join(f"{h:08x}" for h in _handles_of(ev))
    if note:  # a command tpmtop only saw (the kernel's): its path, and which task sent it
        origin, handles = note, ev.client or ""
    elif getattr(ev, "client", None):
        origin = f"client:{ev.client}"  # a proxied program (tpmtop --listen)
    else:
        origin = ev.origin
    unknown = getattr(ev, "rc_unknown", False)
    return StreamRow(str(ev.seq), f"{(ev.t_ns - t0_ns) / 1e9:.3f}", origin, ev.name.removeprefix("TPM2_CC_"),
                     handles, _sessions_text(ev.sessions),
                     short_rc(ev.rc, ev.error, unknown), fmt_us(ev.wire_ns / 1000), ev.rc == 0 or unknown)


def failed(ev) -> bool:
    """A command that did not succeed (an observed one whose code was not traced did not fail)."""
    return ev.rc != 0 and not getattr(ev, "rc_unknown", False) and not getattr(ev, "expected", False)


def event_matches(ev, needle: str) -> bool:
    """``needle`` (lower case) in the event's origin, where it came from, or its command."""
    return (needle in ev.origin or needle in ev.name.lower() or needle in (getattr(ev, "note", None) or "").lower()
            or needle in (getattr(ev, "client", None) or "").lower())  # a kernel row's task


class LazyStreamRows:
    """The recorder's whole ring as stream rows, converted only when looked at: a frozen
    stream can scroll back through every command the recorder keeps (100,000) without
    building 100,000 rows. ``items`` are Events and (t_ns, text) marks, oldest first."""

    def __init__(self, items: list, t0_ns: int, needle: str = ""):
        self.t0 = t0_ns
        if needle:
            n = needle.lower()
            errors = n == "errors"
            items = [x for x in items if isinstance(x, tuple) or (failed(x) if errors else event_matches(x, n))]
        self.items = items
        self._done: dict[int, StreamRow] = {}

    def __len__(self) -> int:
        return len(self.items)

    def _row(self, i: int) -> StreamRow:
        r = self._done.get(i)
        if r is None:
            x = self.items[i]
            r = self._done[i] = mark_row(x[0], self.t0, x[1]) if isinstance(x, tuple) else stream_row(x, self.t0)
        return r

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self._row(i) for i in range(*k.indices(len(self.items)))]
        return self._row(k if k >= 0 else len(self.items) + k)


def merge_marks(events: list, marks: list[tuple[int, str]]) -> list:
    """Events and marks in time order (marks are few: a sort of the merged list is cheap)."""
    if not marks:
        return events
    return sorted(events + list(marks), key=lambda x: x[0] if isinstance(x, tuple) else x.t_ns)


def mark_row(t_ns: int, t0_ns: int, text: str) -> StreamRow:
    """A boundary in the stream (TPM reset, reconnection): origin "mark", the text as command."""
    return StreamRow(f"mark-{t_ns}", f"{(t_ns - t0_ns) / 1e9:.3f}", "mark", text, "", "", "", "", True)


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
    if isinstance(e.get("path"), str) and e.get("origin") == "kernel":
        # a command the kernel probes saw: its path and task, as the live view shows them
        from tpmtop.kernel.trace_pipe import path_label

        origin = path_label(e["path"])
        hs = f"{e.get('comm', '?')}-{e.get('pid', '?')} · {e['path']}"
    ok = rc == 0 or e.get("expected") is True
    if rc_not_traced(e):  # answered; only its response code is unknown
        return StreamRow(str(i), f"{float(t) / 1e9:.3f}", origin, name, hs, ss, "rc ?",
                         fmt_us(wire / 1000) if isinstance(wire, (int, float)) else "", True)
    return StreamRow(str(i), f"{float(t) / 1e9:.3f}", origin, name, hs, ss,
                     short_rc(rc, None), fmt_us(wire / 1000) if isinstance(wire, (int, float)) else "", ok)


def rc_not_traced(e: dict) -> bool:
    """A capture event that was answered though nobody saw its response code (tpmtop kernel:
    a user-space command where tpm2_commit_space could not be probed)."""
    from tpmtop.importers.observed import RC_NOT_TRACED

    return e.get("rc") is None and e.get("rc_text") == RC_NOT_TRACED


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


def short_rc(rc: int | None, error: str | None, unknown: bool = False) -> str:
    if unknown and rc is None and not error:
        return "rc ?"  # answered, seen under the kernel probes: the response code is not traced
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
    peak: int | None = None  # high-water mark from the traffic between polls (SlotPeaks)

    @property
    def fraction(self) -> float:
        return self.used / self.total if self.total else 0.0

    @property
    def peak_level(self) -> str:
        """``full`` when the traffic filled every slot at some moment, even if no poll saw it."""
        if self.peak is None or not self.total:
            return "ok"
        f = self.peak / self.total
        return "full" if f >= 1.0 else "warn" if f >= 0.66 else "ok"

    @property
    def level(self) -> str:
        f = self.fraction
        return "full" if f >= 1.0 else "warn" if f >= 0.66 else "ok"


def gauges(var: dict, fixed: dict, gap: int | None, transient_loaded: int, saved_listed: int = 0,
           peaks: dict | None = None) -> list[Gauge]:
    """``saved_listed``: saved sessions the TPM lists (the poll). The gap is known only for
    sessions whose ContextSave tpmtop saw on the wire; others were saved before it watched."""
    out = []
    if "HR_TRANSIENT_AVAIL" in var:
        # HR_TRANSIENT_AVAIL is what is left; the slots in use are the transient handles listed.
        used = transient_loaded
        out.append(Gauge("object slots", used, used + var["HR_TRANSIENT_AVAIL"],
                         peak=(peaks or {}).get("object")))
    if "HR_LOADED" in var and "HR_LOADED_AVAIL" in var:
        out.append(Gauge("loaded sessions", var["HR_LOADED"], var["HR_LOADED"] + var["HR_LOADED_AVAIL"],
                         peak=(peaks or {}).get("session")))
    if "HR_ACTIVE" in var:
        total = fixed.get("ACTIVE_SESSIONS_MAX") or var["HR_ACTIVE"] + var.get("HR_ACTIVE_AVAIL", 0)
        out.append(Gauge("active sessions", var["HR_ACTIVE"], total))
    gmax = fixed.get("CONTEXT_GAP_MAX")
    if gmax:
        if gap is not None:
            note = ""
        elif saved_listed:
            note = f"{saved_listed} saved before tpmtop watched: gap unknown"
        else:
            note = "no saved session"
        out.append(Gauge("context gap", gap or 0, gmax, note))
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


class SlotPeaks:
    """High-water marks of object and session slots, from the traffic seen on the wire.

    A per-command session lives for under a millisecond: a poll every second sees 0 in use
    while the TPM fills up between polls. So each poll sets a baseline (what the TPM listed),
    and every command after it moves the count: a handle created (CreatePrimary, Load,
    StartAuthSession, ContextLoad) is +1, one flushed (FlushContext, a session used without
    continueSession, a ContextSave of a session: it leaves its slot) is -1. The peak is the
    highest count reached since the last reset."""

    CREATES = {0x131, 0x157, 0x176, 0x161}  # CreatePrimary, Load, StartAuthSession, ContextLoad
    CC_FLUSH, CC_SAVE = 0x165, 0x162

    def __init__(self):
        self.now = {"object": 0, "session": 0}
        self.peak = {"object": 0, "session": 0}
        self.moves: deque[tuple[int, str, int]] = deque(maxlen=20_000)  # (seq, kind, ±1)
        self.since = 0  # the last baseline's recorder sequence number

    @staticmethod
    def _kind(h: int | None) -> str | None:
        top = (h or 0) >> 24
        return "object" if top == 0x80 else "session" if top in (0x02, 0x03) else None

    def baseline(self, objects: int, sessions: int, seq: int) -> None:
        """What a poll listed once the command numbered ``seq`` had run; moves seen after it
        (the poll's message may arrive after later traffic was read) are applied again."""
        self.now = {"object": objects, "session": sessions}
        self.since = seq
        for k, v in self.now.items():
            self.peak[k] = max(self.peak[k], v)
        for s_, kind, d in self.moves:
            if s_ > seq:
                self._apply(kind, d)

    def _move(self, seq: int, kind: str | None, d: int) -> None:
        if kind is None or seq <= self.since:
            return
        self.moves.append((seq, kind, d))
        self._apply(kind, d)

    def _apply(self, kind: str, d: int) -> None:
        v = self.now[kind] = max(0, self.now[kind] + d)
        if v > self.peak[kind]:
            self.peak[kind] = v

    def feed(self, events) -> None:
        for ev in events:
            if ev.rc != 0:
                continue
            seq = ev.seq
            if ev.cc in self.CREATES:
                self._move(seq, self._kind(ev.rsp_handle), +1)
            elif ev.cc == self.CC_FLUSH:
                cmd = ev.command
                if cmd is not None and len(cmd) >= 14:
                    self._move(seq, self._kind(int.from_bytes(cmd[10:14], "big")), -1)
            elif ev.cc == self.CC_SAVE and ev.handles and self._kind(ev.handles[0]) == "session":
                self._move(seq, "session", -1)
            for h, attrs in ev.sessions:  # a session used without continueSession ends with the command
                if not attrs & 0x01 and self._kind(h) == "session":
                    self._move(seq, "session", -1)

    def reset(self) -> None:
        self.peak = dict(self.now)


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


class CpuMeter:
    """tpmtop's own CPU use, as a share of one core: the UI thread's (``time.thread_time`` read
    on that thread) and the whole process's (workload, poller and recorder included), over the
    last ``window_s``. The dashboard shows both so a user can tell tpmtop's cost from the TPM's."""

    def __init__(self, window_s: float = 2.0):
        self.window = window_s
        self._last = (time.monotonic(), time.thread_time(), time.process_time())
        self.ui = 0.0
        self.process = 0.0

    def sample(self) -> None:
        now, th, pr = time.monotonic(), time.thread_time(), time.process_time()
        t0, th0, pr0 = self._last
        if now - t0 < self.window:
            return
        self.ui = (th - th0) / (now - t0) * 100
        self.process = (pr - pr0) / (now - t0) * 100
        self._last = (now, th, pr)

    def text(self) -> str:
        return f"CPU ui {self.ui:.0f}% all {self.process:.0f}%"
