"""``tpmtop pcrs``: the boot's event log (and IMA's list) replayed beside the TPM's PCRs."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from tpmtop.cli.common import notice, print_json, tpm_from_args
from tpmtop.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from tpmtop.pcrs.eventlog import EventLog, Progress

DEFAULT_EVENTLOG = "/sys/kernel/security/tpm0/binary_bios_measurements"
DEFAULT_IMA = "/sys/kernel/security/ima/binary_runtime_measurements"


def add_pcrs_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.cli import add_tpm_options

    add_tpm_options(p)
    p.add_argument("--eventlog", metavar="FILE",
                   help=f"the firmware's TCG event log (default: {DEFAULT_EVENTLOG})")
    p.add_argument("--ima", metavar="FILE",
                   help="IMA's measurement list, ascii_runtime_measurements[_ALG] or binary_runtime_measurements "
                        f"(default: {DEFAULT_IMA} when the event log is the default one)")
    p.add_argument("--no-tpm", action="store_true", help="replay the log only; read no TPM")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout (schema tpmtop-pcrs/1)")
    p.add_argument("--events", action="store_true", help="list every event with its type and decoded data")
    p.add_argument("--bank", action="append", metavar="BANK",
                   help="show this bank only (sha1, sha256, …; repeat for more); --json keeps every bank")
    p.add_argument("--all", action="store_true", help="every PCR, not only those the log extends or that differ")
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


def _clock(conn: Any) -> dict[str, Any]:
    """The TPM's ReadClock counters (read-only, no authorization), kept in a snapshot so that
    `tpmtop health --against SNAPSHOT` can say whether it was reset, restarted or cleared since;
    nothing when the TPM refuses it."""
    from dataclasses import asdict

    from tpmtop.errors import TpmError
    from tpmtop.tpm.status import read_clock

    try:
        return {"clock": asdict(conn.call(read_clock))}
    except TpmError:
        return {}


def _run(args: argparse.Namespace, late: _Late) -> int:
    from tpmtop.pcrs import ima, replay, report, snapshot, verdict

    log_path = args.eventlog or DEFAULT_EVENTLOG
    tpm_vals = None
    tpm_info = None
    if not args.no_tpm:
        # the TPM first, then the lists: IMA's list only grows, so one read after the PCRs holds
        # their value as one of its prefixes (replay.Replay.ima_match_at)
        from tpmtop.pcrs.tpmread import read_all

        with tpm_from_args(args) as conn:
            tpm_vals = conn.call(read_all)
            tpm_info = {"tcti": conn.target.tcti, "simulated": conn.simulated}
            tpm_info.update(_clock(conn))
    log = _read_log(log_path, explicit=args.eventlog is not None, progress=late, quiet=args.no_tpm)
    ima_path = args.ima
    if ima_path is None and args.eventlog is None and os.access(DEFAULT_IMA, os.R_OK):
        ima_path = DEFAULT_IMA
    banks = None if tpm_vals is None else list(dict.fromkeys(list(tpm_vals.allocated) + (log.banks if log else [])))
    ima_list = ima.read(ima_path, banks or (log.banks if log else None), late) if ima_path else None
    if tpm_vals is None and log is None and ima_list is None:
        raise UsageError(f"--no-tpm and no event log at {log_path}: nothing to replay or compare "
                         "(--eventlog FILE, --ima FILE)")
    rep = replay.replay(log, ima_list, banks, tpm_vals.values if tpm_vals is not None else None, late)
    late.close()
    result = verdict.compare(log, ima_list, rep, tpm_vals)
    # every event decoded only where it is kept or shown (50,000 of them cost a second)
    doc = report.to_json(result, log, log_path if log else None, ima_list, rep, tpm_vals, tpm_info,
                         with_events=args.events or args.save is not None or args.diff is not None)
    if args.save is not None:
        path = snapshot.save(doc, _snapshot_dir(args), args.save or None)
        notice(f"saved this boot's PCRs and {len(doc.get('events', []))} events to {path}")
    if args.diff is not None:
        old_path = args.diff or snapshot.latest(_snapshot_dir(args))
        diff = snapshot.diff(snapshot.load(old_path), doc)
        if args.json:
            print_json({"schema": report.SCHEMA, "diff": diff, "snapshot": str(old_path)})
        else:
            print(snapshot.diff_text(diff, str(old_path)))
        return 0
    if args.json:
        if not args.events:
            doc.pop("events", None)
        print_json(doc)
    else:
        print(report.text(result, log, log_path, ima_list, tpm_vals, args.all, args.events, args.bank))
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
