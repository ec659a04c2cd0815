"""``tpmtop unlock``: will this machine's TPM-sealed LUKS2 tokens unseal with the PCRs as they are now?"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tpmtop.cli.common import notice, print_json, refuse_if_read_only, tpm_from_args
from tpmtop.errors import UsageError

DEFAULT_EVENTLOG = "/sys/kernel/security/tpm0/binary_bios_measurements"
# unlock's own exit statuses (report.exit_status), not the generic "1 the TPM failed": a token
# that would not unseal is the 1 an operator's script tests for.
EXIT_STATUS = """exit status: 0 no TPM token would fail to unseal (those that cannot be
judged are listed); 1 any would not unseal, or the TPM failed; 2 bad usage, bad input or
nothing that could be judged (no header read, no TPM token); 130 interrupted.
Diagnostics go to stderr, data to stdout."""


def add_unlock_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.cli import TPM_SELECTION, add_tpm_options

    add_tpm_options(p)
    p.epilog = f"{EXIT_STATUS}\n{TPM_SELECTION}"
    p.add_argument("devices", nargs="*", metavar="DEVICE|IMAGE",
                   help="LUKS2 block devices or image files (default: /etc/crypttab's, then every block "
                        "device whose header is LUKS2); headers are read, never written")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout (schema tpmtop-unlock/1)")
    p.add_argument("--trial", action="store_true",
                   help="confirm each software digest with a trial policy session on the TPM (PolicyPCR, "
                        "PolicyGetDigest; no authorization, nothing unsealed)")
    p.add_argument("--since", metavar="SNAPSHOT",
                   help="a `tpmtop pcrs --save` snapshot from a boot where the disk unlocked: name every bound "
                        "PCR that changed since, and the events behind it")
    p.add_argument("--eventlog", metavar="FILE",
                   help=f"the firmware's event log compared with the snapshot's (default: {DEFAULT_EVENTLOG})")


def run_unlock(args: argparse.Namespace) -> int:
    from tpmtop.pcrs.tpmread import read_all
    from tpmtop.unlock import report

    if args.trial:
        refuse_if_read_only(args, "start a trial policy session (--trial)")
    paths = list(args.devices) or report.discover()
    if not paths:
        raise UsageError("no LUKS2 device found (none in /etc/crypttab, no block device with a LUKS2 header); "
                         "name one: tpmtop unlock DEVICE|IMAGE")
    snap_doc = None
    if args.since is not None:
        from tpmtop.pcrs import snapshot

        snap_doc = snapshot.load(args.since)
    reports = [report.load(p) for p in paths]
    if all(r.error is not None for r in reports) and len(reports) == 1:
        raise UsageError(reports[0].error or "")
    tpm_info: dict[str, Any] | None = None
    live = None
    if report.needs_tpm(reports):  # headers first: a bad input is told without a TPM
        with tpm_from_args(args) as conn:
            live = conn.call(read_all)
            tpm_info = {"tcti": conn.target.tcti, "simulated": conn.simulated,
                        "update_counter": live.update_counter}
            report.judge_all(reports, live.values, _snapshot_values(snap_doc) if snap_doc is not None else None,
                             _srk(conn, report.srk_handles(reports)))
            if args.trial:
                _trial(conn, reports)
    else:
        report.judge_all(reports, {}, None)
    if snap_doc is not None and live is not None:
        from tpmtop.pcrs import snapshot

        report.add_moved(reports, snapshot.diff(snap_doc, _now_doc(live.values, args.eventlog)))
    if args.json:
        print_json(report.to_json(reports, tpm_info, args.since))
    else:
        print(report.text(reports, args.since, args.trial))
    return report.exit_status(reports)


def _srk(conn: Any, handles: list[int]) -> dict[int, bytes | None] | None:
    """This TPM's keys at the handles the tokens name as their SRK, or None (none named, or
    the TPM would not say: the verdicts then say the SRK is not checked)."""
    from tpmtop.errors import TpmError
    from tpmtop.unlock.srk import srk_names

    if not handles:
        return None
    try:
        names: dict[int, bytes | None] = conn.call(srk_names, handles)
    except TpmError as e:
        notice(f"the SRK the tokens name was not read ({e}): not compared")
        return None
    return names


def _trial(conn: Any, reports: list[Any]) -> None:
    from tpmtop.unlock.judge import Verdict
    from tpmtop.unlock.policy import trial_policy_pcr

    for r in reports:
        for j in r.judgements:
            t = j.token
            if j.software_digest is None or not t.pcrs or t.pin or j.verdict not in (Verdict.WOULD_UNSEAL,
                                                                                     Verdict.WOULD_NOT):
                continue
            j.trial_digest = conn.call(trial_policy_pcr, t.policy_alg, t.bank, t.pcrs)


def _snapshot_values(doc: dict[str, Any]) -> dict[tuple[str, int], bytes]:
    out: dict[tuple[str, int], bytes] = {}
    for r in doc.get("pcrs", []):
        v = r.get("tpm") if isinstance(r, dict) else None
        try:
            out[(str(r["bank"]), int(r["pcr"]))] = bytes.fromhex(str(v))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _now_doc(values: dict[str, dict[int, bytes]], eventlog: str | None) -> dict[str, Any]:
    """This boot as a snapshot document (PCR values, and the log's events where a log is read)."""
    from tpmtop.pcrs import eventlog as ev
    from tpmtop.pcrs.report import events_json

    doc: dict[str, Any] = {"pcrs": [{"bank": b, "pcr": p, "tpm": v.hex()} for b, vs in values.items()
                                    for p, v in vs.items()]}
    path = eventlog or DEFAULT_EVENTLOG
    if eventlog is not None or os.path.exists(path):
        try:
            doc["events"] = events_json(ev.parse_file(path))
        except UsageError as e:
            if eventlog is not None:
                raise
            notice(f"{e}: the snapshot's events are compared with none")
    return doc
