"""Field-level decode of TPM 2.0 commands and responses, walking tpmstream's Part 2/3 tables.

The tables (every command's handle and parameter structures, every TPMS/TPMT/TPML/TPMU/TPM2B
with its field names, union selectors, enumerations and attribute bits) are tpmstream's
(PyPI ``tpmstream``, BSD), used as a dependency. tpmstream's own decoder feeds its tables one
byte at a time through coroutines and emits an event per byte of every buffer: 1 ms for a
median pair and over 10 ms at the 99th percentile on this project's VM, more than a
dashboard's Enter may take. This walker reads the same tables with slices instead: the
same fields, ~10× faster (docs/benchmarks.md "Which decoder", benchmarks/decode.py). tests/decode/test_decode_corpus.py
checks it against tpmstream's decoder field by field on real traffic.

A field that cannot be decoded stops the walk: the Part records where (offset, path) and
why; the fields before it stay, the bytes from there on are shown raw.
Core module (below ``sources``): no Textual, no Rich.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any

from tpmstream.spec.commands.commands_handles import command_handle_types
from tpmstream.spec.commands.commands_params import command_param_types
from tpmstream.spec.commands.responses_handles import response_handle_types
from tpmstream.spec.commands.responses_params import response_param_types
from tpmstream.spec.structures.base_types import BYTE, UINT8, UINT32
from tpmstream.spec.structures.constants import TPM_CC, TPM_ST
from tpmstream.spec.structures.interface_types import TPMI_ST_COMMAND_TAG
from tpmstream.spec.structures.structures import TPMS_AUTH_COMMAND, TPMS_AUTH_RESPONSE

from tpmtop.decode.model import Decoded, Field, Part, Stop
from tpmtop.tpm import names

ST_NO_SESSIONS, ST_SESSIONS = 0x8001, 0x8002
ATTR_DECRYPT, ATTR_ENCRYPT = 0x20, 0x40  # TPMA_SESSION: command / response parameter encryption
_BYTES = (BYTE, UINT8)


# A tpmstream table class (a TPMS/TPMT/TPML/TPMU/TPM2B, an enumeration, a primitive): tpmstream
# ships no type information, so its classes are Any here.
_TpmType = Any
# plaintext(part, first parameter, command) -> the plaintext view of an encrypted parameter, or None
PlaintextFn = Callable[[Part, Field, "Part | None"], "dict[str, Any] | None"]


class _Fail(Exception):
    def __init__(self, offset: int, path: str, why: str):
        super().__init__(why)
        self.offset, self.path, self.why = offset, path, why


# -- what the tables say about a type (cached: tpmstream's look-ups walk class members) -----------

@cache
def _command_types() -> dict[int, tuple[_TpmType, _TpmType]]:
    """(handles, parameters) structure of each command, by command code (TPM_CC(x) costs ~0.7 ms)."""
    return {int(cc): (t, command_param_types[cc]) for cc, t in command_handle_types.items()}


@cache
def _response_types() -> dict[int, tuple[_TpmType, _TpmType]]:
    return {int(cc): (t, response_param_types[cc]) for cc, t in response_handle_types.items()}


def _is_list(t: _TpmType) -> bool:
    return getattr(t, "__origin__", None) is list


@cache
def _fields(t: _TpmType) -> tuple[tuple[str, _TpmType], ...]:
    return tuple((f.name, f.type) for f in dataclasses.fields(t))


@cache
def _union_members(t: _TpmType) -> tuple[dict[int, str], str | None, dict[str, _TpmType]]:
    by_sel: dict[int, str] = {}
    fallback: str | None = None
    for name, sel in t._selected_by.items():  # as tpmstream reads it: a later entry wins
        if sel is None:
            fallback = name
        elif hasattr(sel, "__int__") and not isinstance(sel, type):
            by_sel[int(sel)] = name
    return by_sel, fallback, dict(_fields(t))


@cache
def _bit_masks(t: _TpmType) -> tuple[tuple[str, int], ...]:
    return tuple((a._name, int(a._value)) for a in t(0).attributes())


def _is_bitfield(t: _TpmType) -> bool:
    return hasattr(t, "attributes") and not hasattr(t, "by_value")


@cache
def _enum_table(cls: _TpmType) -> tuple[dict[int, str], tuple[Any, ...]]:
    """An enumeration's members by value, and its named ranges: tpmstream resolves a value by
    walking the class's members on every call (~0.7 ms), once here per type."""
    members: dict[int, str] = {}
    ranges: list[Any] = []
    for m in cls.class_iter():
        if hasattr(m, "by_number"):
            ranges.append(m)
        else:
            members.setdefault(int(m._value), f"{cls.__name__}.{m._name}")
    return members, tuple(ranges)


