"""Loading an imported kernel trace: sniff the format, hand the lines to its parser.

The data model (Series, TraceResult, the kernel TPM function tables) lives in
:mod:`tpmtop.boot.series`; the parsers import only that, so this module can import them at
the top without a cycle. Names of the model are re-exported here for older imports.
"""

from __future__ import annotations

from tpmtop.boot.bpftrace import parse_bpftrace
from tpmtop.boot.ftrace import parse_function_graph
from tpmtop.boot.series import (HMAC_FUNCS, OP_EXTEND, OP_EXTEND_HMAC, OP_FUNCS, OP_SETUP_UNATTRIBUTED,  # noqa: F401
                                SETUP_SEQUENCE, TRANSMIT_FUNCS, Series, TraceResult, merged_operations)
from tpmtop.errors import UsageError


def sniff_format(lines: list[str]) -> str | None:
    for line in lines:
        s = line.strip()
        if not s:
            continue
        if s.startswith("# tracer:") or s.startswith("# CPU") or "FUNCTION CALLS" in s:
            return "ftrace"
        if s.startswith("@") or s.startswith("Attaching ") or s == "^C":
            return "bpftrace"
        if line.startswith("#"):
            continue
        if "|" in s and ("()" in s or s.endswith("|") or "}" in s):
            return "ftrace"
        return None
    return None


def load_trace(path: str, unit: str | None = None) -> TraceResult:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise UsageError(f"{path}: cannot read trace: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise UsageError(f"{path}:{line}: not a text trace (byte 0x{raw[e.start]:02x} is not UTF-8)") from None
    lines = text.splitlines()
    kind = sniff_format(lines)
    if kind == "ftrace":
        return parse_function_graph(lines, path)
    if kind == "bpftrace":
        return parse_bpftrace(lines, path, unit=unit)
    first = next((i for i, ln in enumerate(lines, 1) if ln.strip() and not ln.startswith("#")), 1)
    raise UsageError(f"{path}:{first}: neither ftrace function_graph nor bpftrace map output")
