"""A decode as text: one line per field, with its offset, spec name, type, bytes and meaning.

The layout follows ``tpmstream convert``'s (type, path, hex, value) so a TPM engineer reads both
the same way, indented by structure depth. Strings here come from the spec tables and from
numbers; the only bytes of the wire shown as text are hex.
"""

from __future__ import annotations

from typing import Any

from tpmtop.decode.model import Decoded, Field, Part
from tpmtop.tpm import names

HEX_SHOWN = 8  # bytes of a field's hex shown on its line; --json and the hex view have them all


def hex_view(buf: bytes, width: int = 16, base: int = 0) -> list[str]:
    """``offset  hex bytes  ascii`` lines, as xxd prints them (offsets from ``base``)."""
    out = []
    for off in range(0, len(buf), width):
        chunk = buf[off:off + width]
        hx = " ".join(f"{b:02x}" for b in chunk)
        asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        out.append(f"{base + off:08x}  {hx:<{width * 3 - 1}}  {asc}")
    return out


def _meaning(value: Any, text: str | None, bits: dict[str, int] | None, size: int) -> str:
    if isinstance(value, int):
        # a value with a meaning (a name, a handle, bits) in hex as the spec writes it; a number in decimal
        v = f"0x{value:0{size * 2}x}" if text or bits is not None else str(value)
        return f"{v}  {text}" if text else v
    if isinstance(value, str):  # a byte buffer: its hex is the value
        return f"{size} bytes" if size else "empty"
    return ""


class _Cols:
    """Column widths of one part, from the fields that carry a value (a structure's own line
    has only a name and a type, and may run past them)."""

    def __init__(self, rows: list[tuple[str, str]]):
        self.label = min(max((len(a) for a, _ in rows), default=10), 40)
        self.type = min(max((len(b) for _, b in rows), default=10), 28)

    def line(self, off: str, label: str, type_: str, hx: str, meaning: str) -> str:
        if not hx and not meaning:
            return f"  {off:>5}  {label:<{self.label}}  {type_}".rstrip()
        return f"  {off:>5}  {label:<{self.label}}  {type_:<{self.type}}  {hx:<{HEX_SHOWN * 2 + 1}}  {meaning}".rstrip()

    def under(self, depth: int, text: str) -> str:
        return f"  {'':>5}  {'  ' * depth}{text}"


def _short_hex(h: str) -> str:
    return h[:HEX_SHOWN * 2] + ("…" if len(h) > HEX_SHOWN * 2 else "")


def _widths(p: Part) -> _Cols:
    rows = []

    def plain(d: dict[str, Any], depth: int) -> None:
        if "value" in d:
            rows.append(("  " * depth + d["name"], d["type"]))
        for c in d.get("fields", []):
            plain(c, depth + 1)

    def walk(f: Field, depth: int) -> None:
        if f.value is not None:
            rows.append(("  " * depth + f.name, f.type))
        for c in f.fields:
            walk(c, depth + 1)
        pt = (f.encrypted or {}).get("plaintext")
        for d in (pt or {}).get("fields", []):
            plain(d, depth + 2)

    for f in p.root.fields:
        walk(f, 0)
    return _Cols(rows)


def _field_lines(f: Field, depth: int, buf: bytes, out: list[str], cols: _Cols) -> None:
    raw = buf[f.offset:f.offset + f.size]
    hx = _short_hex(raw.hex()) if f.value is not None else ""
    out.append(cols.line(str(f.offset), "  " * depth + (f.name or f.type), f.type, hx,
                         _meaning(f.value, f.text, f.bits, f.size)))
    if f.bits is not None:
        clear = [k for k, v in f.bits.items() if not v]
        if clear:
            out.append(cols.under(depth + 1, f"clear: {', '.join(clear)}"))
    if f.note:
        out.append(cols.under(depth + 1, f"({f.note})"))
    for c in f.fields:
        _field_lines(c, depth + 1, buf, out, cols)
    if f.encrypted and f.encrypted.get("plaintext") is not None:
        pt = f.encrypted["plaintext"]
        out.append(cols.under(depth + 1, f"plaintext (tpmtop holds this session's key): {pt['hex'] or 'empty'}"))
        for sub in pt.get("fields", []):
            _plain_lines(sub, depth + 2, out, cols)
    elif f.encrypted and f.encrypted.get("why"):
        out.append(cols.under(depth + 1, f"no plaintext view: {f.encrypted['why']}"))


