"""The decode's peers, as the corpus test reads them: tpmstream's own decoder (every field by
path and value) and tshark's TPM 2.0 dissector (command code, handles, sessions, rc)."""

from __future__ import annotations

import re
import subprocess

from tpmtop.decode import Part


def _path(p) -> str:
    return str(p).lstrip(".")


def tpmstream_fields(buf: bytes, cc: int | None = None, encrypted: bool = False) -> tuple[dict, list[str]]:
    """{path: int | bytes} of every leaf tpmstream decodes, and its warnings. A byte buffer is
    one entry (tpmstream has an event per byte); a response needs its command's code."""
    from tpmstream.common.canonical import Canonical
    from tpmstream.common.event import MarshalEvent
    from tpmstream.io.binary import Binary
    from tpmstream.spec.commands import Command, Response
    from tpmstream.spec.structures.base_types import BYTE
    from tpmstream.spec.structures.constants import TPM_CC

    if cc is None:
        events = Canonical(buf, format_in=Binary, tpm_type=Command, abort_on_error=False).events
    else:
        from tpmstream.io.binary.marshal import marshal

        events = list(marshal(Response, buf, command_code=TPM_CC(cc),
                              parameter_encryption=True if encrypted else None, abort_on_error=False))
    out: dict = {}
    warnings = []
    byte_lists = set()
    for e in events:
        if not isinstance(e, MarshalEvent):
            warnings.append(str(e))
            continue
        t = e.type
        if getattr(t, "__origin__", None) is list and t.__args__[0] is BYTE:
            out[_path(e.path)] = b""
            byte_lists.add(_path(e.path))
        elif e.value is not ... and e.value is not None:
            p = _path(e.path)
            base = re.sub(r"\[\d+\]$", "", p)
            if base in byte_lists and p != base:
                out[base] += bytes((int(e.value),))
            else:
                out[p] = int(e.value)
    return out, warnings


def tpmtop_fields(part: Part) -> dict:
    """The same view of tpmtop's decode: {path: int | bytes} of every leaf."""
    out = {}
    for f in part.root.walk():
        if isinstance(f.value, int):
            out[f.path] = f.value
        elif isinstance(f.value, str):
            out[f.path] = bytes.fromhex(f.value)
    return out


_HANDLES = ("TPMI_DH_OBJECT", "TPMI_DH_ENTITY", "TPMI_DH_CONTEXT", "TPMI_DH_PARENT", "TPMI_DH_PCR",
            "TPMI_RH_ACT", "TPMI_RH_HIERARCHY", "TPMI_RH_PROVISION", "TPMI_RH_PLATFORM", "TPMI_RH_CLEAR",
            "TPMI_RH_HIERARCHY_AUTH", "TPMI_RH_NV_AUTH", "TPMI_RH_NV_INDEX", "TPMI_RH_LOCKOUT", "TPM_HANDLE",
            "TPMI_RH_ENDORSEMENT")
TSHARK_FIELDS = ("tpm.req.cc", "tpm.resp.rc", "tpm.handle.TPMI_SH_AUTH_SESSION",
                 "tpm.auth_attribs_cont", "tpm.auth_attribs_decrypt", "tpm.auth_attribs_encrypt") \
    + tuple(f"tpm.handle.{h}" for h in _HANDLES)


def tshark_frames(pcap) -> list[dict]:
    """Per TPM frame: what tshark's TPM 2.0 dissector makes of it."""
    r = subprocess.run(["tshark", "-r", str(pcap), "-Y", "tpm", "-T", "fields", "-E", "separator=|",
                        "-E", "occurrence=a", "-E", "aggregator=,"]
                       + [x for f in TSHARK_FIELDS for x in ("-e", f)],
                       capture_output=True, text=True, timeout=120, check=True)
    rows = []
    for line in r.stdout.splitlines():
        cells = dict(zip(TSHARK_FIELDS, line.split("|"), strict=False))
        row = {k: [x for x in cells.get(k, "").split(",") if x] for k in TSHARK_FIELDS[:6]}
        row["handles"] = sorted(int(x, 0) for h in _HANDLES for x in cells.get(f"tpm.handle.{h}", "").split(",") if x)
        rows.append(row)
    return rows
