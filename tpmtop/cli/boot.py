"""``tpmtop boot``: is the TPM what makes this boot slow? Reads files only, unless -T/--sim."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpmtop.boot.series import TraceResult

# No boot extends a PCR 100 million times: IMA on a busy server counts hundreds of thousands.
MAX_COUNT = 100_000_000


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    if v > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"at most {MAX_COUNT:,}: {text!r} (even at 1 ms each, that many "
                                         "TPM commands would take longer than a day)")
    return v


def add_boot_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.cli import add_tpm_options

    p.add_argument("--root", default="/", metavar="DIR",
                   help="read the system's files under DIR (a mounted disk, a saved tree); command output "
                        "comes from DIR/run/tpmtop/: dmesg.txt, systemd-analyze.txt, systemd-analyze-blame.txt, "
                        "systemd-analyze-critical-chain.txt, journal.txt (journalctl -b -o short-monotonic)")
    p.add_argument("--trace", action="append", default=[], metavar="FILE",
                   help="import an ftrace function_graph or bpftrace output (repeatable)")
    p.add_argument("--capture", metavar="FILE", help="per-extend costs from a `tpmtop bench --json` capture")
    p.add_argument("--extends", type=_positive, metavar="N",
                   help="number of boot-time PCR extends (default: IMA's measurement count)")
    p.add_argument("--bpftrace-calls", type=_positive, metavar="N",
                   help="how many calls each bpftrace sum() value covers (bpftrace does not say)")
    p.add_argument("--bpftrace-unit", choices=["ns", "us", "ms"], default=None,
                   help="unit of bpftrace values whose map name does not say (default ns)")
    p.add_argument("--chip", metavar="NAME|FILE",
                   help="price what no trace or capture gives with a chip profile (tpmtop profile list) "
                        "instead of the SLB9670's published figures")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    add_tpm_options(p)


def _load(load_trace: Callable[..., TraceResult], path: str, unit: str | None) -> TraceResult:
    """A trace for the report; tpmtop's own kprobe events are named, with the command that reads
    them (the three ways to read a trace share the option name, so the wrong one gets tried)."""
    from tpmtop.boundedread import FileKindError, FileTooLarge
    from tpmtop.errors import UsageError

    try:
        return load_trace(path, unit=unit)
    except (FileKindError, FileTooLarge):
        raise
    except UsageError as e:
        if _has_probe_events(path):
            raise UsageError(f"{path} holds tpmtop's kprobe events, not an ftrace function_graph or bpftrace "
                             f"trace: tpmtop kernel --trace {path} reads it (its --json capture is what "
                             "tpmtop boot --capture prices)") from None
        raise e from None


def _has_probe_events(path: str, lines: int = 2000) -> bool:
    """Whether the first ``lines`` lines hold tpmtop's kprobe events (each line read with a
    bound: the file already failed as a trace, and may be anything)."""
    import os
    import stat

    from tpmtop.boot.traces import MAX_LINE
    from tpmtop.boundedread import open_bounded
    from tpmtop.kernel.trace_pipe import Parser

    p = Parser()
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            return False  # what was read of it is gone: no second look
        with os.fdopen(open_bounded(path, what="trace"), "rb") as f:
            for _ in range(lines):
                raw = f.readline(MAX_LINE)
                if not raw:
                    break
                p.feed(raw.decode("utf-8", "replace").rstrip("\n"))
    except OSError:
        return False
    return p.events > 0


def run_boot(args: argparse.Namespace) -> int:
    import os

    from tpmtop.boot.report import build_report, render_text
    from tpmtop.boot.rootfs import RootReader
    from tpmtop.boot.traces import load_trace
    from tpmtop.cli.common import notice, print_json
    from tpmtop.errors import UsageError

    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    if args.bpftrace_calls == 0:
        raise UsageError("--bpftrace-calls must be at least 1")
    traces = [_load(load_trace, path, args.bpftrace_unit) for path in args.trace]
    identity = None
    # Only on request: on 6.12+ a user-space TPM command ends the kernel's kept session.
    if getattr(args, "tcti", None) or getattr(args, "sim", False):
        from tpmtop.cli.common import tpm_from_args

        with tpm_from_args(args) as conn:
            identity = conn.tpm_json()
        if not getattr(args, "sim", False):
            notice("read the TPM's identity directly: on Linux 6.12+ this ends the kernel's kept HMAC session")
    chip_costs = None
    if args.chip:
        from tpmtop.profiles.loader import load_profile
        from tpmtop.profiles.whatif import projection_costs

        chip_costs = projection_costs(load_profile(args.chip))
    rep = build_report(RootReader(args.root), traces=traces, capture=args.capture, extends=args.extends,
                       calls_per_sum=args.bpftrace_calls, identity=identity, chip_costs=chip_costs)
    if args.json:
        print_json(rep.to_json())
    else:
        print(render_text(rep), end="")
    return 0
