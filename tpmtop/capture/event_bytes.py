"""The raw bytes of captured commands: ``command_hex``/``response_hex`` on capture events
(and ``client``, the proxied program that sent a command, when the recorder knows it).

The recorder keeps the bytes of the newest ``recorder.BUFFERS_KEPT`` commands (16,384 by
default); a capture written with ``--events`` carries them on those events, so
``tpmtop export --format pcapng`` and ``tpmtop decode`` can use them. Older events have
none (a 1M-command capture would otherwise double in size). ``t0_unix_ns`` on the capture
is the wall clock of ``t_ns`` = 0, for the pcapng's original timestamps.

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
    for row, ev in zip(rows, kept, strict=False):
        client = getattr(ev, "client", None)  # a proxied program: its own TCP stream in a pcapng
        if client is not None:
            row["client"] = str(client)
        cmd = getattr(ev, "command", None)
        if cmd is None:
            continue
        row["command_hex"] = bytes(cmd).hex()
        rsp = getattr(ev, "response", None)
        if rsp is not None:
            row["response_hex"] = bytes(rsp).hex()
        n += 1
    # perf_counter and the wall clock, read together: t_ns = 0 on the wall clock
    cap["t0_unix_ns"] = time.time_ns() - (time.perf_counter_ns() - t0_ns)
    return n
