"""One question for a daemon (``tpmtop exporter --probe``): per bank, does this boot's event
log (and IMA's list) replay to the TPM's PCRs? The same parser, replay and verdicts as
``tpmtop pcrs``, given a root directory (``/``, or a test's tree)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tpmtop.pcrs import eventlog, ima, measurelog, replay, verdict
from tpmtop.pcrs.tpmread import PcrValues

EVENTLOG = "sys/kernel/security/tpm0/binary_bios_measurements"
IMA_BINARY = "sys/kernel/security/ima/binary_runtime_measurements"
MEASURE_LOG = measurelog.DEFAULT.lstrip("/")


def _measure(root: str) -> measurelog.MeasureLog | None:
    """systemd's measure log under ``root``, when there is a readable one."""
    path = os.path.join(root, MEASURE_LOG)
    if not os.access(path, os.R_OK):
        return None
    try:
        return measurelog.read(path)
    except eventlog.EventLogError:
        return None


def log_readable(root: str = "/") -> bool:
    return os.access(os.path.join(root, EVENTLOG), os.R_OK)


def replay_matches(tpm: PcrValues, root: str = "/") -> dict[str, bool] | None:
    """bank -> whether every judged PCR matches and no failing verdict names it (a never-extended
    bank is False), for the banks both the log and the TPM carry; None when the root has no
    readable event log.
    Read after ``tpm`` (IMA's list only grows: see :mod:`tpmtop.pcrs.replay`)."""
    try:
        log = eventlog.parse_file(os.path.join(root, EVENTLOG))
    except eventlog.EventLogError:
        return None
    ima_list = None
    ima_path = os.path.join(root, IMA_BINARY)
    if os.access(ima_path, os.R_OK):
        try:
            ima_list = ima.read(ima_path)
        except eventlog.EventLogError:
            ima_list = None
    banks = list(dict.fromkeys(list(tpm.allocated) + log.banks))
    measure = _measure(root)
    rep = replay.replay(log, ima_list, banks, tpm.values, measure=measure)
    return verdict.compare(log, ima_list, rep, tpm, measure).bank_matches()


@dataclass(frozen=True)
class PcrSnapshot:
    """One reading for the dashboard's PCRs panel: plain, immutable."""

    log_note: str  # what was replayed ("OVMF log: crypto-agile, 25 events …"), or why nothing was
    update_counter: int
    rows: tuple[tuple[int, str, str, int, str], ...]  # (pcr, bank, status, events, reason) worth a line
    health: tuple[tuple[str, str, str], ...]  # (bank, verdict, detail)
    banks: tuple[tuple[str, bool], ...]  # (bank, the replay matches every PCR)


def snapshot(tpm: PcrValues, root: str = "/") -> PcrSnapshot:
    """Compare ``tpm`` with the log (and IMA's list) under ``root``; without a readable log,
    the PCR values alone with the reason."""
    path = os.path.join(root, EVENTLOG)
    try:
        log = eventlog.parse_file(path)
        note = (f"{path}: {log.format}, {len(log.events)} events"
                + (f", PARTIAL at byte {log.stop_offset}" if log.partial else ""))
    except eventlog.EventLogError as e:
        log, note = None, f"no event log replayed ({e})"
    ima_list = None
    ima_path = os.path.join(root, IMA_BINARY)
    if log is not None and os.access(ima_path, os.R_OK):
        try:
            ima_list = ima.read(ima_path, list(tpm.allocated))
            note += f"; IMA: {len(ima_list.entries)} entries"
        except eventlog.EventLogError:
            ima_list = None
    banks = list(dict.fromkeys(list(tpm.allocated) + (log.banks if log else [])))
    measure = _measure(root) if log is not None else None
    rep = replay.replay(log, ima_list, banks, tpm.values, measure=measure)
    rep_ok = verdict.compare(log, ima_list, rep, tpm, measure)
    # a bank only one side carries is said once, by its health line, not on each of its PCRs
    bank_wide = (verdict.PcrStatus.NOT_IN_LOG, verdict.PcrStatus.NOT_ON_TPM)
    rows = tuple((r.pcr, r.bank, r.status.value, r.events + r.ima + r.systemd, r.reason) for r in rep_ok.results
                 if log is not None and r.status not in bank_wide
                 and (r.status is not verdict.PcrStatus.MATCH or r.events or r.ima or r.systemd))
    return PcrSnapshot(note, tpm.update_counter, rows,
                       tuple((h.bank, h.verdict.value, h.detail) for h in rep_ok.health),
                       tuple(rep_ok.bank_matches().items()) if log is not None else ())
