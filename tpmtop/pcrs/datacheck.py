"""Event data against its digest: for the event types whose digest is of their own data (TCG PC
Client Platform Firmware Profile §10.4.1), hash the data and compare, in every bank the event
carries. An edited command line or action string with an intact digest chain replays to the
TPM's values; only this check sees that the data shown is not what was measured.

Not checked, because their digest is of something else (an image, a firmware volume, a table, a
file a boot loader read): EV_EFI_BOOT_SERVICES_* and runtime drivers, firmware blobs, handoff
tables, EV_EVENT_TAG, EV_COMPACT_HASH, microcode, EV_NO_ACTION, and EV_IPL / EV_POST_CODE whose
data only names what was measured (grub's files in PCR 9 and shim's MokList are EV_IPL with a
name for data, and a post code's blob is a base and a length).

What each checked type's digest is of:
- EV_SEPARATOR, EV_ACTION, EV_EFI_ACTION, EV_S_CRTM_VERSION, EV_EFI_GPT_EVENT(2),
  EV_OMIT_BOOT_DEVICE_EVENTS: the data.
- EV_EFI_VARIABLE_DRIVER_CONFIG / _BOOT / _BOOT2 / _AUTHORITY: the UEFI_VARIABLE_DATA, or the
  variable's value alone (EDK2 hashes the value for boot variables, the whole structure for the
  others; both are the data).
- EV_POST_CODE that is a string: the string (with or without its NUL).
- EV_IPL: grub's strings (``grub_cmd: …``, ``kernel_cmdline: …``, ``module_cmdline: …``) are
  hashed without their prefix and NUL; a UTF-16 command line (systemd-boot and sd-stub, PCR 8
  and 12) is hashed as logged. A UTF-16 string with no space and no ``=`` is a file name whose
  content was measured, and is not checked.

Named quirks, accepted and shown as such: the digest is of the data and one more NUL byte (a
boot loader that logs its UTF-16 string one byte short; seen on a real Arch log, and warned
about by tpm2_eventlog).
"""

from __future__ import annotations

import enum
import hashlib
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tpmtop.pcrs.eventlog import Event
from tpmtop.pcrs.events import EventType

QUIRK_NUL = "the digest is of the data and one more NUL byte (a string logged one byte short)"
GRUB_PREFIXES = (b"grub_cmd: ", b"kernel_cmdline: ", b"module_cmdline: ")
MAX_LISTED = 5  # mismatching events named one by one; the rest counted


class Check(enum.Enum):
    OK = "ok"  # the data hashes to the digest in every bank the event carries
    QUIRK = "quirk"  # it does under a named firmware quirk
    MISMATCH = "mismatch"  # it does not: the data shown is not what was measured


_OF_DATA = frozenset({EventType.EV_SEPARATOR, EventType.EV_ACTION, EventType.EV_EFI_ACTION,
                      EventType.EV_S_CRTM_VERSION, EventType.EV_EFI_GPT_EVENT, EventType.EV_EFI_GPT_EVENT2,
                      EventType.EV_OMIT_BOOT_DEVICE_EVENTS})
_VARIABLES = frozenset({EventType.EV_EFI_VARIABLE_DRIVER_CONFIG, EventType.EV_EFI_VARIABLE_BOOT,
                        EventType.EV_EFI_VARIABLE_BOOT2, EventType.EV_EFI_VARIABLE_AUTHORITY})
CHECKED = _OF_DATA | _VARIABLES | {EventType.EV_POST_CODE, EventType.EV_IPL}


def _variable_value(data: bytes) -> bytes | None:
    """The value of a UEFI_VARIABLE_DATA (GUID, name length, value length, name, value)."""
    if len(data) < 32:
        return None
    name_len, value_len = struct.unpack_from("<QQ", data, 16)
    start = 32 + 2 * name_len
    if start + value_len != len(data):
        return None
    return data[start:]


def _text(b: bytes) -> bool:
    b = b.rstrip(b"\0")
    return bool(b) and all(0x20 <= c < 0x7F or c in (9, 10, 13) for c in b)


