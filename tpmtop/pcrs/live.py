"""One question for a daemon (``tpmtop exporter --probe``): per bank, does this boot's event
log (and IMA's list) replay to the TPM's PCRs? The same parser, replay and verdicts as
``tpmtop pcrs``, given a root directory (``/``, or a test's tree)."""

from __future__ import annotations

import os

from tpmtop.pcrs import eventlog, ima, replay, verdict
from tpmtop.pcrs.tpmread import PcrValues

EVENTLOG = "sys/kernel/security/tpm0/binary_bios_measurements"
IMA_BINARY = "sys/kernel/security/ima/binary_runtime_measurements"


def log_readable(root: str = "/") -> bool:
    return os.access(os.path.join(root, EVENTLOG), os.R_OK)


def replay_matches(tpm: PcrValues, root: str = "/") -> dict[str, bool] | None:
    """bank -> whether every PCR matches; None when the root has no readable event log.
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
    rep = replay.replay(log, ima_list, banks, tpm.values)
    return verdict.compare(log, ima_list, rep, tpm).bank_matches()
