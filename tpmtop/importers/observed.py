"""A capture built from TPM traffic tpmtop watched rather than sent (pcap files, the kernel).

Such traffic has no engine, mode or operation: every command is its own operation, so the
capture gets one run per origin (``engine`` = "observed", ``mode`` = the origin such as
"kernel" or "imported", ``op`` = "command") whose op/wire latencies are the per-command wire latencies and whose
host time is zero (nothing is known about it). Events carry the raw bytes as
``command_hex``/``response_hex`` when they are known, and ``client`` when the traffic had
more than one client — the fields ``tpmtop export --format pcapng`` reads back.

Layer: importers (beside exporters); no Textual.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from tpmtop.capture.spec import EVENT_KEYS, HEX_MAX_CHARS
from tpmtop.capture.write import CheckedLines, checked_line
from tpmtop.tpm import names, wire

# rc_text of a command that was answered but whose response code no probe could read (a
# user-space command seen by kernel probes without tpm2_commit_space): not an error, not
# "(no response)".
RC_NOT_TRACED = "response code not traced"


@dataclass
class ObservedExchange:
    """One command and its response as seen from outside the client."""

    t_unix_ns: int  # wall clock when the command started
    wire_ns: int  # command start to end of response
    command: bytes | None
    response: bytes | None
    client: str | None = None
    cc: int | None = None  # when the bytes are not known (kernel probes read only the header)
    rc: int | None = None
    answered: bool | None = None  # a response came though its rc is unknown (kernel, user space)
    extra: dict[str, Any] = field(default_factory=dict)


def event_dict(x: ObservedExchange, t0_unix_ns: int, origin: str) -> dict[str, Any]:
    if x.command is not None:
        info = wire.decode_command(x.command)
        cc, handles, sessions = info.cc, info.handles, info.sessions
    else:
        cc, handles, sessions = x.cc, (), ()
    rc = x.rc
    if x.response is not None:
        rc = wire.decode_response(x.response, cc).rc
    e = {
        "t_ns": max(x.t_unix_ns - t0_unix_ns, 0), "command": names.cc_name(cc),
        "handles": [f"0x{h:08x}" for h in handles],
        "sessions": [{"handle": f"0x{h:08x}", "attrs": a} for h, a in sessions],
        "rc": rc, "rc_text": names.rc_text(rc), "wire_ns": max(x.wire_ns, 0), "origin": origin,
        "engine": None, "mode": None, "op": None, "op_seq": None,
    }
    if x.command is not None:
        e["command_hex"] = x.command.hex()
    if x.response is not None:
        e["response_hex"] = x.response.hex()
    if x.client is not None:
        e["client"] = x.client
    e.update(x.extra)
    return e


class _Identity:
    """TPM2_PT_MANUFACTURER etc. from a GetCapability(TPM_PROPERTIES) answer in the traffic."""

    def __init__(self) -> None:
        self.found: dict[int, int] = {}

    def add(self, x: ObservedExchange) -> None:
        c, r = x.command, x.response
        if not c or not r or len(c) < 22 or len(r) < 19 or int.from_bytes(c[6:10], "big") != 0x17A:
            return
        if int.from_bytes(r[6:10], "big") != 0 or int.from_bytes(c[10:14], "big") != 6:
            return
        n = int.from_bytes(r[15:19], "big")
        for i in range(n):
            off = 19 + 8 * i
            if off + 8 > len(r):
                break
            self.found[int.from_bytes(r[off:off + 4], "big")] = int.from_bytes(r[off + 4:off + 8], "big")

    def result(self) -> dict[str, Any]:
        found = self.found

        def text(*props: int) -> str:
            raw = b"".join(found[p].to_bytes(4, "big") for p in props if p in found)
            return raw.rstrip(b"\0").decode("ascii", "replace").strip()

        fw = ""
        if 0x10B in found:
            fw = f"{found[0x10B] >> 16}.{found[0x10B] & 0xFFFF}"
        return {"manufacturer": text(0x105), "vendor": text(0x106, 0x107, 0x108, 0x109), "firmware": fw}


class _Runs:
    """One run per origin, from the events as they come: every command is its own operation."""

    def __init__(self) -> None:
        from tpmtop.stats import LatencyHistogram

        self._hist = LatencyHistogram
        self.per_origin: dict[str, tuple[Any, dict[str, Any], dict[str, int], list[int]]] = {}

    def add(self, origin: str, command: str, rc: int | None, wire_ns: int, answered: bool,
            expected: bool = False) -> None:
        # the latency counts when an answer came, even one whose response code nobody saw
        got = self.per_origin.get(origin)
        if got is None:
            got = self.per_origin[origin] = (self._hist(), {}, {}, [0])
        op_h, per_cc, counts, errors = got
        if not answered:
            errors[0] += 1
            return
        op_h.record(wire_ns)
        # not setdefault(…, LatencyHistogram()): that built (and dropped) an 18,000-slot HDR
        # histogram per event — 12 of 95 s profiled on a 120,000-command import
        h = per_cc.get(command)
        if h is None:
            h = per_cc[command] = self._hist()
        h.record(wire_ns)
        counts[command] = counts.get(command, 0) + 1
        errors[0] += bool(rc) and not expected

    def add_event(self, e: dict[str, Any], answered: bool) -> None:
        """:meth:`add` for an event dict."""
        self.add(e["origin"], e["command"], e["rc"], e["wire_ns"], answered, bool(e.get("expected")))

    def runs(self) -> list[dict[str, Any]]:
        out = []
        for org, (op_h, per_cc, counts, errors) in self.per_origin.items():
            n = op_h.count if isinstance(op_h.count, int) else op_h.count()
            # host_us stays empty: nothing is known about the client's side of observed traffic.
            # One key for all observed traffic, so two such captures (kernel 6.10 vs 6.12, two
            # pcap files) compare command by command in `tpmtop compare`.
            out.append({"engine": "observed", "mode": org, "op": "command", "ops": n, "errors": errors[0],
                        "op_us": op_h.to_json(), "wire_us": op_h.to_json(), "host_us": self._hist().to_json(),
                        "commands_per_op": {k: round(v / n, 4) for k, v in counts.items()} if n else {},
                        "commands": {k: h.to_json() for k, h in per_cc.items()}})
        return out


def _head(runs: list[dict[str, Any]], ident: dict[str, Any], source: str, simulated: bool | None,
          served_here: bool) -> dict[str, Any]:
    """``simulated`` None: not known (an imported file: whoever recorded it knew, the file does
    not say), and null in the capture unless the TPM named itself a simulator."""
    from tpmtop.capture.build import capture_head

    # swtpm and the IBM simulator answer "IBM" / "SW   TPM"
    sim = simulated or (ident["manufacturer"] == "IBM" and ident["vendor"].startswith("SW")) or (
        None if simulated is None else False)
    return capture_head({"tcti": source, **ident, "simulated": sim}, runs, recorded_here=False, tuned=served_here)


def capture_from_exchanges(exchanges: list[ObservedExchange], *, origin: str, source: str,
                           simulated: bool | None = None, extra: dict[str, Any] | None = None,
                           served_here: bool = False) -> dict[str, Any]:
    """The ``tpmtop.capture/1`` document for observed traffic (events in time order).
    ``served_here``: the exchanges went through this tpmtop's own transport (the lab serves
    its guests' TPM), so the capture records the tuning knobs in force."""
    exchanges = sorted(exchanges, key=lambda x: x.t_unix_ns)
    t0 = exchanges[0].t_unix_ns if exchanges else 0
    events = [event_dict(x, t0, origin) for x in exchanges]
    runs, ident = _Runs(), _Identity()
    for x, e in zip(exchanges, events, strict=False):
        runs.add_event(e, e["rc"] is not None or bool(x.answered))
        ident.add(x)
    cap = _head(runs.runs(), ident.result(), source, simulated, served_here)
    cap |= {"t0_unix_ns": t0, "events": events}
    if extra:
        cap.update(extra)
    return cap


