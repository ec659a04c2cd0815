"""What the proxy adds to a capture (kept in one place), and the ``tpmtop run`` table.

Capture additions (tpmtop.capture/1, minor 1, all optional): a top-level ``clients`` list
(see :meth:`ClientStats.to_json`) and, on each event a client sent, ``client`` (its id) with
``origin`` "proxy". Readers of minor 0 ignore both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpmtop.proxy.latency import CompactLatency
    from tpmtop.recorder import Event, Recorder

from tpmtop.proxy.accounting import Accounts
from tpmtop.proxy.forward import client_id_of
from tpmtop.proxy.session_use import attrs_text
from tpmtop.stats import tail_cell, tail_note
from tpmtop.textsafe import safe
from tpmtop.tpm import names

CAPTURE_MINOR = 1  # "programs" (the departed clients' summaries) is optional within minor 1


def label_events(events_json: list[dict[str, Any]], events: list[Event]) -> list[dict[str, Any]]:
    """Capture events (``events_json`` made from recorder ``events``, same order) gain their
    client's id. Events before the capture's time origin were dropped from ``events_json``:
    pair them from the end."""
    for e, ev in zip(reversed(events_json), reversed(events), strict=False):
        cid = client_id_of(getattr(ev, "client", None))
        if cid is not None:
            e["client"] = cid
    return events_json


def clients_json(accounts: Accounts) -> list[dict[str, Any]]:
    return [c.to_json(accounts.held_by(c.id)) for c in accounts.snapshot()]


def _by_program(accounts: Accounts) -> list[tuple[str, dict[int | None, CompactLatency], int, int]]:
    """(name, cc -> CompactLatency, commands, errors) per program name: the departed clients'
    summaries and the live clients (tpmtop run stops its proxy first: all have departed)."""
    from tpmtop.proxy.latency import CompactLatency

    by: dict[str, list[Any]] = {}  # name -> [cc -> CompactLatency, commands, errors]

    def add(name: str, per_cc: dict[int | None, CompactLatency], n: int, errors: int) -> None:
        row = by.setdefault((name or "unknown")[:64], [{}, 0, 0])
        for cc, h in per_cc.items():
            row[0].setdefault(cc, CompactLatency()).merge(h)
        row[1] += n
        row[2] += errors

    for p in accounts.program_snapshot():
        add(p.name, p.per_cc, p.commands, p.errors)
    for c in accounts.live():
        if c.id != 0:
            add(c.name, c.per_cc, c.commands, c.errors)
    return [(name, row[0], row[1], row[2]) for name, row in by.items() if row[1]]


def client_runs(accounts: Accounts) -> list[dict[str, Any]]:
    """One ``runs`` entry per program name (engine "proxy", mode = the name, op "client"):
    the eight tpm2_getrandom processes of a script are one row, and `tpmtop compare` and
    `tpmtop export --format openmetrics` work on proxy captures as on bench captures."""
    from tpmtop.stats import LatencyHistogram

    runs = []
    for name, per_cc, n, errors in _by_program(accounts):
        per = {cc: h.to_histogram() for cc, h in per_cc.items()}
        wire = LatencyHistogram()
        for h in per.values():
            wire.merge(h)
        runs.append({"engine": "proxy", "mode": name, "op": "client", "ops": n, "errors": errors,
                     "op_us": wire.to_json(), "wire_us": wire.to_json(), "host_us": LatencyHistogram().to_json(),
                     "commands_per_op": {names.cc_name(cc): round(h.count / n, 3) for cc, h in per.items()},
                     "commands": {names.cc_name(cc): h.to_json()
                                  for cc, h in sorted(per.items(), key=lambda kv: kv[0] or 0)}})
    return runs


def programs_json(accounts: Accounts) -> list[dict[str, Any]]:
    return [p.to_json() for p in accounts.program_snapshot()]


def capture(conn: Any, accounts: Accounts, with_events: bool, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    from tpmtop.capture import build_capture

    events = conn.recorder.events() if with_events else None
    cap = build_capture(conn, [], events=events, extra={"minor": CAPTURE_MINOR, "clients": clients_json(accounts),
                                                       "programs": programs_json(accounts),
                                                       **_pcr_changed(accounts), **(extra or {})})
    cap["runs"] = client_runs(accounts)
    if "events" in cap:
        label_events(cap["events"], events or [])
    return cap


def _pcr_changed(accounts: Accounts) -> dict[str, Any]:
    """The 0x128 failures with the extends that caused them (capture minor 1, optional)."""
    broke = list(accounts.pcr_watch.breakages)
    return {"pcr_changed": [b.to_json() for b in broke]} if broke else {}


def _us(ns: float) -> str:
    return f"{ns / 1000:,.0f}" if ns >= 10_000 else f"{ns / 1000:,.1f}"


def run_table(accounts: Accounts, wall_ns: int, table: Callable[..., str]) -> str:
    """strace -c for the TPM: one row per command code over every client CMD started, once
    they have all departed (``table(rows, header, right)`` formats the rows: the CLI's)."""
    from tpmtop.proxy.latency import CompactLatency

    per: dict[int | None, CompactLatency] = {}
    errs: dict[int | None, list[str]] = {}
    total_ns = 0
    n = 0
    sources = list(accounts.program_snapshot()) + [c for c in accounts.live() if c.id != 0]
    for c in sources:
        for cc, h in c.per_cc.items():
            per.setdefault(cc, CompactLatency()).merge(h)
        for (cc, rc), k in c.error_codes.items():
            errs.setdefault(cc, []).append(f"{k}× 0x{rc:x} {names.rc_text(rc)}")
        total_ns += c.wire_ns_total
        n += c.commands
    rows = []
    for cc, h in sorted(per.items(), key=lambda kv: -kv[1].sum_ns):
        s = h.summary()
        tot = h.sum_ns
        rows.append([names.cc_short(cc), str(s["count"]), str(sum(int(x.split("×")[0]) for x in errs.get(cc, []))),
                     f"{s['p50']:,.1f}", tail_cell(s), f"{tot / 1000:,.1f}",
                     f"{100 * tot / total_ns:.1f}" if total_ns else "0.0"])
    out = [table(rows, ["command", "calls", "errors", "p50 µs", "p99 µs", "total µs", "% TPM"],
                 right={1, 2, 3, 4, 5, 6})]
    note = tail_note(*(h.n for h in per.values()))
    if note:
        out.append(note)
    share = 100 * total_ns / wall_ns if wall_ns else 0.0
    out.append(f"{n} TPM commands; {total_ns / 1e6:,.3f} ms on the wire = {share:.1f}% of the command's "
               f"{wall_ns / 1e6:,.1f} ms wall time")
    for cc, lst in sorted(errs.items(), key=lambda kv: kv[0] or 0):
        for x in lst:
            out.append(f"error: {names.cc_short(cc)}: {x}")
    seen: set[int] = set()
    for c in sources:
        for use in c.sessions.values():
            if id(use) in seen:
                continue
            seen.add(id(use))
            out.append(f"session 0x{use.handle:08x}: {use.type}, {'salted' if use.salted else 'unsalted'}, "
                       f"{'bound' if use.bound else 'unbound'}, symmetric {use.symmetric}, "
                       f"used with {attrs_text(use.attrs)}")
    # what is still loaded (or saved) at the end: a session one process saved and the next
    # flushed is not a leak of the command as a whole
    leaks = [(c, h) for c, h in accounts.held_all() if c.id != 0]
    for c, held in leaks:
        out.append(f"LEAK: {safe(c.name)} (pid {c.peer.pid}) left {held.text()}")
    if not leaks:
        out.append("left nothing loaded")
    out += [safe(b.text()) for b in accounts.pcr_watch.breakages]
    return "\n".join(out)


def client_rows(accounts: Accounts | None, recorder: Recorder | None = None) -> list[tuple[str, list[str]]]:
    """(row key, cells) for the dashboard's Clients panel: tpmtop's own workload first (one
    client among them), then every proxied client, connected ones before departed ones.
    Cells: pid, name, commands, errors, p50 µs, p99 µs, held, leaked."""
    from tpmtop.stats import LatencyHistogram

    rows: list[tuple[str, list[str]]] = []
    if recorder is not None:
        # the dashboard's interleaved `none` baseline is tpmtop's workload too
        stats = [*recorder.command_stats("workload").values(), *recorder.command_stats("baseline").values()]
        if stats:
            h = LatencyHistogram()
            for st in stats:
                h.merge(st.hist)
            s = h.summary()
            owned = len(recorder.owned_handles())
            import os

            rows.append(("workload", [str(os.getpid()), "tpmtop workload", str(s["count"]),
                                      str(sum(st.errors for st in stats)), f"{s['p50']:,.1f}",
                                      tail_cell(s), str(owned), "-"]))
    if accounts is None:
        return rows
    for c in sorted(accounts.snapshot(), key=lambda c: (c.departed_ns is not None, c.id)):
        if c.id == 0:
            continue
        s = c.hist().summary()
        held = accounts.held_by(c.id)
        name = safe(c.name) if c.departed_ns is None else f"{safe(c.name)[:15]} (left)"  # fits the panel's 22 columns
        rows.append((f"c{c.id}", [str(c.peer.pid or "?"), name, str(c.commands), str(c.errors), f"{s['p50']:,.1f}",
                                  tail_cell(s), "-" if c.departed_ns is not None else str(len(held)),
                                  str(len(c.leaked)) if c.departed_ns is not None else "-"]))
    return rows


def client_detail(accounts: Accounts, key: str) -> str:
    """Per-command latencies of one client (plain text, one line per command code)."""
    if not key.startswith("c"):
        return ""
    c = accounts.clients.get(int(key[1:]))
    if c is None:
        return ""
    lines = [f"{safe(c.name)} pid {c.peer.pid or '?'} uid {c.peer.uid if c.peer.uid is not None else '?'}: "
             f"{safe(c.peer.cmdline)[:100]}"]
    for cc, h in sorted(c.per_cc.items(), key=lambda kv: kv[0] or 0):
        s = h.summary()
        lines.append(f"  {names.cc_short(cc):<22} {s['count']:>6}×  p50 {s['p50']:>9,.1f} µs  p99 {tail_cell(s):>9} µs")
    for held in c.leaked or accounts.held_by(c.id):
        lines.append(f"  {'left' if c.leaked else 'holds'} {held.text()}")
    return "\n".join(lines)


def proxy_recorder(keep_buffers: bool = True, capacity: int | None = None) -> Recorder:
    """A recorder for `tpmtop proxy`/`tpmtop run`: it decodes between jobs only once 256
    exchanges wait (and always when read). A proxied client sends its next command tens of µs
    after its answer; decoding after every job held the GIL just then (+60–90 µs a command
    measured with benchmarks/proxy.py)."""
    from tpmtop.recorder import Recorder

    class ProxyRecorder(Recorder):
        BETWEEN_JOBS_BATCH = 256

        def between_jobs(self) -> None:
            if len(self._pending) >= self.BETWEEN_JOBS_BATCH:
                super().between_jobs()

    return ProxyRecorder(keep_buffers=keep_buffers, **({} if capacity is None else {"capacity": capacity}))
