"""A TPM command and its response decoded to the parameter level, for a human to read.

tpm2-pytss's ``command_parser`` knows each command's handle count and parameter types, and
its types unmarshal themselves; ``read_command``/``read_response`` stop at the first error
without saying where. This module walks the same layout one field at a time (header,
handles, authorization area, parameters) with those types, so a garbled buffer still gives
everything up to the field that failed and says at which byte offset and while reading what.

Slow (0.2–0.5 ms a pair on this project's 2-core VM, benchmarks/pcap_roundtrip.py): only for
the one command someone looks at, never on the recorder's path.
Core module (layer ``tpm``): no Textual, no Rich.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from tpmtop.tpm import names

_HDR = struct.Struct(">HII")

# Permanent handles (TPM 2.0 Part 2, 7.4) by name, for the handle column.
_PERMANENT = {
    0x40000001: "TPM_RH_OWNER", 0x40000007: "TPM_RH_NULL", 0x40000009: "TPM_RS_PW",
    0x4000000A: "TPM_RH_LOCKOUT", 0x4000000B: "TPM_RH_ENDORSEMENT", 0x4000000C: "TPM_RH_PLATFORM",
    0x4000000D: "TPM_RH_PLATFORM_NV", 0x40000010: "TPM_RH_AUTH_00",
}


def handle_name(h: int) -> str:
    """``TPM_RH_OWNER``, ``PCR 16``, ``transient 0x80000001`` … — what a handle is."""
    if h in _PERMANENT:
        return _PERMANENT[h]
    kind = names.handle_kind(h)
    if kind == "pcr":
        return f"PCR {h}"
    return f"{kind} 0x{h:08x}"


@dataclass
class Stop:
    """Where decoding stopped on a buffer that does not follow the layout."""

    offset: int
    reading: str
    error: str

    def text(self) -> str:
        return f"stopped at byte {self.offset} reading {self.reading}: {self.error}"


@dataclass
class Part:
    """One decoded buffer (a command or a response)."""

    kind: str  # "command" | "response"
    size: int
    tag: int | None = None
    declared_size: int | None = None
    cc: int | None = None
    rc: int | None = None
    handles: list[dict] = field(default_factory=list)
    sessions: list[dict] = field(default_factory=list)
    parameters: list[dict] = field(default_factory=list)
    stopped: Stop | None = None
    trailing: int = 0  # bytes after the declared size or after the last parameter

    @property
    def complete(self) -> bool:
        return self.stopped is None

    def to_json(self) -> dict:
        d: dict[str, Any] = {"size": self.size, "tag": self.tag, "declared_size": self.declared_size}
        if self.kind == "command":
            d["command_code"] = self.cc
            d["command"] = names.cc_name(self.cc) if self.cc is not None else None
        else:
            d["response_code"] = self.rc
            d["rc_text"] = names.rc_text(self.rc) if self.rc is not None else None
        d.update(handles=self.handles, sessions=self.sessions, parameters=self.parameters,
                 complete=self.complete, trailing_bytes=self.trailing,
                 stopped=None if self.stopped is None else
                 {"offset": self.stopped.offset, "reading": self.stopped.reading,
                  "error": self.stopped.error, "text": self.stopped.text()})
        return d


class _Short(Exception):
    pass


class _Cursor:
    def __init__(self, buf: bytes, end: int):
        self.buf, self.off, self.end = buf, 0, end

    def take(self, n: int) -> bytes:
        if self.off + n > self.end:
            raise _Short(f"needs {n} bytes, {max(self.end - self.off, 0)} left")
        b = self.buf[self.off:self.off + n]
        self.off += n
        return b

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def tpm2b(self) -> bytes:
        return self.take(self.u16())


def _value_json(v: Any) -> Any:
    """A tpm2-pytss value as plain JSON (structures as dicts, byte strings as hex)."""
    from tpm2_pytss.encoding import base_encdec

    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if hasattr(v, "underlying_type") and hasattr(v, "marshal"):  # TPM_ENCRYPTED_PARAMETER
        return {"encrypted": bytes(v).hex()}
    try:
        return _friendly(base_encdec().encode(v))
    except Exception:  # a type the encoder does not know: its integer or bytes
        if isinstance(v, int):
            return int(v)
        try:
            return bytes(v).hex()
        except Exception:
            return repr(v)


def _enum_text(key: str, v: int) -> str | int:
    """``sha256 (0x000b)`` for the algorithm, curve and capability fields a reader looks for."""
    from tpm2_pytss.constants import TPM2_ALG, TPM2_CAP, TPM2_ECC

    table = (TPM2_ECC if key == "curveID" else TPM2_CAP if key == "capability"
             else TPM2_ALG if key.endswith("Alg") or key in ("algorithm", "type", "scheme", "mode", "kdf")
             else None)
    if table is None:
        return v
    try:
        return f"{table(v)} (0x{v:04x})"
    except Exception:
        return v


def _se_text(v: int) -> str | int:
    return {0x00: "HMAC (0x00)", 0x01: "policy (0x01)", 0x03: "trial (0x03)"}.get(v, v)


# parameters that are a bare enum: shown by name as well
_TOP_ENUMS = {"TPM2_ALG": lambda v: _enum_text("algorithm", v), "TPMI_ALG_HASH": lambda v: _enum_text("hashAlg", v),
              "TPM2_SE": _se_text, "TPM2_CAP": lambda v: _enum_text("capability", v)}


def _friendly(x: Any, key: str = "") -> Any:
    if isinstance(x, dict):
        return {k: _friendly(y, k) for k, y in x.items()}
    if isinstance(x, list):
        return [_friendly(y, key) for y in x]
    if isinstance(x, int) and not isinstance(x, bool) and key:
        return _enum_text(key, x)
    return x


def _type_name(t) -> str:
    from typing import get_args, get_origin

    origin = get_origin(t)
    if origin is not None:
        return f"encrypted {get_args(t)[0].__name__}"
    return getattr(t, "__name__", str(t))


def _param_types(cc: int, command: bool, encrypted: bool):
    from tpm2_pytss.command_parser import _set_encrypted_parameter, tpm2_command, tpm2_response
    from tpm2_pytss.constants import TPM2_CC, TPMA_SESSION

    cls = (tpm2_command if command else tpm2_response)
    klass = cls.lookup_command_class(TPM2_CC(cc)) if command else cls.lookup_response_class(TPM2_CC(cc))
    flag = TPMA_SESSION.DECRYPT if command else TPMA_SESSION.ENCRYPT

    class _S:  # what _set_encrypted_parameter reads from a session
        attributes = flag if encrypted else 0

    return klass, _set_encrypted_parameter(klass.parameter_types(), [_S()], flag)


def _parameters(part: Part, c: _Cursor, types) -> None:
    from typing import get_args, get_origin

    for i, t in enumerate(types):
        start = c.off
        label = f"parameter {i + 1} ({_type_name(t)})"
        try:
            origin = get_origin(t)
            data = c.buf[c.off:c.end]
            if origin is not None:
                value, used = origin.unmarshal(get_args(t)[0], data)
            else:
                value, used = t.unmarshal(data)
            if used > len(data):
                raise _Short(f"needs {used} bytes, {len(data)} left")
        except Exception as e:  # arbitrary bytes: any unmarshalling failure is a finding
            part.stopped = Stop(start, label, str(e) or type(e).__name__)
            return
        c.off += used
        tname = _type_name(t)
        v = _value_json(value)
        if isinstance(v, int) and tname in _TOP_ENUMS:
            v = _TOP_ENUMS[tname](v)
        part.parameters.append({"index": i + 1, "type": tname, "offset": start, "size": used, "value": v})


def _u32(part: Part, c: _Cursor, what: str) -> int | None:
    """A 4-byte field, or None with ``part.stopped`` saying where and why."""
    at = c.off
    try:
        return c.u32()
    except _Short as e:
        part.stopped = Stop(at, what, str(e))
        return None


def _handle(part: Part, c: _Cursor, what: str) -> bool:
    at = c.off
    h = _u32(part, c, what)
    if h is None:
        return False
    part.handles.append({"handle": f"0x{h:08x}", "name": handle_name(h), "offset": at})
    return True


def _sized_area(part: Part, c: _Cursor, what: str) -> int | None:
    """A UINT32 size and the end offset of the area it announces, checked against the buffer."""
    at = c.off
    size = _u32(part, c, f"{what} size")
    if size is None:
        return None
    if c.off + size > c.end:
        part.stopped = Stop(at, what, f"declares {size} bytes, {c.end - c.off} left")
        return None
    return c.off + size


def _decode_part(part: Part, buf: bytes, body) -> Part:
    c = _header(part, buf)
    if c is None:
        return part
    truncated = part.stopped  # the header promised more than the buffer holds
    part.stopped = None
    body(c)
    if part.stopped is None and truncated is not None:
        part.stopped = truncated
    return part


def _header(part: Part, buf: bytes) -> _Cursor | None:
    if len(buf) < 10:
        part.stopped = Stop(0, "the 10-byte header", f"only {len(buf)} bytes")
        return None
    part.tag, part.declared_size, code = _HDR.unpack_from(buf, 0)
    if part.kind == "command":
        part.cc = code
    else:
        part.rc = code
    if part.tag not in (0x8001, 0x8002):
        part.stopped = Stop(0, "the tag", f"0x{part.tag:04x} is neither TPM_ST_NO_SESSIONS nor TPM_ST_SESSIONS")
        return None
    end = min(part.declared_size, len(buf))
    part.trailing = max(len(buf) - part.declared_size, 0)
    c = _Cursor(buf, end)
    c.off = 10
    if part.declared_size > len(buf):
        # Keep going: the fields that are there are still worth showing; the stop says why.
        part.stopped = Stop(len(buf), "past the end", f"header declares {part.declared_size} bytes, "
                                                      f"buffer has {len(buf)}")
    return c


def decode_command(buf: bytes) -> Part:
    part = Part("command", len(buf))
    return _decode_part(part, buf, lambda c: _command_body(part, c))


def _command_body(part: Part, c: _Cursor) -> None:
    try:
        klass, _ = _param_types(part.cc, True, False)
    except Exception:
        part.stopped = Stop(6, "the command code", f"0x{part.cc:08x} is not a command tpm2-pytss knows")
        return
    for i in range(klass.num_handles()):
        if not _handle(part, c, f"handle {i + 1}"):
            return
    encrypted = False
    if part.tag == 0x8002:
        area_end = _sized_area(part, c, "the authorization area")
        if area_end is None:
            return
        while c.off < area_end:
            at = c.off
            n = len(part.sessions) + 1
            try:
                sh = c.u32()
                nonce = c.tpm2b()
                attrs = c.take(1)[0]
                hmac = c.tpm2b()
            except _Short as e:
                part.stopped = Stop(at, f"session {n}", str(e))
                return
            if c.off > area_end:
                part.stopped = Stop(at, f"session {n}", "runs past the authorization area")
                return
            encrypted = encrypted or bool(attrs & 0x20)
            part.sessions.append({"handle": f"0x{sh:08x}", "name": handle_name(sh), "offset": at,
                                  "nonce_size": len(nonce), "attrs": attrs,
                                  "attrs_text": names.session_attr_text(attrs), "hmac_size": len(hmac)})
    _, types = _param_types(part.cc, True, encrypted)
    _parameters(part, c, types)
    if part.stopped is None and c.off < c.end:
        part.trailing += c.end - c.off


def decode_response(buf: bytes, cc: int | None) -> Part:
    part = Part("response", len(buf))
    return _decode_part(part, buf, lambda c: _response_body(part, c, cc))


def _response_body(part: Part, c: _Cursor, cc: int | None) -> None:
    if part.rc != 0:
        return  # an error response is the header alone
    if cc is None:
        part.stopped = Stop(10, "the parameters", "the command code is unknown (no command to match)")
        return
    try:
        klass, _ = _param_types(cc, False, False)
    except Exception:
        part.stopped = Stop(10, "the parameters", f"0x{cc:08x} is not a command tpm2-pytss knows")
        return
    if klass.has_handle() and not _handle(part, c, "the response handle"):
        return
    param_end = c.end
    if part.tag == 0x8002:
        param_end = _sized_area(part, c, "the parameter area")
        if param_end is None:
            return
    # Sessions follow the parameters; read them first to know whether the first parameter
    # is encrypted (the response direction's ENCRYPT bit).
    sessions_stop = None
    s = _Cursor(c.buf, c.end)
    s.off = param_end
    while part.tag == 0x8002 and s.off < s.end:
        at = s.off
        n = len(part.sessions) + 1
        try:
            nonce = s.tpm2b()
            attrs = s.take(1)[0]
            hmac = s.tpm2b()
        except _Short as e:
            sessions_stop = Stop(at, f"response session {n}", str(e))
            break
        part.sessions.append({"offset": at, "nonce_size": len(nonce), "attrs": attrs,
                              "attrs_text": names.session_attr_text(attrs), "hmac_size": len(hmac)})
    encrypted = any(x["attrs"] & 0x40 for x in part.sessions)
    _, types = _param_types(cc, False, encrypted)
    p = _Cursor(c.buf, param_end)
    p.off = c.off
    _parameters(part, p, types)
    if part.stopped is None and p.off < param_end:
        part.trailing += param_end - p.off
    if part.stopped is None:
        part.stopped = sessions_stop


@dataclass
class Decoded:
    command: Part | None
    response: Part | None
    command_bytes: bytes | None
    response_bytes: bytes | None

    @property
    def complete(self) -> bool:
        return all(p.complete for p in (self.command, self.response) if p is not None)

    def to_json(self) -> dict:
        return {
            "complete": self.complete,
            "command": self.command.to_json() if self.command else None,
            "response": self.response.to_json() if self.response else None,
            "hex": {"command": self.command_bytes.hex() if self.command_bytes is not None else None,
                    "response": self.response_bytes.hex() if self.response_bytes is not None else None},
        }


def looks_like_response(buf: bytes) -> bool:
    """A lone buffer: a response when its third field is not a known command code."""
    if len(buf) < 10:
        return False
    code = int.from_bytes(buf[6:10], "big")
    return code not in names.CC_NAMES


def decode(command: bytes | None, response: bytes | None = None, cc: int | None = None) -> Decoded:
    """Decode a command and/or its response. ``cc`` names the command of a lone response."""
    cp = decode_command(command) if command is not None else None
    if cp is not None and cp.cc is not None:
        cc = cp.cc
    rp = decode_response(response, cc) if response is not None else None
    return Decoded(cp, rp, command, response)


# -- text --------------------------------------------------------------------------------

def hex_view(buf: bytes, width: int = 16) -> list[str]:
    """``offset  hex bytes  ascii`` lines, as xxd prints them."""
    out = []
    for off in range(0, len(buf), width):
        chunk = buf[off:off + width]
        hx = " ".join(f"{b:02x}" for b in chunk)
        asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        out.append(f"{off:08x}  {hx:<{width * 3 - 1}}  {asc}")
    return out


def _value_lines(v: Any, indent: str, limit: int = 160) -> list[str]:
    if isinstance(v, dict):
        out = []
        for k, x in v.items():
            if isinstance(x, (dict, list)) and x:
                out.append(f"{indent}{k}:")
                out.extend(_value_lines(x, indent + "  ", limit))
            else:
                out.append(f"{indent}{k}: {_short(x, limit)}")
        return out
    if isinstance(v, list):
        out = []
        for x in v:
            if isinstance(x, dict) and x and not any(isinstance(y, (dict, list)) for y in x.values()):
                out.append(f"{indent}- " + _short(", ".join(f"{k}: {y}" for k, y in x.items()), limit))
            elif isinstance(x, (dict, list)) and x:
                out.append(f"{indent}-")
                out.extend(_value_lines(x, indent + "  ", limit))
            else:
                out.append(f"{indent}- {_short(x, limit)}")
        return out
    return [f"{indent}{_short(v, limit)}"]


def _short(x: Any, limit: int) -> str:
    s = str(x) if not isinstance(x, str) else x
    return s if len(s) <= limit else s[:limit - 1] + "…"


def _part_lines(p: Part) -> list[str]:
    out = []
    tag = {0x8001: "TPM_ST_NO_SESSIONS", 0x8002: "TPM_ST_SESSIONS"}.get(p.tag, f"0x{p.tag:04x}" if p.tag is not None else "?")
    if p.kind == "command":
        what = f"{names.cc_name(p.cc)} (0x{p.cc:08x})" if p.cc is not None else "?"
        out.append(f"Command  {what}  tag {tag}  {p.size} bytes")
    else:
        what = f"0x{p.rc:03x} {names.rc_text(p.rc)}" if p.rc is not None else "?"
        out.append(f"Response  rc {what}  tag {tag}  {p.size} bytes")
        if p.rc:
            hint = names.rc_hint(p.rc)
            if hint:
                out.append(f"  hint: {hint}")
    for i, h in enumerate(p.handles, 1):
        label = "handle" if p.kind == "command" else "response handle"
        out.append(f"  {label} {i}: {h['handle']}  {h['name']}")
    for i, s in enumerate(p.sessions, 1):
        who = f"{s['handle']} {s['name']}  " if "handle" in s else ""
        attrs = s["attrs_text"] if s["attrs"] else "(none: the TPM ends the session)"
        out.append(f"  session {i}: {who}attrs 0x{s['attrs']:02x} {attrs}  "
                   f"nonce {s['nonce_size']} bytes  hmac {s['hmac_size']} bytes")
    for prm in p.parameters:
        v = prm["value"]
        if isinstance(v, (dict, list)) and v:
            out.append(f"  parameter {prm['index']} {prm['type']} ({prm['size']} bytes):")
            out.extend(_value_lines(v, "    "))
        else:
            out.append(f"  parameter {prm['index']} {prm['type']} ({prm['size']} bytes): {_short(v, 160)}")
    if p.trailing:
        out.append(f"  {p.trailing} bytes left over after the last field")
    out.append(f"  partial decode: {p.stopped.text()}" if p.stopped else "  decoded fully")
    return out


def render(d: Decoded, hexdump: bool = True) -> str:
    lines: list[str] = []
    for p, raw in ((d.command, d.command_bytes), (d.response, d.response_bytes)):
        if p is None:
            continue
        if lines:
            lines.append("")
        lines.extend(_part_lines(p))
        if hexdump and raw is not None:
            lines.extend("  " + h for h in hex_view(raw))
    return "\n".join(lines)