def _resolve(t: _TpmType, value: int) -> tuple[bool, str | None]:
    """(valid, name) of ``value`` as tpmstream's ValidValues.get reads the type's values."""
    for v in t._valid_values._values:
        if isinstance(v, range):
            if value in v:
                return True, None
        elif hasattr(v, "by_number"):  # NamedRange
            if value in v:
                return True, f"{v._type.__name__}.{v.by_number(value)._name}"
        elif isinstance(v, type):  # an enumeration class
            members, ranges = _enum_table(v)
            if value in members:
                return True, members[value]
            for r in ranges:
                if value in r:
                    return True, f"{r._type.__name__}.{r.by_number(value)._name}"
        elif int(v) == value:  # one member
            return True, f"{type(v).__name__}.{v._name}" if getattr(v, "_name", None) else None
    return False, None


@lru_cache(maxsize=8192)
def _describe(t: _TpmType, value: int) -> tuple[str | None, dict[str, int] | None, str | None]:
    """(text, bits, note) for a primitive value of type ``t``."""
    if _is_bitfield(t):
        bits: dict[str, int] = {}
        on: list[str] = []
        reserved = 0
        for name, mask in _bit_masks(t):
            v = value & mask
            if name.startswith("reserved"):
                reserved |= v
                continue
            shift = (mask & -mask).bit_length() - 1
            bits[name] = v >> shift
            if v:
                on.append(name if mask & (mask - 1) == 0 else f"{name}={v >> shift}")
        note = f"reserved bits set: 0x{reserved:x}" if reserved else None
        return " | ".join(on) if on else "(none set)", bits, note
    vv = getattr(t, "_valid_values", None)
    if vv is None:
        return None, None, None
    valid, resolved = _resolve(t, value)
    return resolved, None, None if valid else f"0x{value:x} is not a valid {t.__name__}"


_HANDLE_TYPES = ("TPMI_DH", "TPMI_RH", "TPMI_SH", "TPM_HANDLE", "TPMI_YES", "TPM_RH", "TPM_HR")


def _is_handle_type(t: _TpmType) -> bool:
    n: str = t.__name__
    return n.startswith(_HANDLE_TYPES) and not n.startswith("TPMI_YES")


def handle_name(h: int) -> str:
    """``TPM_RH_OWNER``, ``PCR 16``, ``hmac-session 0x02000000`` … — what a handle is."""
    perm = _PERMANENT.get(h)
    if perm:
        return perm
    kind = names.handle_kind(h)
    return f"PCR {h}" if kind is names.HandleType.PCR else f"{kind} 0x{h:08x}"


_PERMANENT = {
    0x40000001: "TPM_RH_OWNER", 0x40000007: "TPM_RH_NULL", 0x40000009: "TPM_RS_PW",
    0x4000000A: "TPM_RH_LOCKOUT", 0x4000000B: "TPM_RH_ENDORSEMENT", 0x4000000C: "TPM_RH_PLATFORM",
    0x4000000D: "TPM_RH_PLATFORM_NV", 0x40000010: "TPM_RH_AUTH_00",
}


# -- the walker --------------------------------------------------------------------------

