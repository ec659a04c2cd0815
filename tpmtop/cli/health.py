"""``tpmtop health``: the TPM's lockout state and who caused it, the driver's and the kernel's
set-up, IMA's list — each line a verdict with its evidence. Exit 0 healthy, 1 a problem found."""

from __future__ import annotations

import argparse
from typing import Any

from tpmtop.cli.common import notice, print_json, tpm_from_args
from tpmtop.errors import UsageError

# TPMs that are not this machine's: its kernel, driver and IMA say nothing about them.
_NOT_THE_HOSTS = ("sim", "swtpm", "mssim", "libtpms")


def add_health_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.cli import add_tpm_options

    add_tpm_options(p)
    p.add_argument("--json", action="store_true", help="the report as JSON (schema tpmtop.health/1) on stdout")
    p.add_argument("--capture", metavar="FILE", action="append", default=[],
                   help="a capture of `tpmtop run --json`, `tpmtop proxy --json` or `tpmtop kernel`: name the "
                        "client behind each wrong password in it (repeatable)")
    p.add_argument("--root", metavar="DIR", default=None,
                   help="judge the set-up, driver and IMA of the system under DIR (a saved tree, as `tpmtop boot "
                        "--root`); default: this system, unless the TPM is a simulator")
    p.add_argument("--ima-sample", type=float, default=1.0, metavar="S",
                   help="seconds to watch IMA's count for its rate now (0: only the rate over the boot; default 1)")


def run_health(args: argparse.Namespace) -> int:
    import os

    from tpmtop.capture import load_capture
    from tpmtop.health import build
    from tpmtop.health.attribution import AuthFailureLog
    from tpmtop.health.kernel_traffic import KernelTraffic
    from tpmtop.health.report import render_text
    from tpmtop.tpm import tcti as tcti_mod
    from tpmtop.tpm.identity import read_variable

    if not 0 <= args.ima_sample <= 60:
        raise UsageError(f"--ima-sample {args.ima_sample:g}: expected 0 to 60 seconds")
    if args.root is not None and not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    log = AuthFailureLog()
    traffic = KernelTraffic()
    sources = []
    for path in args.capture:
        cap = load_capture(path)  # a bad file: one line, exit 2 (its own errors)
        log.feed_capture(cap)
        traffic.feed_capture(cap)
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
        def read() -> tuple[dict[str, Any], dict[str, int]]:
            with tpm_from_args(args) as conn:
                return conn.tpm_json(), conn.call(read_variable)

    tpm, verdicts, manufacturer = build.tpm_verdicts(read, reason, log, sources)
    if args.root is not None or target.source == "fallback" or str(target.kind) not in _NOT_THE_HOSTS:
        verdicts += build.system_verdicts(args.root or "/", manufacturer, args.ima_sample, traffic)
    else:
        notes.append("set-up, driver and IMA not judged: the TPM is a simulator, not this machine's "
                     "(--root / judges this machine's anyway)")
    rep = build.report(tpm, verdicts, notes)
    if args.json:
        print_json(rep.to_json())
    else:
        print(render_text(rep))
    if not args.json and rep.exit_status:
        notice(f"{sum(1 for v in rep.verdicts if v.level.problem)} problem(s) found: exit status 1")
    return rep.exit_status
