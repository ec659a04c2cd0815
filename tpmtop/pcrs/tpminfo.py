"""Which TPM a snapshot was taken on, and where its clock stood: what ``--diff`` needs to say
"the TPM was reset (or cleared) between these two snapshots" or "this is another TPM".

All read-only and without authorization (safe under --read-only and on a real chip):
GetCapability(TPM_PROPERTIES) for the manufacturer and firmware, ReadClock for the clock
(TPMS_CLOCK_INFO: resetCount counts TPM Resets, i.e. boots, restartCount TPM Restarts and
resumes since the last Reset; TPM2_Clear sets both back to 0), and ReadPublic of the
endorsement keys at their persistent handles (TCG EK Credential Profile: 0x81010001 RSA,
0x81010002 ECC) for their names, where one was made persistent. A TPM that refuses any of
these still gives the rest.
"""

from __future__ import annotations

import struct
from typing import Any

from tpmtop.errors import TpmError
from tpmtop.tpm.commands import CC_READ_PUBLIC, Transacts, build, check, get_handles
from tpmtop.tpm.identity import read_identity
from tpmtop.tpm.status import read_clock

EK_HANDLES = {0x81010001: "rsa", 0x81010002: "ecc"}
HR_PERSISTENT = 0x81000000
HR_NV_INDEX = 0x01000000
# systemd 259's NvPCRs are NV indices from 0x01d10200 (TPM_NT_EXTEND); the block they sit in
# ends at 0x01d1ffff. Listed by handle only: reading one needs its authorization.
NVPCR_FIRST, NVPCR_END = 0x01D10200, 0x01D20000


def read_name(transport: Transacts, handle: int) -> str:
    """ReadPublic's name (TPM2B_PUBLIC, then TPM2B_NAME), in hex."""
    body = check(transport.transact(build(CC_READ_PUBLIC, struct.pack(">I", handle))), CC_READ_PUBLIC)
    try:
        pub_size = struct.unpack_from(">H", body)[0]
        p = 2 + pub_size
        name_size = struct.unpack_from(">H", body, p)[0]
        name = body[p + 2:p + 2 + name_size]
    except struct.error:
        raise TpmError("ReadPublic: malformed response", None, "TPM2_CC_ReadPublic") from None
    if len(name) != name_size:
        raise TpmError("ReadPublic: malformed response", None, "TPM2_CC_ReadPublic")
    return name.hex()


def read(transport: Transacts) -> dict[str, Any]:
    """{manufacturer, vendor, firmware, ek_names {handle: name}, clock {…}, nvpcr_indices}; a part the TPM
    refused is None, with why under ``unread``."""
    out: dict[str, Any] = {"manufacturer": None, "vendor": None, "firmware": None, "ek_names": {},
                           "clock": None, "nvpcr_indices": [], "unread": {}}
    try:
        ident = read_identity(transport)
        out.update(manufacturer=ident.manufacturer, vendor=ident.vendor, firmware=ident.firmware)
    except TpmError as e:
        out["unread"]["identity"] = str(e)
    try:
        # ints only in a snapshot: safe is TPMI_YES_NO on the wire (0/1) and stays so in JSON
        c = read_clock(transport)
        out["clock"] = {"time_ms": c.time_ms, "clock_ms": c.clock_ms, "reset_count": c.reset_count,
                        "restart_count": c.restart_count, "safe": int(c.safe)}
    except TpmError as e:
        out["unread"]["clock"] = str(e)
    try:
        persistent = set(get_handles(transport, HR_PERSISTENT))
        for handle, kind in EK_HANDLES.items():
            if handle in persistent:
                out["ek_names"][f"0x{handle:08x}"] = {"kind": kind, "name": read_name(transport, handle)}
    except TpmError as e:
        out["unread"]["ek"] = str(e)
    try:
        out["nvpcr_indices"] = [f"0x{h:08x}" for h in get_handles(transport, NVPCR_FIRST)
                                if NVPCR_FIRST <= h < NVPCR_END]
    except TpmError as e:
        out["unread"]["nvpcr"] = str(e)
    return out