class _Walker:
    def __init__(self, buf: bytes, end: int):
        self.buf = buf
        self.ends = [end]

    def _need(self, off: int, n: int, path: str) -> None:
        end = self.ends[-1]
        if off + n > end:
            where = "the enclosing size" if len(self.ends) > 1 else "the buffer"
            raise _Fail(off, path, f"needs {n} bytes, {max(end - off, 0)} left in {where}")

    def prim(self, t: _TpmType, name: str, path: str, off: int, parent: Field) -> tuple[int, int]:
        n: int = t._int_size
        self._need(off, n, path)
        value = int.from_bytes(self.buf[off:off + n], "big", signed=t._signed)
        f = Field(name, path, t.__name__, off, n, value)
        f.text, f.bits, f.note = _describe(t, value)
        if _is_handle_type(t) and (not f.text or value >> 24 == 0):
            # tpmstream's name when it has one (TPM_HR.HMAC_SESSION.000000), but a PCR in
            # decimal: tpmstream's TPM_HR.PCR.10 is PCR 16
            f.text = handle_name(value)
        parent.fields.append(f)
        return off + n, value

    def raw(self, name: str, path: str, type_name: str, off: int, n: int, parent: Field) -> Field:
        self._need(off, n, path)
        f = Field(name, path, type_name, off, n, self.buf[off:off + n].hex())
        parent.fields.append(f)
        return f

    def walk(self, t: _TpmType, name: str, path: str, off: int, parent: Field,
             selector: int | None = None, count: int | None = None) -> tuple[int, int | None]:
        if hasattr(t, "_int_size"):
            return self.prim(t, name, path, off, parent)
        if _is_list(t):
            return self.array(t, name, path, off, parent, count), None
        if t.__name__.startswith("TPM2B"):
            return self.tpm2b(t, name, path, off, parent), None
        if hasattr(t, "_selected_by"):
            return self.union(t, name, path, off, parent, selector), None
        return self.struct(t, name, path, off, parent), None

    def array(self, t: _TpmType, name: str, path: str, off: int, parent: Field, count: int | None) -> int:
        elem = t.__args__[0]
        left = self.ends[-1] - off
        assert count is not None  # an array follows its count field
        if count > left:  # every element takes at least a byte: a garbled count stops here
            raise _Fail(off, path, f"count {count} is more than the {max(left, 0)} bytes left")
        if elem in _BYTES:
            return off + self.raw(name, path, f"BYTE[{count}]", off, count, parent).size
        f = Field(name, path, f"{elem.__name__}[{count}]", off)
        parent.fields.append(f)
        start = off
        for i in range(count):
            off, _ = self.walk(elem, f"{name}[{i}]", f"{path}[{i}]", off, f)
        f.size = off - start
        return off

    def tpm2b(self, t: _TpmType, name: str, path: str, off: int, parent: Field,
              encrypted: dict[str, Any] | None = None) -> int:
        (size_name, size_t), (buf_name, buf_t) = _fields(t)
        f = Field(name, path, t.__name__, off)
        parent.fields.append(f)
        off, size = self.prim(size_t, size_name, f"{path}.{size_name}", off, f)
        end = off + size
        if end > self.ends[-1]:
            raise _Fail(off - 2, f"{path}.{size_name}",
                        f"says {size} bytes follow, {max(self.ends[-1] - off, 0)} left")
        f.size = 2 + size
        bpath = f"{path}.{buf_name}"
        if encrypted is not None:  # ciphertext: named as tpmstream names it (TPM2B_ENCRYPTED_PARAM)
            self.raw("encryptedParam", f"{path}.encryptedParam", f"BYTE[{size}]", off, size, f)
            f.note = _encrypted_note(encrypted)
            f.encrypted = encrypted
            return end
        if _is_list(buf_t):
            self.raw(buf_name, bpath, f"BYTE[{size}]", off, size, f)
            return end
        if size == 0:
            f.note = f"empty: size 0, no {buf_t.__name__}"
            return end
        self.ends.append(end)
        try:
            used, _ = self.walk(buf_t, buf_name, bpath, off, f)
        finally:
            self.ends.pop()
        if used != end:
            raise _Fail(used, bpath, f"{t.__name__}.size says {size} bytes, its {buf_t.__name__} "
                                     f"used {used - off}")
        return end

    def union(self, t: _TpmType, name: str, path: str, off: int, parent: Field, selector: int | None) -> int:
        by_sel, fallback, members = _union_members(t)
        member = by_sel.get(int(selector), fallback) if selector is not None else fallback
        if member is None:
            assert selector is not None  # no selector: the fallback member
            raise _Fail(off, path, f"selector 0x{int(selector):x} selects no member of {t.__name__}")
        mt = members[member]
        f = Field(name, path, f"{t.__name__}.{member}", off)
        parent.fields.append(f)
        if mt is None:
            assert selector is not None  # an empty member is selected
            f.note = f"empty for selector 0x{int(selector):x}"
            return off
        if _is_list(mt):  # a digest: statically sized by its hash algorithm
            n: int = t._list_size[member]
            self.raw(member, f"{path}.{member}", f"BYTE[{n}]", off, n, f)
            f.size = n
            return off + n
        end, _ = self.walk(mt, member, f"{path}.{member}", off, f)
        f.size = end - off
        return end

    def struct(self, t: _TpmType, name: str, path: str, off: int, parent: Field,
               first_encrypted: dict[str, Any] | None = None) -> int:
        f = Field(name, path, t.__name__, off)
        parent.fields.append(f)
        start = off
        values: dict[str, int | None] = {}
        last_int = None
        selectors = getattr(t, "_selectors", {})
        for i, (fname, ft) in enumerate(_fields(t)):
            fpath = f"{path}.{fname}" if path else fname
            if i == 0 and first_encrypted is not None and ft.__name__.startswith("TPM2B"):
                off = self.tpm2b(ft, fname, fpath, off, f, encrypted=first_encrypted)
                continue
            if _is_list(ft):
                off, v = self.walk(ft, fname, fpath, off, f, count=last_int)
            elif fname in selectors:
                off, v = self.walk(ft, fname, fpath, off, f, selector=values.get(selectors[fname]))
            else:
                off, v = self.walk(ft, fname, fpath, off, f)
            values[fname] = v
            if isinstance(v, int):
                last_int = v
        f.size = off - start
        return off

    def sessions(self, t: _TpmType, name: str, path: str, off: int, parent: Field, end: int) -> int:
        """The authorization area: TPMS_AUTH_COMMAND/RESPONSE until ``end``."""
        f = Field(name, path, f"{t.__name__}[]", off)
        parent.fields.append(f)
        start = off
        self.ends.append(end)
        try:
            i = 0
            while off < end:
                off = self.struct(t, f"{name}[{i}]", f"{path}[{i}]", off, f)
                i += 1
        finally:
            self.ends.pop()
        f.size = off - start
        return off


