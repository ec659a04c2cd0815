"""systemd's own measurements: ``/run/log/systemd/tpm2-measure.log``.

systemd-pcrphase, -pcrmachine, -pcrfs, cryptsetup and -pcrextend extend PCRs 11-15 (and, from
systemd 259, NvPCRs: NV indices from 0x01d10200) from user space, where the firmware's log
cannot record them; each extend is appended to this file as one record of the TCG Canonical
Event Log in its JSON encoding (CEL-JSON), one record per line, each line opened by an ASCII
record separator (0x1e, RFC 7464 JSON text sequences) as systemd writes it (systemd's
docs/TPM2_PCR_MEASUREMENTS.md). A record::

    {"pcr": 11, "digests": [{"hashAlg": "sha256", "digest": "<hex>"}, …],
     "content_type": "systemd", "content": {"string": "enter-initrd", "eventType": "phase", …}}

Only ``pcr`` (or an NV index) and ``digests`` are replayed; ``content`` is shown. A line that
is not such a record stops reading there, with the line named (as for the firmware's log).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tpmtop import boundedread
from tpmtop.errors import UsageError
from tpmtop.pcrs.eventlog import ALGORITHMS, unreadable

DEFAULT = "/run/log/systemd/tpm2-measure.log"
NVPCR_BASE = 0x01D10200  # systemd 259's NvPCRs: NV indices from here (TPM_NT_EXTEND)
MAX_RECORDS = 1_000_000
_SIZES = {name: size for name, size in ALGORITHMS.values()}


@dataclass(slots=True)
class Record:
    index: int  # 0-based record number
    line: int  # 1-based line of the file
    pcr: int | None  # a PCR, or None for an NvPCR record
    nv_index: int | None
    digests: dict[str, bytes]
    content_type: str
    description: str  # content's string (a phase word, a machine id, a volume…), or its JSON

    @property
    def banks(self) -> tuple[str, ...]:
        return tuple(self.digests)


@dataclass
class MeasureLog:
    source: str
    records: list[Record] = field(default_factory=list)
    banks: list[str] = field(default_factory=list)  # every bank any record carries, first seen first
    stop_line: int | None = None
    stop_reason: str | None = None

    @property
    def nvpcrs(self) -> dict[int, list[Record]]:
        out: dict[int, list[Record]] = {}
        for r in self.records:
            if r.nv_index is not None:
                out.setdefault(r.nv_index, []).append(r)
        return out


def _nv_index(obj: dict[str, Any]) -> int | None:
    for key in ("nvIndex", "nv_index", "nvindex"):
        v = obj.get(key)
        if isinstance(v, int):
            return v
        if isinstance(v, str):
            return int(v, 0)
    return None


def _record(obj: Any, index: int, line: int) -> Record:
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    pcr = obj.get("pcr")
    nv = _nv_index(obj)
    if pcr is None and nv is None:
        raise ValueError("no pcr and no NV index")
    if pcr is not None and (not isinstance(pcr, int) or isinstance(pcr, bool) or not 0 <= pcr < 1 << 32):
        raise ValueError(f"pcr {str(pcr)[:20]!r} is not a PCR number")
    digests: dict[str, bytes] = {}
    items = obj.get("digests")
    if not isinstance(items, list) or not items:
        raise ValueError("no digests")
    for d in items:
        if not isinstance(d, dict) or not isinstance(d.get("hashAlg"), str) or not isinstance(d.get("digest"), str):
            raise ValueError("a digest without hashAlg or digest")
        bank = d["hashAlg"].lower()
        value = bytes.fromhex(d["digest"])
        if bank in _SIZES and len(value) != _SIZES[bank]:
            raise ValueError(f"a {len(value)}-byte {bank} digest")
        digests[bank] = value
    content = obj.get("content")
    if isinstance(content, dict) and isinstance(content.get("string"), str):
        desc = content["string"]
        if isinstance(content.get("eventType"), str):
            desc = f"{content['eventType']}: {desc}"
    else:
        desc = json.dumps(content, sort_keys=True)[:200] if content is not None else ""
    ctype = obj.get("content_type")
    return Record(index, line, pcr if nv is None else None, nv, digests,
                  ctype if isinstance(ctype, str) else "", desc)


def parse(buf: bytes, source: str) -> MeasureLog:
    out = MeasureLog(source)
    for lineno, raw in enumerate(buf.split(b"\n"), 1):
        text = raw.strip().lstrip(b"\x1e").strip()
        if not text:
            continue
        if len(out.records) >= MAX_RECORDS:
            out.stop_line, out.stop_reason = lineno, f"stopped after {MAX_RECORDS} records (tpmtop's bound)"
            break
        try:
            rec = _record(json.loads(text), len(out.records), lineno)
        except (ValueError, RecursionError) as e:  # json.JSONDecodeError is a ValueError
            out.stop_line = lineno
            out.stop_reason = f"line {lineno} is not a CEL-JSON record ({str(e)[:80]}): {boundedread.excerpt(text)}"
            break
        for b in rec.digests:
            if b not in out.banks:
                out.banks.append(b)
        out.records.append(rec)
    return out


def read(path: str) -> MeasureLog:
    """The file at ``path``, read with tpmtop's bounds (a FIFO or device refused)."""
    try:
        buf = boundedread.read_bounded(path, boundedread.LIMIT_LOG, what="measure log")
    except (UsageError, OSError) as e:
        raise unreadable(path, e, "systemd's measure log") from None
    return parse(buf, path)