def _plain_lines(d: dict[str, Any], depth: int, out: list[str], cols: _Cols) -> None:
    """A plaintext field (JSON form, offsets within the plaintext)."""
    hx = _short_hex(d["hex"]) if "value" in d else ""
    out.append(cols.line(f"+{d['offset']}", "  " * depth + d["name"], d["type"], hx,
                         _meaning(d.get("value"), d.get("text"), d.get("bits"), d["size"])))
    if d.get("note"):
        out.append(cols.under(depth + 1, f"({d['note']})"))
    for c in d.get("fields", []):
        _plain_lines(c, depth + 1, out, cols)


def _headline(p: Part) -> str:
    tag = "?" if p.tag is None else \
        {0x8001: "TPM_ST_NO_SESSIONS", 0x8002: "TPM_ST_SESSIONS"}.get(p.tag, f"0x{p.tag:04x}")
    if p.kind == "command":
        what = f"{names.cc_name(p.cc)} (0x{p.cc:08x})" if p.cc is not None else "?"
        return f"Command  {what}  tag {tag}  {p.size} bytes"
    what = f"0x{p.rc:03x} {names.rc_text(p.rc)}" if p.rc is not None else "?"
    return f"Response  rc {what}  tag {tag}  {p.size} bytes"


def part_lines(p: Part) -> list[str]:
    out = [_headline(p)]
    if p.kind == "response" and p.rc:
        hint = names.rc_hint(p.rc)
        if hint:
            out.append(f"  hint: {hint}")
    cols = _widths(p)
    out.append(cols.line("off", "field", "type", "bytes", "value"))
    for f in p.root.fields:
        _field_lines(f, 0, p.buf, out, cols)
    if p.stopped:
        out.append(f"  partial decode: {p.stopped.text()}")
        start = p.raw_from or 0  # not None: decoding stopped
        rest = p.buf[start:]
        out.append(f"  not decoded ({len(rest)} bytes from offset {start}), raw:")
        out.extend("    " + h for h in hex_view(rest, base=start))
    if p.trailing:
        out.append(f"  {p.trailing} bytes after the declared size: {p.buf[-p.trailing:][:64].hex()}")
    if p.complete:
        out.append("  decoded fully")
    return out


def render(d: Decoded, hexdump: bool = True) -> str:
    lines: list[str] = []
    for p in (d.command, d.response):
        if p is None:
            continue
        if lines:
            lines.append("")
        lines.extend(part_lines(p))
        if hexdump:
            lines.extend("  " + h for h in hex_view(p.buf))
    return "\n".join(lines)


def _short_value(f: Field) -> str:
    if f.encrypted:
        return f"({f.size - 2} bytes encrypted)"
    if isinstance(f.value, int):
        return f.text.split(", ")[-1] if f.text else str(f.value)
    if isinstance(f.value, str):
        return f.value[:16] + ("…" if len(f.value) > 16 else "") if f.value else "''"
    if f.type.startswith("TPM2B"):  # size, and the bytes when they are few
        inner = f.fields[1] if len(f.fields) > 1 else None
        if inner is not None and isinstance(inner.value, str) and f.size <= 10:
            return inner.value or "''"
        return f"{f.size - 2}B"
    if f.type.startswith("TPML") and f.fields and isinstance(f.fields[0].value, int):
        return f"{f.type}[{f.fields[0].value}]"
    return f.type


def one_line(p: Part, limit: int = 100) -> str:
    """``pcrHandle=PCR 16 digests=TPML_DIGEST_VALUES`` — a part's handles and parameters on
    one line, for a column of a table of commands."""
    bits = [f"{f.name}={_short_value(f)}" for f in p.handles + p.parameters]
    if p.stopped:
        bits.append(f"[partial: {p.stopped.reading} @{p.stopped.offset}]")
    s = " ".join(bits)
    return s if len(s) <= limit else s[:limit - 1] + "…"
