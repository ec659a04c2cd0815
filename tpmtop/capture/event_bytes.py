"""The raw bytes of captured commands: ``command_hex``/``response_hex`` on capture events
(and ``client``, the proxied program that sent a command, when the recorder knows it).

The recorder keeps the bytes of the newest ``recorder.BUFFERS_KEPT`` commands (16,384 by
default); a capture written with ``--events`` carries them on those events, so
``tpmtop export --format pcapng`` and ``tpmtop decode`` can use them. Older events have
none (a 1M-command capture would otherwise double in size). ``t0_unix_ns`` on the capture
is the wall clock of ``t_ns`` = 0, for the pcapng's original timestamps.

A command or response whose first parameter a session encrypted also gets ``plaintext_view``:
whether this tpmtop process could show its plaintext (one of its own sessions, key still
held; docs/decode.md). Only that boolean: a key never goes into a capture.

Layer: capture (beside capture.py). No Textual.
"""

from __future__ import annotations

import time
from typing import Any


def attach_raw_bytes(cap: dict[str, Any], events: list[Any], t0_ns: int) -> int:
    """Add the bytes the recorder kept to ``cap["events"]`` (built from ``events`` with
    ``events_json(events, t0_ns)``); returns how many events got them."""
    rows = cap.get("events") or []
    kept = [e for e in events if e.t_ns >= t0_ns]
    # events_json drops events before t0; what is left lines up one to one.
    if len(kept) != len(rows):
        return 0
    n = 0
    views = _plaintext_views(kept)
    for row, ev in zip(rows, kept, strict=False):
        client = getattr(ev, "client", None)  # a proxied program: its own TCP stream in a pcapng
        if client is not None:
            row["client"] = str(client)
        cmd = getattr(ev, "command", None)
        if cmd is None:
            continue
        row["command_hex"] = bytes(cmd).hex()
        if ev.seq in views:
            row["plaintext_view"] = views[ev.seq]
        rsp = getattr(ev, "response", None)
        if rsp is not None:
            row["response_hex"] = bytes(rsp).hex()
        n += 1
    # perf_counter and the wall clock, read together: t_ns = 0 on the wall clock
    cap["t0_unix_ns"] = time.time_ns() - (time.perf_counter_ns() - t0_ns)
    return n


_CC_START_AUTH_SESSION = 0x176
_PARAM_ENCRYPTION = 0x60  # TPMA_SESSION decrypt | encrypt


def _plaintext_views(events: list[Any]) -> dict[int, bool]:
    """seq -> whether the plaintext of that event's encrypted parameter can be shown, for the
    events with a decrypt/encrypt session: a forward pass that follows StartAuthSession's
    responses (a session is its handle and first nonceTPM, see tpmtop.sessions.livekeys)."""
    from tpmtop.sessions import livekeys

    first: dict[int, bytes] = {}
    out: dict[int, bool] = {}
    for ev in events:
        rsp = getattr(ev, "response", None)
        if ev.cc == _CC_START_AUTH_SESSION and rsp is not None and len(rsp) >= 16 and rsp[6:10] == b"\0\0\0\0":
            n = int.from_bytes(rsp[14:16], "big")
            first[int.from_bytes(rsp[10:14], "big")] = bytes(rsp[16:16 + n])
        for h, attrs in getattr(ev, "sessions", ()) or ():
            if attrs & _PARAM_ENCRYPTION:
                out[ev.seq] = h in first and livekeys.lookup(h, first[h]) is not None
                break
    return out