def _encrypted_note(enc: dict[str, Any]) -> str:
    mode = f", {enc['mode']}" if enc.get("mode") else ""
    return f"encrypted by session {enc['session']}{mode}: ciphertext, not decoded as structure"


def _session_handle(session: Field) -> int | None:
    h = session.fields[0] if session.fields and session.fields[0].name == "sessionHandle" else None
    return h.value if h else None


def _session_attrs(session: Field) -> int:
    a = next((x for x in session.fields if x.name == "sessionAttributes"), None)
    return a.value if a is not None and isinstance(a.value, int) else 0


# -- command and response ---------------------------------------------------------------

def _header(part: Part, w: _Walker, tag_t: _TpmType, size_name: str, code_t: _TpmType, code_name: str) -> int:
    """tag, size, code; sets the walker's end from the declared size. None: no body to read."""
    buf = part.buf
    off, part.tag = w.prim(tag_t, "tag", "tag", 0, part.root)
    if part.tag not in (ST_NO_SESSIONS, ST_SESSIONS):
        raise _Fail(0, "tag", f"0x{part.tag:04x} is neither TPM_ST_NO_SESSIONS nor TPM_ST_SESSIONS")
    off, declared = w.prim(UINT32, size_name, size_name, off, part.root)
    off, code = w.prim(code_t, code_name, code_name, off, part.root)
    if part.kind == "command":
        part.cc = code
        part.root.fields[-1].text = names.cc_name(code)
    else:
        part.rc = code
        rcf = part.root.fields[-1]
        rcf.text, rcf.bits, rcf.note = names.rc_text(code), None, None
    if declared < 10:
        raise _Fail(2, size_name, f"{declared} is smaller than the 10-byte header")
    if declared < len(buf):
        part.trailing = len(buf) - declared
        w.ends[-1] = declared
    elif declared > len(buf):
        part.stopped = Stop(len(buf), size_name, f"says {declared} bytes, the buffer has {len(buf)}")
    return off