# The writer's JSON form (tpmtop.capture.write): no spaces, text as it is, no NaN.
_J = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_MAX_BYTES = HEX_MAX_CHARS // 2  # the longest command or response an event's hex may hold
_CACHE_MAX = 4096  # texts kept per cache below; past this a cache starts over (odd traffic)
# _EventText writes the members in the writer's order: a change there must be made here too
assert EVENT_KEYS == ("t_ns", "command", "handles", "sessions", "rc", "rc_text", "wire_ns", "origin",
                      "engine", "mode", "op", "op_seq")


class _EventText:
    """The middle of an observed event's canonical line, ``"command":…`` to ``"response_hex":…``,
    made as text straight from the exchange (its ``t_ns`` comes first and its ``client`` last,
    and both are settled only once the whole traffic is read). On a 100,000-event import the
    event dict, its check, its JSON encoding and its pickling to the spool were over a third of
    the CPU time (3.9 s, now 2.4).

    What it makes is valid by the way it is made: the command's name and the response code's
    text are JSON-encoded as the writer does it; handles come from 32-bit fields, session
    attributes from a byte, the response code from a 32-bit field; the wire time is clamped at
    zero; the hex is bytes.hex(). What it cannot vouch for — bytes beyond the hex's 64 KiB, a
    caller's ``extra`` members, a response code without a response, times that are not ints —
    takes the checked way: the event dict, checked and encoded by the writer's own rules."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self._tail = f',"origin":{_J(origin)},"engine":null,"mode":null,"op":null,"op_seq":null'
        self._names: dict[int | None, tuple[str, str]] = {}  # cc -> (its name, "command":…)
        self._rcs: dict[int | None, str] = {}  # rc -> "rc":…,"rc_text":…
        self._handles: dict[tuple[Any, Any], str] = {}  # (handles, sessions) -> "handles":…,"sessions":…

    def make(self, x: ObservedExchange, i: int) -> tuple[str, str, int | None]:
        """(the text, the command's name, its response code) of ``x``, event ``i`` of the capture."""
        cmd, rsp = x.command, x.response
        if (cmd is None or len(cmd) > _MAX_BYTES or (rsp is not None and len(rsp) > _MAX_BYTES)
                or (rsp is None and x.rc is not None) or x.extra
                or type(x.t_unix_ns) is not int or type(x.wire_ns) is not int):
            return self._checked(x, i)
        info = wire.decode_command(cmd)
        cc = info.cc
        rc = wire.decode_response(rsp, cc).rc if rsp is not None else None
        name = self._names.get(cc) or self._name(cc)
        rc_part = self._rcs.get(rc) or self._rc(rc)
        key = (info.handles, info.sessions)
        handles_part = self._handles.get(key) or self._handles_text(key)
        text = (f'{name[1]},{handles_part},{rc_part},"wire_ns":{x.wire_ns if x.wire_ns > 0 else 0}{self._tail},'
                f'"command_hex":"{cmd.hex()}"')
        if rsp is not None:
            text += f',"response_hex":"{rsp.hex()}"'
        return text, name[0], rc

    def _checked(self, x: ObservedExchange, i: int) -> tuple[str, str, int | None]:
        e = event_dict(x, 0, self.origin)
        e.pop("client", None)  # added (or not) once the traffic is read
        # checked with the exchange's own time as t_ns: an int ≥ 0 exactly when the capture's
        # will be; the line's first member is then that int, cut off with the closing brace
        line = checked_line("events", e, i)
        return line[line.index(",") + 1:-1], e["command"], e["rc"]

    def _name(self, cc: int | None) -> tuple[str, str]:
        name = names.cc_name(cc)
        return _keep(self._names, cc, (name, f'"command":{_J(name)}'))

    def _rc(self, rc: int | None) -> str:
        return _keep(self._rcs, rc, f'"rc":{_J(rc)},"rc_text":{_J(names.rc_text(rc))}')

    def _handles_text(self, key: tuple[Any, Any]) -> str:
        handles, sessions = key
        hs = ",".join(f'"0x{h:08x}"' for h in handles)
        ss = ",".join(f'{{"handle":"0x{h:08x}","attrs":{a}}}' for h, a in sessions)
        return _keep(self._handles, key, f'"handles":[{hs}],"sessions":[{ss}]')


_K = TypeVar("_K")
_V = TypeVar("_V")


def _keep(cache: dict[_K, _V], key: _K, value: _V) -> _V:
    """``value``, remembered in ``cache`` under ``key`` (bounded: a full cache starts over)."""
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


class SpooledEvents(CheckedLines):
    """A capture's events waiting in a :class:`tpmtop.importers.spool.Spool` as ``(wall clock,
    client, the middle of its line)`` (:class:`_EventText`): written as lines by the capture
    writer, iterable as event dicts (as :func:`event_dict` makes them) as often as asked. Each
    line's time and client are settled only once the whole traffic has been read (the first
    command's time; whether there was more than one client)."""

    def __init__(self, spool: Any, t0: int, clients: bool) -> None:
        self._spool, self._t0, self._clients = spool, t0, clients
        self._client_texts: dict[str | None, str] = {None: "}"}

    def __len__(self) -> int:
        return len(self._spool)

    def _end(self, who: str | None) -> str:
        """The line's end: its client member (when it keeps one) and the closing brace."""
        end = self._client_texts.get(who)
        if end is None:
            end = self._client_texts[who] = f',"client":{_J(who)}}}' if self._clients else "}"
        return end

    def line_batches(self) -> Iterator[list[str]]:
        t0, texts, end = self._t0, self._client_texts, self._end
        for batch in self._spool.batches():
            yield [f'{{"t_ns":{t - t0 if t > t0 else 0},{text}{texts.get(who) or end(who)}'
                   for t, who, text in batch]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        decode = msgspec.json.Decoder().decode
        for batch in self.line_batches():
            for line in batch:
                yield decode(line)


def capture_from_stream(exchanges: Iterable[ObservedExchange], *, origin: str, source: str,
                        clients: Callable[[], bool], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`capture_from_exchanges` for traffic too big to hold: the exchanges (in time order,
    or nearly) are read once, each event's line spooled to disk as it is made, the runs counted
    on the way; the capture's ``events`` is a :class:`SpooledEvents`. ``clients()``, asked after
    the last exchange: whether events keep their ``client`` (more than one connection)."""
    from tpmtop.importers.spool import Spool

    spool = Spool()
    runs, ident, maker = _Runs(), _Identity(), _EventText(origin)
    t0: int | None = None
    for i, x in enumerate(exchanges):
        text, command, rc = maker.make(x, i)
        runs.add(origin, command, rc, x.wire_ns if x.wire_ns > 0 else 0, rc is not None or bool(x.answered),
                 bool(x.extra.get("expected")))
        ident.add(x)
        t = x.t_unix_ns
        t0 = t if t0 is None or t < t0 else t0
        spool.append((t, x.client, text))
    t0 = t0 or 0
    cap = _head(runs.runs(), ident.result(), source, None, False)  # a file: whether a simulator answered is not known
    cap |= {"t0_unix_ns": t0, "events": SpooledEvents(spool, t0, clients())}
    if extra:
        cap.update(extra)
    return cap
