"""A decode as text: one line per field, with its offset, spec name, type, bytes and meaning.

The layout follows ``tpmstream convert``'s (type, path, hex, value) so a TPM engineer reads both
the same way, indented by structure depth. Strings here come from the spec tables and from
numbers; the only bytes of the wire shown as text are hex.
"""

from __future__ import annotations

from tpmtop.decode.model import Decoded, Field, Part
from tpmtop.tpm import names

HEX_SHOWN = 24  # bytes of a field's hex shown on its line; the hex view has them all


def hex_view(buf: bytes, width: int = 16, base: int = 0) -> list[str]:
    """``offset  hex bytes  ascii`` lines, as xxd prints them (offsets from ``base``)."""
    out = []
    for off in range(0, len(buf), width):
        chunk = buf[off:off + width]
        hx = " ".join(f"{b:02x}" for b in chunk)
        asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        out.append(f"{base + off:08x}  {hx:<{width * 3 - 1}}  {asc}")
    return out


def _meaning(f: Field) -> str:
    if isinstance(f.value, int):
        # a value with a meaning (a name, a handle, bits) in hex as the spec writes it; a number in decimal
        v = f"0x{f.value:0{f.size * 2}x}" if f.text or f.bits is not None else str(f.value)
        return f"{v}  {f.text}" if f.text else v
    if isinstance(f.value, str):  # a byte buffer: its hex is the value
        return f"{f.size} bytes" if f.size else "empty"
    return ""


def _field_lines(f: Field, depth: int, buf: bytes, out: list[str]) -> None:
    raw = buf[f.offset:f.offset + f.size]
    hx = raw[:HEX_SHOWN].hex() + ("…" if len(raw) > HEX_SHOWN else "")
    label = "  " * depth + (f.name or f.type)
    line = f"  {f.offset:>5}  {label:<38} {f.type:<30} {hx if (f.value is not None) else ''}"
    m = _meaning(f)
    if m:
        line = f"{line:<{2 + 5 + 2 + 38 + 1 + 30 + 1 + 20}} {m}"
    out.append(line.rstrip())
    if f.bits is not None:
        clear = [k for k, v in f.bits.items() if not v]
        if clear:
            out.append(f"  {'':>5}  {'  ' * (depth + 1)}clear: {', '.join(clear)}")
    if f.note:
        out.append(f"  {'':>5}  {'  ' * (depth + 1)}({f.note})")
    for c in f.fields:
        _field_lines(c, depth + 1, buf, out)
    if f.encrypted and f.encrypted.get("plaintext") is not None:
        pt = f.encrypted["plaintext"]
        out.append(f"  {'':>5}  {'  ' * (depth + 1)}plaintext (tpmtop holds this session's key): "
                   f"{pt['hex'] or 'empty'}")
        for sub in pt.get("fields", []):
            _plain_lines(sub, depth + 2, out)
    elif f.encrypted and f.encrypted.get("why"):
        out.append(f"  {'':>5}  {'  ' * (depth + 1)}no plaintext view: {f.encrypted['why']}")


def _plain_lines(d: dict, depth: int, out: list[str]) -> None:
    """A plaintext field (JSON form, offsets within the plaintext)."""
    hx = d["hex"][:HEX_SHOWN * 2] + ("…" if len(d["hex"]) > HEX_SHOWN * 2 else "")
    label = "  " * depth + d["name"]
    line = f"  {'+' + str(d['offset']):>5}  {label:<38} {d['type']:<30} {hx if 'value' in d else ''}"
    meaning = d.get("text") or (str(d["value"]) if isinstance(d.get("value"), int) else "")
    if meaning:
        line = f"{line:<{2 + 5 + 2 + 38 + 1 + 30 + 1 + 20}} {meaning}"
    out.append(line.rstrip())
    if d.get("note"):
        out.append(f"  {'':>5}  {'  ' * (depth + 1)}({d['note']})")
    for c in d.get("fields", []):
        _plain_lines(c, depth + 1, out)


def _headline(p: Part) -> str:
    tag = {0x8001: "TPM_ST_NO_SESSIONS", 0x8002: "TPM_ST_SESSIONS"}.get(p.tag, f"0x{p.tag:04x}" if p.tag is not None else "?")
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
    out.append(f"  {'off':>5}  {'field':<38} {'type':<30} {'bytes':<20} value")
    for f in p.root.fields:
        _field_lines(f, 0, p.buf, out)
    if p.stopped:
        out.append(f"  partial decode: {p.stopped.text()}")
        rest = p.buf[p.raw_from:]
        out.append(f"  not decoded ({len(rest)} bytes from offset {p.raw_from}), raw:")
        out.extend("    " + h for h in hex_view(rest, base=p.raw_from))
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