def decode_command(buf: bytes, plaintext: PlaintextFn | None = None) -> Part:
    """``plaintext(session_handle, part) -> dict | None`` may supply the plaintext of an
    encrypted first parameter (tpmtop's own sessions, see :mod:`tpmtop.decode.plaintext`)."""
    part = Part("command", bytes(buf), Field("", "", "Command", 0, len(buf)))
    w = _Walker(part.buf, len(buf))
    try:
        if len(buf) < 10:
            raise _Fail(0, "header", f"a command is at least 10 bytes, this is {len(buf)}")
        off = _header(part, w, TPMI_ST_COMMAND_TAG, "commandSize", TPM_CC, "commandCode")
        assert part.cc is not None  # _header read it
        types = _command_types().get(part.cc)
        if types is None:
            raise _Fail(6, "commandCode", f"0x{part.cc:08x} is not a command of TPM 2.0 Part 3")
        handles_t, params_t = types
        off = w.struct(handles_t, "handles", "handles", off, part.root)
        enc = None
        if part.tag == ST_SESSIONS:
            off, auth_size = w.prim(UINT32, "authSize", "authSize", off, part.root)
            end = off + auth_size
            if end > w.ends[-1]:
                raise _Fail(off - 4, "authSize", f"says {auth_size} bytes, {w.ends[-1] - off} left")
            off = w.sessions(TPMS_AUTH_COMMAND, "authorizationArea", "authorizationArea", off, part.root, end)
            for s in part.sessions:
                if _session_attrs(s) & ATTR_DECRYPT:
                    enc = {"session": f"0x{_session_handle(s):08x}", "mode": None, "plaintext": None}
                    break
        off = w.struct(params_t, "parameters", "parameters", off, part.root, first_encrypted=enc)
        if off < w.ends[-1]:
            raise _Fail(off, "parameters", f"{w.ends[-1] - off} bytes left after the last parameter")
    except _Fail as e:
        part.stopped = Stop(e.offset, e.path, e.why)
    _fill_plaintext(part, plaintext)
    return part


