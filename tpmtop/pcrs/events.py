"""TCG event types (PC Client Platform Firmware Profile §10.4.1) and their data, decoded for
a person: EFI variables with their GUIDs, boot entries and device paths, IPL strings, post
codes, separators, actions.

Decoding never raises: data that does not fit its type's structure is shown as hex with the
reason, so a vendor's quirk costs one event's rendering, not the log.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Callable


class EventType(enum.IntEnum):
    """Every event type the PC Client profile names; any other value is shown as unknown."""

    EV_PREBOOT_CERT = 0x0
    EV_POST_CODE = 0x1
    EV_UNUSED = 0x2
    EV_NO_ACTION = 0x3
    EV_SEPARATOR = 0x4
    EV_ACTION = 0x5
    EV_EVENT_TAG = 0x6
    EV_S_CRTM_CONTENTS = 0x7
    EV_S_CRTM_VERSION = 0x8
    EV_CPU_MICROCODE = 0x9
    EV_PLATFORM_CONFIG_FLAGS = 0xA
    EV_TABLE_OF_DEVICES = 0xB
    EV_COMPACT_HASH = 0xC
    EV_IPL = 0xD
    EV_IPL_PARTITION_DATA = 0xE
    EV_NONHOST_CODE = 0xF
    EV_NONHOST_CONFIG = 0x10
    EV_NONHOST_INFO = 0x11
    EV_OMIT_BOOT_DEVICE_EVENTS = 0x12
    EV_POST_CODE2 = 0x13
    EV_EFI_EVENT_BASE = 0x80000000
    EV_EFI_VARIABLE_DRIVER_CONFIG = 0x80000001
    EV_EFI_VARIABLE_BOOT = 0x80000002
    EV_EFI_BOOT_SERVICES_APPLICATION = 0x80000003
    EV_EFI_BOOT_SERVICES_DRIVER = 0x80000004
    EV_EFI_RUNTIME_SERVICES_DRIVER = 0x80000005
    EV_EFI_GPT_EVENT = 0x80000006
    EV_EFI_ACTION = 0x80000007
    EV_EFI_PLATFORM_FIRMWARE_BLOB = 0x80000008
    EV_EFI_HANDOFF_TABLES = 0x80000009
    EV_EFI_PLATFORM_FIRMWARE_BLOB2 = 0x8000000A
    EV_EFI_HANDOFF_TABLES2 = 0x8000000B
    EV_EFI_VARIABLE_BOOT2 = 0x8000000C
    EV_EFI_GPT_EVENT2 = 0x8000000D
    EV_EFI_HCRTM_EVENT = 0x80000010
    EV_EFI_VARIABLE_AUTHORITY = 0x800000E0
    EV_EFI_SPDM_FIRMWARE_BLOB = 0x800000E1
    EV_EFI_SPDM_FIRMWARE_CONFIG = 0x800000E2
    EV_EFI_SPDM_DEVICE_POLICY = 0x800000E3
    EV_EFI_SPDM_DEVICE_AUTHORITY = 0x800000E4


def type_name(etype: int) -> str:
    try:
        return EventType(etype).name
    except ValueError:
        return f"unknown event type 0x{etype:08x}"


# GUIDs a person recognises by name (UEFI spec, shim); any other is shown as its value.
KNOWN_GUIDS = {
    "8be4df61-93ca-11d2-aa0d-00e098032b8c": "EFI global variable",
    "d719b2cb-3d3a-4596-a3bc-dad00e67656f": "EFI image security database",
    "605dab50-e046-4300-abb6-3dd810dd8b23": "shim",
    "eb9d2d31-2d88-11d3-9a16-0090273fc14d": "SMBIOS table",
    "f2fd1544-9794-4a2c-992e-e5bbcf20e394": "SMBIOS3 table",
    "8868e871-e4f1-11d3-bc22-0080c73c8881": "ACPI 2.0 table",
    "eb9d2d30-2d88-11d3-9a16-0090273fc14d": "ACPI 1.0 table",
}


def guid_text(raw: bytes) -> str:
    g = str(uuid.UUID(bytes_le=bytes(raw[:16])))
    name = KNOWN_GUIDS.get(g)
    return f"{g} ({name})" if name else g


def _utf16(raw: bytes) -> str:
    b = bytes(raw)
    # a string logged one byte short of its NUL (a known boot-loader quirk) is still text
    return b[:len(b) // 2 * 2].decode("utf-16-le", errors="replace").split("\0", 1)[0]


def _ascii(raw: bytes) -> str:
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _is_text(raw: bytes) -> bool:
    """Printable ASCII up to its NUL padding (a name, an action string, a grub command that
    spans lines), not binary data."""
    b = bytes(raw).rstrip(b"\0")
    return bool(b) and all(0x20 <= c < 0x7F or c in (9, 10, 13) for c in b)


def one_line(text: str) -> str:
    """A multi-line string (grub's menuentry, measured whole) on one line: each line break
    shown as ' ⏎ ', the indentation after it dropped."""
    if "\n" not in text and "\r" not in text and "\t" not in text:
        return text
    lines = [ln.strip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return " ⏎ ".join(ln for ln in lines if ln).replace("\t", " ")


def _hex(raw: bytes, limit: int = 32) -> str:
    b = bytes(raw)
    return b[:limit].hex() + (f"… ({len(b)} bytes)" if len(b) > limit else "")


# ---- device paths (UEFI spec §10.3): the nodes a boot log holds, the rest by type/subtype ----

def _dp_node(t: int, st: int, body: bytes) -> str:
    try:
        if t == 1 and st == 1:
            fn, dev = struct.unpack_from("<BB", body)
            return f"Pci({dev:#x},{fn:#x})"
        if t == 1 and st == 3:
            mtype, start, end = struct.unpack_from("<IQQ", body)
            return f"MemoryMapped({mtype:#x},{start:#x},{end:#x})"
        if t == 1 and st == 4:
            return f"VenHw({guid_text(body[:16])})"
        if t == 2 and st == 1:
            hid, uid = struct.unpack_from("<II", body)
            if hid & 0xFFFF == 0x41D0:
                return f"PciRoot({uid:#x})" if hid >> 16 in (0x0A03, 0x0A08) else f"Acpi(PNP{hid >> 16:04X},{uid:#x})"
            return f"Acpi({hid:#x},{uid:#x})"
        if t == 3 and st == 18:
            port, mult, lun = struct.unpack_from("<HHH", body)
            return f"Sata({port:#x},{mult:#x},{lun:#x})"
        if t == 3 and st == 23:
            nsid = struct.unpack_from("<I", body)[0]
            return f"NVMe({nsid:#x})"
        if t == 3 and st == 5:
            port, iface = struct.unpack_from("<BB", body)
            return f"USB({port:#x},{iface:#x})"
        if t == 3 and st == 11:
            return f"MAC({bytes(body[:6]).hex()})"
        if t == 3 and st == 24:
            return f"Uri({_ascii(body)})"
        if t == 4 and st == 1:
            part, start, size = struct.unpack_from("<IQQ", body)
            sig = bytes(body[20:36])
            fmt, stype = body[36], body[37]
            sig_text = str(uuid.UUID(bytes_le=sig)) if stype == 2 else sig[:4].hex()
            return f"HD({part},{'GPT' if fmt == 2 else 'MBR'},{sig_text},{start:#x},{size:#x})"
        if t == 4 and st == 2:
            return "CDROM"
        if t == 4 and st == 3:
            return f"VenMedia({guid_text(body[:16])})"
        if t == 4 and st == 4:
            return f"File({_utf16(body)})"
        if t == 4 and st == 6:
            return f"FvFile({guid_text(body[:16])})"
        if t == 4 and st == 7:
            return f"Fv({guid_text(body[:16])})"
        if t == 4 and st == 8:
            start, end = struct.unpack_from("<QQ", body)
            return f"Offset({start:#x},{end:#x})"
    except (struct.error, IndexError, ValueError):
        pass
    return f"Path({t},{st},{_hex(body, 16)})"


def device_path(raw: bytes, limit: int = 64) -> str:
    """A readable rendering of an EFI device path (node after node, '/' between)."""
    nodes: list[str] = []
    off = 0
    raw = bytes(raw)
    while off + 4 <= len(raw) and len(nodes) < limit:
        t, st, n = struct.unpack_from("<BBH", raw, off)
        if n < 4 or off + n > len(raw):
            nodes.append(f"<malformed node at byte {off}>")
            break
        if t == 0x7F:  # end of instance or of the whole path
            if st == 0xFF:
                break
            nodes.append(",")
        else:
            nodes.append(_dp_node(t, st, raw[off + 4:off + n]))
        off += n
    return "/".join(nodes) if nodes else "(empty device path)"


# ---- event data by type ----------------------------------------------------------------

def _efi_variable(data: bytes) -> str:
    guid = data[:16]
    name_len, data_len = struct.unpack_from("<QQ", data, 16)
    if name_len > len(data) or data_len > len(data):
        raise ValueError("variable name or data length past the event")
    name_end = 32 + 2 * name_len
    name = _utf16(data[32:name_end])
    value = bytes(data[name_end:name_end + data_len])
    head = f"{name} {{{guid_text(guid)}}}"
    if name == "BootOrder" and len(value) % 2 == 0:
        order = struct.unpack(f"<{len(value) // 2}H", value)
        return f"{head} = {','.join(f'Boot{n:04X}' for n in order)}"
    if name.startswith("Boot") and len(name) == 8 and len(value) >= 6:
        return f"{head} = {_load_option(value)}"
    if len(value) <= 4:
        return f"{head} = {value.hex() or '(empty)'}"
    return f"{head} ({len(value)} bytes)"


def _load_option(value: bytes) -> str:
    attrs, fp_len = struct.unpack_from("<IH", value)
    desc_end = 6
    while desc_end + 1 < len(value) and value[desc_end:desc_end + 2] != b"\0\0":
        desc_end += 2
    desc = _utf16(value[6:desc_end])
    path = device_path(value[desc_end + 2:desc_end + 2 + fp_len])
    active = "" if attrs & 1 else " (inactive)"
    return f"'{desc}' {path}{active}"


def _image_load(data: bytes) -> str:
    addr, length, _link, dp_len = struct.unpack_from("<QQQQ", data)
    return f"image at {addr:#x} ({length} bytes) {device_path(data[32:32 + dp_len])}"


def _blob(data: bytes) -> str:
    base, length = struct.unpack_from("<QQ", data)
    return f"firmware blob at {base:#x} ({length} bytes)"


def _blob2(data: bytes) -> str:
    n = data[0]
    desc = _ascii(data[1:1 + n])
    base, length = struct.unpack_from("<QQ", data, 1 + n)
    return f"{desc}: firmware blob at {base:#x} ({length} bytes)"


def _handoff(data: bytes) -> str:
    count = struct.unpack_from("<Q", data)[0]
    guids = [guid_text(data[8 + 24 * i:8 + 24 * i + 16]) for i in range(min(count, 8)) if 8 + 24 * i + 16 <= len(data)]
    return f"{count} configuration table(s): " + ", ".join(guids)


def _gpt(data: bytes) -> str:
    disk_guid = str(uuid.UUID(bytes_le=bytes(data[56:72])))
    nparts = struct.unpack_from("<Q", data, 92)[0]
    return f"GPT disk {disk_guid}, {nparts} partition(s)"


def _separator(data: bytes) -> str:
    b = bytes(data)
    if b == b"\0\0\0\0":
        return "separator"
    if b == b"\xff\xff\xff\xff":
        return "separator 0xffffffff (the profile's value for an error or an abandoned boot path)"
    return f"separator {_hex(b)}"


def _no_action(data: bytes) -> str:
    b = bytes(data)
    if b.startswith(b"StartupLocality\0") and len(b) >= 17:
        return f"StartupLocality {b[16]}"
    if b.startswith(b"Spec ID Event"):
        return _ascii(b[:16])
    if b.startswith(b"SP800-155 Event"):
        return "SP800-155 reference manifest"
    return f"no action {_hex(b)}"


def _text_or_hex(data: bytes) -> str:
    b = bytes(data)
    if len(b) >= 2 and b[1::2].count(0) >= len(b) // 2 - 1 and b[0::2].isascii() and b[0]:
        return one_line(_utf16(b))  # UTF-16 (EV_S_CRTM_VERSION, some post codes, systemd-boot)
    if _is_text(b):
        return one_line(_ascii(b))
    return _hex(b)


def _post_code(data: bytes) -> str:
    """A string, or a UEFI_PLATFORM_FIRMWARE_BLOB (base, length) of the code measured."""
    b = bytes(data)
    if len(b) == 16 and not _is_text(b):
        base, length = struct.unpack_from("<QQ", b)
        return f"POST code at {base:#x} ({length} bytes)"
    return _text_or_hex(b)


def _tagged(data: bytes) -> str:
    tag, size = struct.unpack_from("<II", data)
    body = bytes(data[8:8 + size])
    if _is_text(body):
        return f"tag {tag:#x}: {_ascii(body)}"  # the Linux EFI stub's tags name what they measure
    return f"tag {tag:#x}: {_hex(body)}"


_DECODERS: dict[int, Callable[[bytes], str]] = {
    EventType.EV_EVENT_TAG: _tagged,
    EventType.EV_EFI_VARIABLE_DRIVER_CONFIG: _efi_variable,
    EventType.EV_EFI_VARIABLE_BOOT: _efi_variable,
    EventType.EV_EFI_VARIABLE_BOOT2: _efi_variable,
    EventType.EV_EFI_VARIABLE_AUTHORITY: _efi_variable,
    EventType.EV_EFI_BOOT_SERVICES_APPLICATION: _image_load,
    EventType.EV_EFI_BOOT_SERVICES_DRIVER: _image_load,
    EventType.EV_EFI_RUNTIME_SERVICES_DRIVER: _image_load,
    EventType.EV_EFI_PLATFORM_FIRMWARE_BLOB: _blob,
    EventType.EV_EFI_PLATFORM_FIRMWARE_BLOB2: _blob2,
    EventType.EV_EFI_HANDOFF_TABLES: _handoff,
    EventType.EV_EFI_GPT_EVENT: _gpt,
    EventType.EV_SEPARATOR: _separator,
    EventType.EV_NO_ACTION: _no_action,
    EventType.EV_POST_CODE: _post_code,
}


def describe(etype: int, data: bytes) -> str:
    """The event's data for a person (not yet terminal-safe: callers print through textsafe)."""
    fn = _DECODERS.get(etype)
    try:
        if fn is not None:
            return fn(data)
        if not any(data):
            return f"({len(data)} zero bytes)" if data else ""
        return _text_or_hex(data)
    except (struct.error, IndexError, ValueError) as e:
        return f"{_hex(data)} (does not parse as {type_name(etype)}: {e})"
