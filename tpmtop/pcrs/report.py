"""``tpmtop pcrs`` as text and as JSON (schema: tpmtop/schema/pcrs-1.json)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

from tpmtop.pcrs.datacheck import Check, DataChecks
from tpmtop.pcrs.eventlog import EventLog
from tpmtop.pcrs.events import describe, type_name
from tpmtop.pcrs.ima import ImaList
from tpmtop.pcrs.measurelog import MeasureLog
from tpmtop.pcrs.replay import Replay, initial
from tpmtop.pcrs.tpmread import PcrValues
from tpmtop.pcrs.verdict import FAILING, PcrStatus, Report
from tpmtop.textsafe import counted, safe

SCHEMA = "tpmtop-pcrs/1"


def log_json(log: EventLog | None, path: str | None) -> dict[str, Any] | None:
    if log is None:
        return None
    return {"path": path, "format": log.format, "banks": log.banks, "events": len(log.events),
            "bytes": log.size, "startup_locality": log.startup_locality,
            "partial": log.partial, "stop_offset": log.stop_offset, "stop_reason": log.stop_reason,
            "notes": log.notes}


def events_json(log: EventLog, checks: DataChecks | None = None) -> list[dict[str, Any]]:
    by_event = checks.by_event if checks is not None else {}
    out = []
    for e in log.events:
        row: dict[str, Any] = {"index": e.index, "offset": e.offset, "pcr": e.pcr, "source": "firmware",
                               "type": type_name(e.type),
                               "type_value": e.type, "digests": {b: d.hex() for b, d in e.digests.items()},
                               "data": describe(e.type, e.data)}
        if e.index in by_event:
            c, quirk = by_event[e.index]
            row["data_check"] = c.value if quirk is None else f"{c.value}: {quirk}"
        out.append(row)
    return out


def measure_json(m: MeasureLog | None, with_records: bool) -> dict[str, Any] | None:
    if m is None:
        return None
    out: dict[str, Any] = {
        "path": m.source, "records": len(m.records), "banks": m.banks, "partial": m.stop_reason is not None,
        "stop_line": m.stop_line, "stop_reason": m.stop_reason,
        "nvpcrs": {f"0x{nv:08x}": len(recs) for nv, recs in sorted(m.nvpcrs.items())}}
    if with_records:
        out["events"] = [{"index": r.index, "line": r.line, "pcr": r.pcr,
                          "nv_index": f"0x{r.nv_index:08x}" if r.nv_index is not None else None,
                          "source": "systemd", "content_type": r.content_type, "data": r.description,
                          "digests": {b: d.hex() for b, d in r.digests.items()}} for r in m.records]
    return out


def ima_json(ima: ImaList | None) -> dict[str, Any] | None:
    if ima is None:
        return None
    return {"path": ima.source, "entries": len(ima.entries), "banks": ima.banks,
            "partial": ima.stop_reason is not None, "stop_offset": ima.stop_offset, "stop_reason": ima.stop_reason}


def to_json(report: Report, log: EventLog | None, log_path: str | None, ima: ImaList | None, rep: Replay,
            tpm: PcrValues | None, tpm_info: dict[str, Any] | None, with_events: bool,
            checks: DataChecks | None = None, measure: MeasureLog | None = None) -> dict[str, Any]:
    out = {"schema": SCHEMA, "tpm": tpm_info,
           "update_counter": tpm.update_counter if tpm is not None else None,
           "eventlog": log_json(log, log_path), "ima": ima_json(ima),
           "measure_log": measure_json(measure, with_events),
           "replay": {b: {str(p): v.hex() for p, v in enumerate(vals)} for b, vals in rep.values.items()},
           "pcrs": [r.to_json() for r in report.results],
           "banks": {b: ok for b, ok in report.bank_matches().items()},
           "health": [h.to_json() for h in report.health],
           "skipped": rep.skipped + ([f"{rep.skipped_count - len(rep.skipped)} more events name PCRs past 23"]
                                     if rep.skipped_count > len(rep.skipped) else []),
           "skipped_count": rep.skipped_count,
           "data_check": checks.to_json() if checks is not None else None}
    if with_events and log is not None:
        out["events"] = events_json(log, checks)
    return out


WIDTH = 80
SHORT_HEX = 16  # hex digits of a digest shown without --wide (sha256's first 8 bytes)
# rows that say the same for every PCR of a bank: the bank-health line says it once
_BANK_WIDE = (PcrStatus.NOT_IN_LOG, PcrStatus.NOT_ON_TPM)


def _hex(value: bytes | None, wide: bool) -> str:
    if value is None:
        return "-"
    h = value.hex()
    return h if wide or len(h) <= SHORT_HEX + 1 else h[:SHORT_HEX] + "…"


def fit_lines(lines: list[str], width: int) -> list[str]:
    """Each line at most ``width`` columns: a longer one wraps, its continuation indented
    under the line's own indentation."""
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" "))
        indent = " " * min(lead + 4, 24)
        out += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False,
                             drop_whitespace=True) or [line[:width]]
    return out


