"""One line per command of a capture, decoded: ``tpmtop import --decode`` and the stream of
``tpmtop replay --decode``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tpmtop.decode.text import one_line
from tpmtop.decode.walk import decode_command


def event_text(e: dict[str, Any], limit: int = 100) -> str | None:
    """The decoded handles and parameters of a capture event's command, or None when the
    capture kept no bytes for it."""
    hx = e.get("command_hex")
    if not isinstance(hx, str):
        return None
    try:
        cmd = bytes.fromhex(hx)
    except ValueError:
        return "[command bytes are not hex]"
    return one_line(decode_command(cmd), limit)


def lines(events: Iterable[dict[str, Any]]) -> Iterator[str]:
    """``N  t(s)  command  rc  decoded handles and parameters`` for each event."""
    from tpmtop.textsafe import safe

    yield f"{'#':>6}  {'t (s)':>10}  {'command':<26} {'rc':<6} handles and parameters"
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            continue
        t = (e.get("t_ns") or 0) / 1e9
        rc = e.get("rc")
        rc_s = f"0x{rc:03x}" if isinstance(rc, int) else "?"
        name = safe(str(e.get("command") or "?")).removeprefix("TPM2_CC_")
        text = event_text(e, 160)
        yield f"{i:>6}  {t:>10.6f}  {name:<26} {rc_s:<6} {text if text is not None else '(no bytes kept)'}"
