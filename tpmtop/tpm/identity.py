"""The TPM's identity and the properties that matter for sessions and contexts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tpmtop.tpm.commands import Transacts, get_properties

PT_FIXED = 0x100
PT_VAR = 0x200

FIXED = {
    "FAMILY_INDICATOR": 0x100, "LEVEL": 0x101, "REVISION": 0x102, "DAY_OF_YEAR": 0x103,
    "YEAR": 0x104, "MANUFACTURER": 0x105, "VENDOR_STRING_1": 0x106, "VENDOR_STRING_2": 0x107,
    "VENDOR_STRING_3": 0x108, "VENDOR_STRING_4": 0x109, "VENDOR_TPM_TYPE": 0x10A,
    "FIRMWARE_VERSION_1": 0x10B, "FIRMWARE_VERSION_2": 0x10C, "INPUT_BUFFER": 0x10D,
    "HR_TRANSIENT_MIN": 0x10E, "HR_PERSISTENT_MIN": 0x10F, "HR_LOADED_MIN": 0x110,
    "ACTIVE_SESSIONS_MAX": 0x111, "PCR_COUNT": 0x112, "PCR_SELECT_MIN": 0x113,
    "CONTEXT_GAP_MAX": 0x114, "NV_COUNTERS_MAX": 0x116, "NV_INDEX_MAX": 0x117,
    "MEMORY": 0x118, "MAX_COMMAND_SIZE": 0x11E, "MAX_RESPONSE_SIZE": 0x11F,
}
VARIABLE = {
    "PERMANENT": 0x200, "STARTUP_CLEAR": 0x201, "HR_NV_INDEX": 0x202, "HR_LOADED": 0x203,
    "HR_LOADED_AVAIL": 0x204, "HR_ACTIVE": 0x205, "HR_ACTIVE_AVAIL": 0x206,
    "HR_TRANSIENT_AVAIL": 0x207, "HR_PERSISTENT": 0x208, "HR_PERSISTENT_AVAIL": 0x209,
    "NV_COUNTERS": 0x20A, "NV_COUNTERS_AVAIL": 0x20B, "LOCKOUT_COUNTER": 0x20E,
    "MAX_AUTH_FAIL": 0x20F, "LOCKOUT_INTERVAL": 0x210, "LOCKOUT_RECOVERY": 0x211,
}
_FIXED_BY_CODE = {v: k for k, v in FIXED.items()}
_VAR_BY_CODE = {v: k for k, v in VARIABLE.items()}


def _chars(value: int) -> str:
    """A 4-byte property holding ASCII (manufacturer, vendor strings), NULs and spaces trimmed."""
    raw = value.to_bytes(4, "big")
    return "".join(chr(b) for b in raw if 32 <= b < 127).strip()


@dataclass
class Identity:
    manufacturer: str
    vendor: str
    firmware: str
    firmware_raw: str
    spec_family: str
    spec_level: int
    spec_revision: str
    spec_date: str
    vendor_tpm_type: int
    fixed: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def line(self) -> str:
        return (f"{self.manufacturer} {self.vendor} fw {self.firmware} "
                f"(TPM {self.spec_family} rev {self.spec_revision})")


def software_tpm(manufacturer: str, vendor: str) -> bool:
    """The TPM says it is libtpms (swtpm's engine: manufacturer "IBM", vendor "SWTPM" or "SW
    TPM"): a simulator by its own identity, whoever started it. A chip never says so."""
    return manufacturer == "IBM" and vendor.replace(" ", "").upper().startswith("SWTPM")


def firmware_string(fw1: int, fw2: int) -> str:
    # The common reading (tpm2-tools' tpm2_getcap, Infineon and Nuvoton documentation):
    # FIRMWARE_VERSION_1 = major.minor (16 bits each), FIRMWARE_VERSION_2 = build.patch.
    return f"{fw1 >> 16}.{fw1 & 0xFFFF}.{fw2 >> 16}.{fw2 & 0xFFFF}"


def read_identity(transport: Transacts) -> Identity:
    fixed_codes = get_properties(transport, PT_FIXED)
    fixed = {_FIXED_BY_CODE.get(k, f"0x{k:x}"): v for k, v in fixed_codes.items()}
    fw1, fw2 = fixed.get("FIRMWARE_VERSION_1", 0), fixed.get("FIRMWARE_VERSION_2", 0)
    vendor = "".join(_chars(fixed.get(f"VENDOR_STRING_{i}", 0)) for i in range(1, 5))
    rev = fixed.get("REVISION", 0)
    return Identity(
        manufacturer=_chars(fixed.get("MANUFACTURER", 0)) or "?",
        vendor=vendor,
        firmware=firmware_string(fw1, fw2),
        firmware_raw=f"0x{fw1:08x}.0x{fw2:08x}",
        spec_family=_chars(fixed.get("FAMILY_INDICATOR", 0)),
        spec_level=fixed.get("LEVEL", 0),
        spec_revision=f"{rev // 100}.{rev % 100:02d}",
        spec_date=f"{fixed.get('YEAR', 0)} day {fixed.get('DAY_OF_YEAR', 0)}",
        vendor_tpm_type=fixed.get("VENDOR_TPM_TYPE", 0),
        fixed=fixed,
    )


def read_variable(transport: Transacts) -> dict[str, int]:
    codes = get_properties(transport, PT_VAR)
    return {_VAR_BY_CODE.get(k, f"0x{k:x}"): v for k, v in codes.items()}


# What `tpmtop info` shows for sessions and contexts, in this order.
SESSION_PROPS = ("HR_LOADED", "HR_LOADED_AVAIL", "HR_ACTIVE", "HR_ACTIVE_AVAIL",
                 "HR_TRANSIENT_AVAIL", "HR_PERSISTENT", "HR_PERSISTENT_AVAIL")
SESSION_FIXED = ("ACTIVE_SESSIONS_MAX", "CONTEXT_GAP_MAX", "HR_LOADED_MIN", "HR_TRANSIENT_MIN",
                 "PCR_COUNT", "INPUT_BUFFER", "MAX_COMMAND_SIZE")