def wrap_row(row: str, width: int, indent: int) -> list[str]:
    """``row`` broken at spaces into lines of at most ``width``, continuations indented by
    ``indent`` (a word longer than a line is cut). textwrap took most of the time of
    ``--events`` on 50,000 events; this does the one thing a table row needs."""
    out: list[str] = []
    while len(row) > width:
        cut = row.rfind(" ", indent + 1, width + 1)
        if cut <= indent:
            cut = width
        out.append(row[:cut].rstrip())
        row = " " * indent + row[cut:].lstrip()
    out.append(row)
    return out


def text(report: Report, log: EventLog | None, log_path: str | None, ima: ImaList | None,
         tpm: PcrValues | None, show_all: bool, show_events: bool, banks: list[str] | None = None,
         checks: DataChecks | None = None, rep: Replay | None = None, wide: bool = False,
         measure: MeasureLog | None = None, tpm_info: dict[str, Any] | None = None) -> str:
    """The report for a person as one string (see :func:`text_lines`)."""
    return "\n".join(text_lines(report, log, log_path, ima, tpm, show_all, show_events, banks, checks, rep, wide,
                                measure, tpm_info))


def text_lines(report: Report, log: EventLog | None, log_path: str | None, ima: ImaList | None,
               tpm: PcrValues | None, show_all: bool, show_events: bool, banks: list[str] | None = None,
               checks: DataChecks | None = None, rep: Replay | None = None, wide: bool = False,
               measure: MeasureLog | None = None, tpm_info: dict[str, Any] | None = None) -> Iterator[str]:
    """The report for a person, line by line (``--events`` on 50,000 events is streamed to the
    terminal, never held as one string); every line fits 80 columns unless ``wide``."""
    lines: list[str] = []
    if log is not None:
        lines.append(f"event log  {safe(log_path)}: {log.format}, {len(log.events)} events, banks "
                     f"{', '.join(log.banks)}" + (f", StartupLocality {log.startup_locality}"
                                                  if log.startup_locality is not None else ""))
        if log.partial:
            lines.append(f"           PARTIAL: read up to byte {log.stop_offset}: {safe(log.stop_reason)}")
        for n in log.notes:
            lines.append(f"           note: {safe(n)}")
        if rep is not None and rep.skipped_count:
            first = rep.skipped[0] if rep.skipped else ""
            lines.append(f"           note: {counted(rep.skipped_count, 'event names', 'events name')} a PCR past "
                         f"23 and {'is' if rep.skipped_count == 1 else 'are'} not replayed (first: {safe(first)})")
        if checks is not None and checks.checked:
            lines.append(f"           event data: {checks.summary()}")
    if ima is not None:
        lines.append(f"IMA        {safe(ima.source)}: {len(ima.entries)} entries, banks {', '.join(ima.banks)}"
                     + (f" (PARTIAL at {ima.stop_offset}: {safe(ima.stop_reason)})" if ima.stop_reason else ""))
    if measure is not None:
        nv = measure.nvpcrs
        lines.append(f"systemd    {safe(measure.source)}: {counted(len(measure.records), 'record')}, banks "
                     f"{', '.join(measure.banks) or '-'}"
                     + (f"; NvPCRs {', '.join(f'0x{i:08x} ({len(r)})' for i, r in sorted(nv.items()))}" if nv else "")
                     + (f" (PARTIAL at line {measure.stop_line}: {safe(measure.stop_reason)})"
                        if measure.stop_reason else ""))
    if tpm_info and tpm_info.get("nvpcr_indices"):
        held = ", ".join(tpm_info["nvpcr_indices"])
        lines.append(f"NvPCRs     NV indices in systemd's NvPCR range on the TPM: {held}")
    if tpm is not None:
        lines.append(f"TPM        banks {', '.join(f'{b} ({len(p)} PCRs)' for b, p in tpm.allocated.items())}; "
                     f"pcrUpdateCounter {tpm.update_counter}")
    lines.append("")
    header = f"{'PCR':>3}  {'bank':<7} {'status':<12} {'events':>6}  value"
    lines += [header, "-" * len(header)]
    nothing = log is None and ima is None and measure is None  # the TPM's values alone
    if nothing:
        lines.insert(0, "no event log and no IMA list: the TPM's PCRs alone (those not at their start value; "
                        "--all for every one)")
    for r in report.results:
        if banks and r.bank not in banks:
            continue
        if nothing:
            if show_all or (r.tpm is not None and r.tpm != initial(r.bank, r.pcr)):
                # the status word --json gives (not-replayed): one enum for both outputs
                lines.append(f"{r.pcr:>3}  {r.bank:<7} {r.status.value:<12} {'':>6}  {_hex(r.tpm, wide)}")
            continue
        interesting = r.events or r.ima or r.systemd or r.status not in (PcrStatus.MATCH, PcrStatus.NOT_READ)
        if not (show_all or (interesting and r.status not in _BANK_WIDE)):
            continue
        value = r.tpm if r.tpm is not None else r.replay
        nev = f"{r.events + r.systemd}" + (f"+{r.ima}" if r.ima else "")
        lines.append(f"{r.pcr:>3}  {r.bank:<7} {r.status.value:<12} {nev:>6}  {_hex(value, wide)}")
        if r.status in (PcrStatus.UNEXPLAINED, PcrStatus.BEHIND, PcrStatus.NOT_JUDGED, PcrStatus.NOT_REPLAYED):
            if r.replay is not None and r.status in (PcrStatus.UNEXPLAINED, PcrStatus.BEHIND):
                lines.append(f"{'':>3}  {'':<7} {'replay':<12} {'':>6}  {_hex(r.replay, wide)}")
            lines.append(f"{'':>5}{safe(r.reason)}")
    if report.health:
        lines.append("")
        lines.append("bank health")
        for h in report.health:
            if banks and h.bank not in banks and h.bank != "*":
                continue
            mark = "FAIL" if h.verdict in FAILING else "    "
            lines.append(f"  {mark} {h.bank:<7} {h.verdict.value:<19} {safe(h.detail)}")
    matches = {b: ok for b, ok in report.bank_matches().items() if (not banks or b in banks) and not nothing}
    if matches:
        lines.append("")
        lines.append("replay " + "; ".join(f"{b}: {'matches' if ok else 'DOES NOT MATCH'}"
                                           for b, ok in matches.items()))
    yield from (lines if wide else fit_lines(lines, WIDTH))
    lines = []
    if show_events and log is not None:
        by_event = checks.by_event if checks is not None else {}
        yield ""
        yield f"{'#':>4} {'PCR':>3}  {'type':<32} data"
        for e in log.events:
            mark = ""
            if e.index in by_event:
                c, quirk = by_event[e.index]
                mark = " [DATA DOES NOT HASH TO ITS DIGEST]" if c is Check.MISMATCH else f" [quirk: {quirk}]"
            row = f"{e.index:>4} {e.pcr:>3}  {type_name(e.type):<32} {safe(describe(e.type, e.data))}{mark}"
            # a long row continues under the type column, whatever the index's width
            if wide or len(row) <= WIDTH:
                yield row
            else:
                yield from wrap_row(row, WIDTH, 10)
    if show_events and measure is not None and measure.records:
        lines.append("")
        lines.append(f"{'#':>4} {'PCR':>3}  {'source':<32} data")
        for m in measure.records:
            where = f"{m.pcr:>3}" if m.pcr is not None else "NV "
            nvtext = f"NvPCR 0x{m.nv_index:08x}: " if m.nv_index is not None else ""
            src = "systemd" if m.content_type in ("", "systemd") else f"systemd ({safe(m.content_type)})"
            row = f"{m.index:>4} {where}  {src:<32} {nvtext}{safe(m.description)}"
            lines += [row] if wide or len(row) <= WIDTH else wrap_row(row, WIDTH, 10)
    yield from lines
