"""``tpmtop pcrs``: the boot's event log (and IMA's list) replayed beside the TPM's PCRs."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from tpmtop.cli.common import notice, print_json, tpm_from_args
from tpmtop.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from tpmtop.pcrs import datacheck, verdict
    from tpmtop.pcrs.eventlog import EventLog, Progress

DEFAULT_EVENTLOG = "/sys/kernel/security/tpm0/binary_bios_measurements"
DEFAULT_IMA = "/sys/kernel/security/ima/binary_runtime_measurements"

EXIT_STATUS = """exit status: 0 every judged bank matches its replay (a bank only the log or only the TPM
carries, and a PCR an event without the bank's digest extends, are not judged) and every
checked event's data hashes to its digest (a named firmware quirk accepted); 1 a PCR is
unexplained or behind, a bank was never extended, event data does not hash to its digest,
or the TPM failed; 2 bad usage or an unreadable log; 130 interrupted.
--diff exits 0 when it could compare."""


def add_pcrs_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.cli import add_tpm_options

    add_tpm_options(p)
    from tpmtop.cli import TPM_SELECTION

    p.epilog = f"{EXIT_STATUS}\n{TPM_SELECTION}"
    p.add_argument("--eventlog", metavar="FILE",
                   help=f"the firmware's TCG event log (default: {DEFAULT_EVENTLOG})")
    p.add_argument("--ima", metavar="FILE",
                   help="IMA's measurement list, ascii_runtime_measurements[_ALG] or binary_runtime_measurements "
                        f"(default: {DEFAULT_IMA} when the event log is the default one)")
    p.add_argument("--measure-log", metavar="FILE",
                   help="systemd's measurements (CEL-JSON), replayed after the firmware's events (default: "
                        "/run/log/systemd/tpm2-measure.log when the event log is the default one)")
    p.add_argument("--no-tpm", action="store_true", help="replay the log only; read no TPM")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout (schema tpmtop-pcrs/1)")
    p.add_argument("--events", action="store_true", help="list every event with its type and decoded data")
    p.add_argument("--bank", action="append", metavar="BANK",
                   help="show this bank only (sha1, sha256, …; repeat for more); --json keeps every bank")
    p.add_argument("--all", action="store_true", help="every PCR, not only those the log extends or that differ")
    p.add_argument("--wide", action="store_true",
                   help="whole digests and lines as long as they are (text fits 80 columns without it)")
    p.add_argument("--save", nargs="?", const="", metavar="FILE",
                   help="save this boot's PCRs and events as a snapshot (default: tpmtop's data directory)")
    p.add_argument("--diff", nargs="?", const="", metavar="SNAPSHOT",
                   help="compare this boot with a saved snapshot (default: the newest saved one)")
    p.add_argument("--snapshot-dir", metavar="DIR",
                   help="where --save writes and --diff looks (default: $XDG_DATA_HOME/tpmtop/pcrs, "
                        "~/.local/share/tpmtop/pcrs; the systemd unit in contrib/ uses /var/lib/tpmtop/pcrs)")


class _Late:
    """The progress of reading and replaying, drawn (on a terminal) only once the job has
    taken a second: a firmware log of a few hundred events is done before a bar could show."""

    def __init__(self, after_s: float = 1.0) -> None:
        import time

        self._clock = time.monotonic
        self.t0 = self._clock()
        self.after_s = after_s
        self.bar: Any = None

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        if self.bar is None:
            if self._clock() - self.t0 < self.after_s:
                return
            from tpmtop.cli.progress import Bar

            self.bar = Bar(stage, total, "records")
        self.bar.describe(stage)
        self.bar(done, total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_pcrs(args: argparse.Namespace) -> int:
    late = _Late()
    try:
        return _run(args, late)
    finally:
        late.close()


def _run(args: argparse.Namespace, late: _Late) -> int:
    from tpmtop.errors import NoTpm
    from tpmtop.pcrs import datacheck, ima, measurelog, replay, report, snapshot, verdict

    log_path = args.eventlog or DEFAULT_EVENTLOG
    tpm_vals = None
    tpm_info = None
    if not args.no_tpm:
        # the TPM first, then the lists: IMA's list only grows, so one read after the PCRs holds
        # their value as one of its prefixes (replay.Replay.ima_match_at)
        from tpmtop.pcrs import tpminfo
        from tpmtop.pcrs.tpmread import read_all
        from tpmtop.tpm.tcti import TargetKind

        try:
            with tpm_from_args(args) as conn:
                tpm_vals = conn.call(read_all)
                # this host's own TPM (its device, or the resource manager in front of it), not
                # a simulator or a TPM across the network: only then is this host's boot its boot
                local = conn.target.kind in (TargetKind.DEVICE, TargetKind.TABRMD)
                tpm_info = {"tcti": conn.target.tcti, "simulated": conn.simulated, "local": local,
                            **conn.call(tpminfo.read)}
        except NoTpm as e:
            raise NoTpm(f"{e}; --no-tpm replays the event log alone") from None
    log = _read_log(log_path, explicit=args.eventlog is not None, progress=late, quiet=args.no_tpm)
    ima_path = args.ima
    if ima_path is None and args.eventlog is None and os.access(DEFAULT_IMA, os.R_OK):
        ima_path = DEFAULT_IMA
    measure_path = args.measure_log
    if measure_path is None and args.eventlog is None and os.access(measurelog.DEFAULT, os.R_OK):
        measure_path = measurelog.DEFAULT
    measure = measurelog.read(measure_path) if measure_path else None
    banks = None if tpm_vals is None else list(dict.fromkeys(list(tpm_vals.allocated) + (log.banks if log else [])))
    ima_list = ima.read(ima_path, banks or (log.banks if log else None), late) if ima_path else None
    if tpm_vals is None and log is None and ima_list is None and measure is None:
        raise UsageError(f"--no-tpm and no event log at {log_path}: nothing to replay or compare "
                         "(--eventlog FILE, --ima FILE)")
    rep = replay.replay(log, ima_list, banks, tpm_vals.values if tpm_vals is not None else None, late, measure)
    late.close()
    result = verdict.compare(log, ima_list, rep, tpm_vals, measure)
    checks = datacheck.check_all(log.events) if log is not None else None
    # the JSON document only where it is written or compared (with --events on 50,000 events
    # it was most of the memory of a text run); every event decoded only where kept or shown
    doc: dict[str, Any] = {}
    if args.json or args.save is not None or args.diff is not None:
        doc = report.to_json(result, log, log_path if log else None, ima_list, rep, tpm_vals, tpm_info,
                             with_events=args.events or args.save is not None or args.diff is not None,
                             checks=checks, measure=measure)
    if args.save is not None:
        # this host's boot_id only when both the log and the TPM are this host's
        this_boot = args.eventlog is None and (tpm_info is None or bool(tpm_info.get("local")))
        path = snapshot.save(doc, _snapshot_dir(args), args.save or None, this_boot=this_boot)
        notice(f"saved this boot's PCRs and {len(doc.get('events', []))} events to {path}")
    if args.diff is not None:
        old_path = args.diff or snapshot.latest(_snapshot_dir(args))
        diff = snapshot.diff(snapshot.load(old_path), doc)
        if args.json:
            print_json({"schema": report.SCHEMA, "diff": diff, "snapshot": str(old_path)})
        else:
            text = snapshot.diff_text(diff, str(old_path))
            print(text if args.wide else "\n".join(report.fit_lines(text.split("\n"), report.WIDTH)))
        return 0
    if args.json:
        if not args.events:
            doc.pop("events", None)
        print_json(doc)
    else:
        write = sys.stdout.write
        for line in report.text_lines(result, log, log_path, ima_list, tpm_vals, args.all, args.events, args.bank,
                                      checks=checks, rep=rep, wide=args.wide, measure=measure, tpm_info=tpm_info):
            write(line + "\n")
        sys.stdout.flush()
    return exit_status(result, checks)


def exit_status(result: verdict.Report, checks: datacheck.DataChecks | None) -> int:
    """1 when a judged bank does not match (or a failing verdict names it) or event data does
    not hash to its digest; else 0 (see EXIT_STATUS)."""
    if not all(result.bank_matches().values()) or result.failing():
        return 1
    if checks is not None and checks.mismatches:
        return 1
    return 0


def _snapshot_dir(args: argparse.Namespace) -> Path:
    from pathlib import Path

    from tpmtop.sources.export_file import data_dir

    return Path(args.snapshot_dir) if args.snapshot_dir else data_dir() / "pcrs"


def _read_log(path: str, explicit: bool, progress: Progress | None = None, quiet: bool = False) -> EventLog | None:
    from tpmtop.pcrs import eventlog

    if not explicit and not os.path.exists(path):
        if quiet:  # --no-tpm: the one line that follows says there is nothing to do
            return None
        notice(f"no firmware event log at {path} (no TPM driver, no securityfs, or the firmware gave none): "
               "PCRs only")
        return None
    try:
        return eventlog.parse_file(path, progress)
    except eventlog.EventLogError as e:
        if not explicit and "permission denied" in str(e):
            if not quiet:
                notice(f"{e}: PCRs only")
            return None
        raise
