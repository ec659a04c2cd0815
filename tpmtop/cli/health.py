"""``tpmtop health``: the TPM's lockout state and who caused it, the driver's and the kernel's
set-up, IMA's list — each line a verdict with its evidence. Exit status: :data:`EXIT_STATUS`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tpmtop.cli.common import print_json, tpm_from_args
from tpmtop.errors import UsageError

EXIT_STATUS = """exit status: 0 healthy: the TPM answered and nothing warned (with --root on a saved
tree, whose TPM is not asked by choice: no problem in what was judged); 1 a WARN or FAIL, or
this machine's TPM not judged (none present, no permission to open it, or it did not answer):
the TPM or the system failed; 2 bad usage. The last line says what was not judged and why."""


def add_health_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.cli import add_tpm_options

    p.epilog = EXIT_STATUS  # in place of the common one, as `tpmtop pcrs`; add_tpm_options appends TPM selection
    add_tpm_options(p)
    p.add_argument("--json", action="store_true", help="the report as JSON (schema tpmtop.health/1) on stdout")
    p.add_argument("--capture", metavar="FILE", action="append", default=[],
                   help="a capture of `tpmtop run --json`, `tpmtop proxy --json` or `tpmtop kernel`: name the "
                        "client behind each wrong password, and each loaded object's holder (repeatable)")
    p.add_argument("--root", metavar="DIR", default=None,
                   help="judge the set-up, driver and IMA of the system under DIR (a saved tree, as `tpmtop boot "
                        "--root`); default: this system, unless the TPM is a simulator")
    p.add_argument("--state", metavar="FILE", default=None,
                   help="health's state file: the clock each TPM last showed, compared with now (reset / "
                        "restarted / cleared since) and then updated; 'none': neither (default: "
                        "$XDG_STATE_HOME/tpmtop/health-state.json)")
    p.add_argument("--against", metavar="SNAPSHOT", default=None,
                   help="compare the TPM's clock with a `tpmtop pcrs --save` snapshot that carries one "
                        "(tpm.clock) instead of the state file")
    p.add_argument("--ima-sample", type=float, default=1.0, metavar="S",
                   help="seconds to watch IMA's count for its rate now (0: only the rate over the boot; default 1)")


def _key(tpm: dict[str, Any], facts: Any) -> str:
    from tpmtop.health import ek, savedstate

    return savedstate.tpm_key(tpm, ek.fingerprint(facts))


def run_health(args: argparse.Namespace) -> int:
    import os

    from tpmtop.capture import load_capture
    from tpmtop.health import build, savedstate
    from tpmtop.health.attribution import AuthFailureLog
    from tpmtop.health.cmd_timeouts import CreatePrimaryTimes
    from tpmtop.health.cmd_timeouts import verdict as create_primary_verdict
    from tpmtop.health.kernel_traffic import KernelTraffic
    from tpmtop.health.probe import TpmFacts, probe
    from tpmtop.health.report import render_text
    from tpmtop.health.slots import SlotHolders
    from tpmtop.health.tpmstate import Saved
    from tpmtop.tpm import tcti as tcti_mod

    if not 0 <= args.ima_sample <= 60:
        raise UsageError(f"--ima-sample {args.ima_sample:g}: expected 0 to 60 seconds")
    if args.root is not None and not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    log = AuthFailureLog()
    traffic = KernelTraffic()
    holders = SlotHolders()
    create_times = CreatePrimaryTimes()
    sources = []
    for path in args.capture:
        cap = load_capture(path)  # a bad file: one line, exit 2 (its own errors)
        log.feed_capture(cap)
        traffic.feed_capture(cap)
        holders.feed_capture(cap)
        create_times.feed_capture(cap, os.path.basename(path))
        sources.append(os.path.basename(path))
    target = tcti_mod.choose(getattr(args, "tcti", None), getattr(args, "sim", False),
                             raw_device=getattr(args, "raw_device", False),
                             # no TPM is a verdict of health's own (the set-up rules say why), not an error
                             fallback=True)
    notes = []
    read = None
    reason = None
    saved_tree = args.root is not None and os.path.realpath(args.root) != "/"
    if saved_tree and target.source in ("fallback", "default"):
        # a saved tree is another machine's (or another boot's): this machine's TPM says nothing of it
        reason = "not asked: --root judges a saved system; -T or --sim asks a TPM as well"
    elif target.source == "fallback":
        # health asks the TPM this machine has; a private simulator would say nothing about it
        reason = f"no TPM to ask: {tcti_mod.DEFAULT_DEVICE} absent"
        if target.note and "permission" in target.note:
            reason = f"needs root or the tss group: {target.note.split(';')[0]}"
    else:
        def read() -> tuple[dict[str, Any], TpmFacts]:
            with tpm_from_args(args) as conn:
                return build.identity_line(conn.tpm_json()), conn.call(probe)

    state_path = None if args.state == "none" else Path(args.state) if args.state else savedstate.default_path()
    seen: list[tuple[dict[str, Any], TpmFacts]] = []

    def saved(tpm: dict[str, Any], facts: TpmFacts) -> Saved | None:
        # a simulator's identity is every simulator's: compared only in a file named for it
        if args.state is None and tpm.get("simulated"):
            notes.append("clock not compared: the TPM is a simulator (--state FILE keeps its state)")
        else:
            seen.append((tpm, facts))
        if args.against:
            got = savedstate.from_snapshot(args.against)
            if got is None:
                notes.append(f"--against {args.against}: the snapshot carries no TPM clock")
            return got
        return savedstate.saved(state_path, _key(tpm, facts)) if state_path and seen else None

    tpm, verdicts, manufacturer = build.tpm_verdicts(read, reason, log, sources, saved, holders,
                                                       required=not saved_tree)
    for t, facts in seen:
        if state_path is not None and facts.clock is not None:
            try:
                savedstate.save(state_path, _key(t, facts), t, facts.clock)
            except OSError as e:
                notes.append(f"state not saved to {state_path}: {e.strerror or e}")
    machine_judged = args.root is not None or target.source == "fallback" or target.device_path is not None
    if machine_judged:
        verdicts += build.system_verdicts(args.root or "/", manufacturer, args.ima_sample, traffic)
    elif tpm.get("simulated"):
        notes.append("set-up, driver and IMA not judged: the TPM is a simulator ("
                     + str(tpm.get("simulated_reason") or "tpmtop started it")
                     + "), not this machine's (--root / judges this machine's anyway)")
    elif tpm.get("answered") is False:
        notes.append(f"set-up, driver and IMA not judged: {target.tcti} did not answer, so whether it is this "
                     "machine's TPM is unknown (--root / judges this machine's anyway)")
    else:
        notes.append(f"set-up, driver and IMA not judged: {target.tcti} is reached over a TCTI, not this "
                     "machine's device (--root / judges this machine's anyway)")
    slow = create_primary_verdict(create_times)
    if slow is not None:
        verdicts.append(slow)
    rep = build.report(tpm, verdicts, notes, machine_judged)
    if args.json:
        print_json(rep.to_json())
    else:
        print(render_text(rep))
    return rep.exit_status
