"""Text from a file, made safe to show on a terminal.

A capture, a profile or a trace is input from anyone (a bug report attachment, a colleague's
run). A string in it may hold terminal escape sequences: ESC ] 0 ; … sets the window title,
ESC [ 2 J clears the screen, OSC 52 writes the clipboard, and a bidi override (U+202E) makes
text read backwards. tpmtop prints such strings (compare's table, boot's report, notices,
error lines), so every one of them goes through :func:`safe` first: C0 and C1 control
characters, DEL, and the Unicode bidi/zero-width format characters become visible escapes
(``\\x1b``, ``\\u202e``). Tab and newline are escaped too: every field is shown on one line.

The dashboard uses the same helper for what it shows from a replayed capture; :func:`counted`
words a count the same way in both ("1 extend", "5 extends").
No dependencies (the lowest layer: anyone may import it).
"""

from __future__ import annotations

import re
from typing import Any

# C0 controls, DEL, C1 controls; Unicode format characters that reorder or hide text.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def safe(text: object) -> str:
    """``text`` (any object: str() of it) with every character that could drive a terminal
    shown as an escape. Plain text comes back unchanged (and fast)."""
    s = text if isinstance(text, str) else str(text)
    if _UNSAFE.search(s) is None:
        return s
    return _UNSAFE.sub(_escape, s)


def safe_tree(obj: Any) -> Any:
    """A copy of a JSON-like value with :func:`safe` applied to every string in it, keys
    included. Numbers, booleans and None are returned as they are."""
    if isinstance(obj, str):
        return safe(obj)
    if isinstance(obj, dict):
        return {safe(k) if isinstance(k, str) else k: safe_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [safe_tree(v) for v in obj]
    return obj


def counted(n: int, one: str, many: str | None = None) -> str:
    """``n`` with thousands separators and the noun in the number it takes ("1 probe event",
    "2,048 probe events"); ``many`` where the plural is not ``one`` + "s"."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"