def _utf16_text(b: bytes) -> str | None:
    if len(b) < 2 or b[1::2].count(0) < len(b) // 2 - 1:
        return None
    s = b.decode("utf-16-le", errors="replace").rstrip("\0")
    return s if s and all(c.isprintable() or c in "\t\n\r" for c in s) else None


def candidates(etype: int, data: bytes) -> list[tuple[bytes, str | None]]:
    """What the digest may be of, each with the quirk it would take (None: none); empty when
    this type's digest is not of its data (not checked)."""
    out: list[tuple[bytes, str | None]] = []
    if etype in _OF_DATA:
        out.append((data, None))
    elif etype in _VARIABLES:
        out.append((data, None))
        value = _variable_value(data)
        if value is not None:
            out.append((value, None))
    elif etype == EventType.EV_POST_CODE:
        if _text(data):
            out += [(data, None), (data.rstrip(b"\0"), None)]
    elif etype == EventType.EV_IPL:
        if data.startswith(GRUB_PREFIXES):
            body = data[data.index(b": ") + 2:]
            out += [(body.rstrip(b"\0"), None), (body, None)]
        else:
            s = _utf16_text(data)
            if s is not None and (" " in s or "=" in s):
                out += [(data, None), (data + b"\0", QUIRK_NUL)]
    return out


# the banks' hash constructors (hashlib.sha256 and so on: hashlib.new costs more per call)
_CTORS: dict[str, Callable[[bytes], Any]] = {
    name: getattr(hashlib, name) for name in ("sha1", "sha256", "sha384", "sha512")}


def check(ev: Event) -> tuple[Check, str | None] | None:
    """(the verdict, the quirk's name) for one event; None when its type is not checked or
    it carries no digest tpmtop can compute."""
    cands = candidates(ev.type, ev.data)
    if not cands:
        return None
    digests = [(_CTORS[b], d) for b, d in ev.digests.items() if b in _CTORS]
    if not digests:
        return None
    for data, quirk in cands:
        if all(ctor(data).digest() == d for ctor, d in digests):
            return (Check.QUIRK, quirk) if quirk else (Check.OK, None)
    return Check.MISMATCH, None


@dataclass
class DataChecks:
    checked: int = 0
    by_event: dict[int, tuple[Check, str | None]] = field(default_factory=dict)  # index -> not OK verdicts

    @property
    def mismatches(self) -> list[int]:
        return [i for i, (c, _) in self.by_event.items() if c is Check.MISMATCH]

    @property
    def quirks(self) -> dict[int, str]:
        return {i: q for i, (c, q) in self.by_event.items() if c is Check.QUIRK and q}

    def to_json(self) -> dict[str, object]:
        return {"checked": self.checked, "mismatch": self.mismatches,
                "quirks": {str(i): q for i, q in self.quirks.items()}}

    def summary(self) -> str:
        """One line: how many were checked, which do not hash to their digest, which by a quirk."""
        def listed(idx: list[int]) -> str:
            head = ", ".join(map(str, idx[:MAX_LISTED]))
            return f"event {head}" + (f" and {len(idx) - MAX_LISTED} more" if len(idx) > MAX_LISTED else "")
        parts = [f"{self.checked} checked against their digests"]
        bad = self.mismatches
        if bad:
            parts.append(f"{len(bad)} DO NOT HASH TO THEIR DIGEST ({listed(bad)})")
        quirks = self.quirks
        if quirks:
            parts.append(f"{len(quirks)} by a firmware quirk ({listed(list(quirks))}: {QUIRK_NUL})")
        return "; ".join(parts)


def check_all(events: Iterable[Event]) -> DataChecks:
    out = DataChecks()
    for ev in events:
        if ev.type not in CHECKED:
            continue
        got = check(ev)
        if got is None:
            continue
        out.checked += 1
        if got[0] is not Check.OK:
            out.by_event[ev.index] = got
    return out