def decode_response(buf: bytes, cc: int | None, command: Part | None = None,
                    plaintext: PlaintextFn | None = None) -> Part:
    part = Part("response", bytes(buf), Field("", "", "Response", 0, len(buf)))
    w = _Walker(part.buf, len(buf))
    try:
        if len(buf) < 10:
            raise _Fail(0, "header", f"a response is at least 10 bytes, this is {len(buf)}")
        from tpmstream.spec.common.tpm_rc import TPM_RC

        off = _header(part, w, TPM_ST, "responseSize", TPM_RC, "responseCode")
        if part.rc != 0:
            if off < w.ends[-1]:
                raise _Fail(off, "responseCode", "an error response is the header alone, "
                                                 f"{w.ends[-1] - off} bytes follow")
            return part
        if cc is None:
            raise _Fail(10, "handles", "the command code is unknown (no command to match)")
        types = _response_types().get(cc)
        if types is None:
            raise _Fail(10, "handles", f"0x{cc:08x} is not a command of TPM 2.0 Part 3")
        handles_t, params_t = types
        off = w.struct(handles_t, "handles", "handles", off, part.root)
        if part.tag == ST_NO_SESSIONS:
            off = w.struct(params_t, "parameters", "parameters", off, part.root)
            if off < w.ends[-1]:
                raise _Fail(off, "parameters", f"{w.ends[-1] - off} bytes left after the last parameter")
            return part
        off, psize = w.prim(UINT32, "parameterSize", "parameterSize", off, part.root)
        pend = off + psize
        if pend > w.ends[-1]:
            raise _Fail(off - 4, "parameterSize", f"says {psize} bytes, {w.ends[-1] - off} left")
        # The sessions follow the parameters and say whether the first one is encrypted.
        sess = Field("", "", "", pend)
        sess_fail = None
        try:
            w.sessions(TPMS_AUTH_RESPONSE, "authorizationArea", "authorizationArea", pend, sess, w.ends[-1])
        except _Fail as e:
            sess_fail = e
        enc = None
        area = sess.fields[0] if sess.fields else None
        for i, s in enumerate(area.fields if area else []):
            if _session_attrs(s) & ATTR_ENCRYPT:
                h = None
                if command is not None and i < len(command.sessions):
                    h = _session_handle(command.sessions[i])
                enc = {"session": f"0x{h:08x}" if h is not None else f"#{i}", "mode": None, "plaintext": None}
                break
        w.ends.append(pend)
        try:
            off = w.struct(params_t, "parameters", "parameters", off, part.root, first_encrypted=enc)
            if off < pend:
                raise _Fail(off, "parameters",
                            f"parameterSize says {psize} bytes, the parameters used {off - pend + psize}")
        finally:
            w.ends.pop()
        if area is not None:
            part.root.fields.append(area)
        if sess_fail is not None:
            raise sess_fail
    except _Fail as e:
        part.stopped = Stop(e.offset, e.path, e.why)
    _fill_plaintext(part, plaintext, command)
    return part


def _fill_plaintext(part: Part, plaintext: PlaintextFn | None, command: Part | None = None) -> None:
    if plaintext is None or not part.parameters:
        return
    first = part.parameters[0]
    if first.encrypted is None:
        return
    try:
        view = plaintext(part, first, command)
    except Exception as e:  # a plaintext view is a bonus: its failure is said, never fatal
        view = {"available": False, "why": f"{type(e).__name__}: {e}"}
    if view:
        first.encrypted.update(view)
        first.note = _encrypted_note(first.encrypted)


@cache
def _types_by_name() -> dict[str, _TpmType]:
    from tpmstream.spec import all_types

    return {t.__name__: t for t in all_types}


def decode_type(tpm2b_name: str, data: bytes) -> tuple[list[Field], Stop | None]:
    """``data`` (a TPM2B's content, e.g. a decrypted parameter) decoded as that TPM2B's
    buffer type; offsets are within ``data``."""
    t = _types_by_name().get(tpm2b_name)
    root = Field("", "", "", 0, len(data))
    if t is None:
        return [], Stop(0, tpm2b_name, f"{tpm2b_name} is not in the tables")
    (_, _), (buf_name, buf_t) = _fields(t)
    w = _Walker(data, len(data))
    try:
        if _is_list(buf_t):
            w.raw(buf_name, buf_name, f"BYTE[{len(data)}]", 0, len(data), root)
        elif data:
            end, _ = w.walk(buf_t, buf_name, buf_name, 0, root)
            if end != len(data):
                raise _Fail(end, buf_name, f"{len(data) - end} bytes left over")
    except _Fail as e:
        return root.fields, Stop(e.offset, e.path, e.why)
    return root.fields, None


def looks_like_response(buf: bytes) -> bool:
    """A lone buffer: a response when its third field is not a known command code."""
    if len(buf) < 10:
        return False
    return int.from_bytes(buf[6:10], "big") not in names.CC_NAMES


def decode(command: bytes | None, response: bytes | None = None, cc: int | None = None,
           plaintext: PlaintextFn | None = None) -> Decoded:
    """Decode a command and/or its response. ``cc`` names the command of a lone response."""
    cp = decode_command(command, plaintext) if command is not None else None
    if cp is not None and cp.cc is not None:
        cc = cp.cc
    rp = decode_response(response, cc, cp, plaintext) if response is not None else None
    return Decoded(cp, rp)


__all__ = ["decode", "decode_command", "decode_response", "handle_name", "looks_like_response"]
