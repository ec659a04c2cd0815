"""What a decode produces: a tree of fields per buffer, each with the bytes it came from.

Plain data, no TPM knowledge: :mod:`tpmtop.decode.walk` fills it, :mod:`tpmtop.decode.text`
prints it, ``to_json`` is the stable form described by ``tpmtop/schema/decode-1.json``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "tpmtop-decode/1"


@dataclass
class Field:
    """One field of the wire format: its spec name and type, where it lies, what it holds.

    ``value`` is an int for a primitive, the hex of the bytes for a byte buffer, None for a
    structure (its ``fields`` hold the rest). ``text`` is the value's meaning (an enumeration's
    name, a handle's name, the set bits of an attribute set). ``note`` says what a reader must
    know that the value does not (an empty structure, an encrypted parameter, a value outside
    the type's range)."""

    name: str
    path: str
    type: str
    offset: int
    size: int = 0
    value: Any = None
    text: str | None = None
    bits: dict[str, int] | None = None
    note: str | None = None
    encrypted: dict[str, Any] | None = None  # {"session": "0x02000000", "mode": "CFB"|None, "plaintext": {...}|None}
    fields: list[Field] = field(default_factory=list)

    def walk(self) -> Iterator[Field]:
        yield self
        for f in self.fields:
            yield from f.walk()

    def find(self, path: str) -> Field | None:
        return next((f for f in self.walk() if f.path == path), None)

    def to_json(self, buf: bytes) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "path": self.path, "type": self.type,
                             "offset": self.offset, "size": self.size,
                             "hex": buf[self.offset:self.offset + self.size].hex()}
        if self.value is not None:
            d["value"] = self.value
        if self.text is not None:
            d["text"] = self.text
        if self.bits is not None:
            d["bits"] = self.bits
        if self.note is not None:
            d["note"] = self.note
        if self.encrypted is not None:
            d["encrypted"] = self.encrypted
        if self.fields:
            d["fields"] = [f.to_json(buf) for f in self.fields]
        return d


@dataclass
class Stop:
    """Where decoding stopped on a buffer that does not follow the layout."""

    offset: int
    reading: str  # the path of the field being read
    error: str

    def text(self) -> str:
        return f"stopped at byte {self.offset} reading {self.reading}: {self.error}"


@dataclass
class Part:
    """One decoded buffer (a command or a response)."""

    kind: str  # "command" | "response"
    buf: bytes
    root: Field
    cc: int | None = None
    rc: int | None = None
    tag: int | None = None
    stopped: Stop | None = None
    trailing: int = 0  # bytes after the declared size

    @property
    def size(self) -> int:
        return len(self.buf)

    @property
    def complete(self) -> bool:
        return self.stopped is None and self.trailing == 0

    @property
    def raw_from(self) -> int | None:
        """The first byte not decoded, when decoding stopped early."""
        return None if self.stopped is None else min(self.stopped.offset, len(self.buf))

    def field(self, path: str) -> Field | None:
        return self.root.find(path)

    def section(self, name: str) -> Field | None:
        return next((f for f in self.root.fields if f.name == name), None)

    @property
    def handles(self) -> list[Field]:
        h = self.section("handles")
        return list(h.fields) if h else []

    @property
    def sessions(self) -> list[Field]:
        a = self.section("authorizationArea")
        return list(a.fields) if a else []

    @property
    def parameters(self) -> list[Field]:
        p = self.section("parameters")
        return list(p.fields) if p else []

    def to_json(self) -> dict[str, Any]:
        from tpmtop.tpm import names

        d: dict[str, Any] = {"size": self.size, "tag": self.tag}
        if self.kind == "command":
            d["command_code"] = self.cc
            d["command"] = names.cc_name(self.cc) if self.cc is not None else None
        else:
            d["response_code"] = self.rc
            d["rc_text"] = names.rc_text(self.rc) if self.rc is not None else None
        d["complete"] = self.complete
        d["fields"] = [f.to_json(self.buf) for f in self.root.fields]
        d["trailing_bytes"] = self.trailing
        d["stopped"] = None if self.stopped is None else {
            "offset": self.stopped.offset, "reading": self.stopped.reading,
            "error": self.stopped.error, "text": self.stopped.text(),
            "raw_hex": self.buf[self.raw_from:].hex()}
        return d


@dataclass
class Decoded:
    command: Part | None
    response: Part | None

    @property
    def complete(self) -> bool:
        return all(p.complete for p in (self.command, self.response) if p is not None)

    @property
    def first_stop(self) -> Stop | None:
        return next((p.stopped for p in (self.command, self.response) if p is not None and p.stopped), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "complete": self.complete,
            "command": self.command.to_json() if self.command else None,
            "response": self.response.to_json() if self.response else None,
            "hex": {"command": self.command.buf.hex() if self.command else None,
                    "response": self.response.buf.hex() if self.response else None},
        }
