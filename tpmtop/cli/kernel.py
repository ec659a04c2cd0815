"""``tpmtop kernel``: the kernel's own TPM commands, live, through tracefs kprobe events."""

from __future__ import annotations

import argparse
import re

EXAMPLES = """Needs root and a kernel with kprobe events (CONFIG_KPROBE_EVENTS) and a TPM driver.
tpmtop sends no TPM command in this mode: it only watches tpm_transmit, so it does not
perturb the session the kernel keeps (Linux 6.12+). The probes live in a group of tpmtop's
own and are removed on exit, on Ctrl-C/SIGTERM/SIGHUP (exit status 130, after the capture
is written), and (if tpmtop was killed) at the next start.

examples:
  sudo tpmtop kernel                          # one line per command until Ctrl-C
  sudo tpmtop kernel --duration 60 --json k.json
  tpmtop kernel --boot-cmdline                # arm the same probes from the next boot
  tpmtop kernel --from-trace boot-trace.txt --json boot.json   # import what they recorded
                                              # (cat /sys/kernel/tracing/trace > boot-trace.txt)"""


def add_kernel_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES + "\n\n" + (p.epilog or "")
    p.add_argument("--json", metavar="FILE", help="write the commands seen as a capture")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: Ctrl-C)")
    p.add_argument("--from-trace", metavar="FILE", help="parse saved tracefs text instead of tracing live")
    p.add_argument("--boot-cmdline", action="store_true",
                   help="print the kernel command-line parameters that arm these probes at boot")
    p.add_argument("--quiet", "-q", action="store_true", help="no line per command")


# A task's comm is whatever the task set (prctl PR_SET_NAME): escape what could drive the
# terminal. (tpmtop.textsafe.safe does the same where it exists; merge onto it.)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def _printable(text: str) -> str:
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _line(kc) -> str:
    from tpmtop.tpm import names

    rc = "rc ?" if kc.rc is None else f"rc 0x{kc.rc:x}"
    mig = f" (cpu {kc.cpu}→{kc.cpu_return})" if kc.migrated else f" (cpu {kc.cpu})"
    via = f" via {_printable(kc.task)}" if kc.task else ""
    return (f"{kc.t_ns / 1e9:14.6f}  {names.cc_short(kc.cc):<20} {rc:<9} {kc.wire_ns / 1e3:>10.1f} µs  "
            f"{_printable(kc.comm)}-{kc.pid}{via}{mig}  {_printable(kc.path)}")


def _summary(cap: dict) -> str:
    """Per command code: count, errors, p50/p99/max wire latency (from the capture's histograms)."""
    from tpmtop.cli.common import table

    rows = []
    errors: dict[str, int] = {}
    for e in cap["events"]:
        if e["rc"]:
            errors[e["command"]] = errors.get(e["command"], 0) + 1
    for run in cap["runs"]:
        for name, summ in sorted(run["commands"].items(), key=lambda kv: -kv[1]["count"]):
            rows.append([name.removeprefix("TPM2_CC_"), str(summ["count"]), str(errors.get(name, 0)),
                         f"{summ['p50']:,.1f}", f"{summ['p99']:,.1f}", f"{summ['max']:,.1f}"])
    return "\n" + table(rows, ["command", "count", "errors", "p50 µs", "p99 µs", "max µs"], right={1, 2, 3, 4, 5})


def _own_summaries(commands) -> dict:
    """Per command code, the wire latencies of the kernel's own commands only — not a
    /dev/tpm* client's, not the resource manager's swaps for one (the run's per-command
    table has every command seen). `tpmtop boot --capture` prices the kernel's session steps
    from these: a tpm2_createprimary's StartAuthSession is not the kernel starting sessions."""
    from tpmtop.kernel.trace_pipe import RESOURCE_MANAGER, USER_SPACE
    from tpmtop.stats import LatencyHistogram
    from tpmtop.tpm import names

    hs: dict = {}
    for kc in commands:
        if kc.path.startswith((USER_SPACE, RESOURCE_MANAGER)) or kc.ret is None or kc.ret < 0:
            continue
        hs.setdefault(names.cc_name(kc.cc), LatencyHistogram()).record(kc.wire_ns)
    return {name: h.summary() for name, h in hs.items()}


def _finish(args, commands, t0_unix_ns, parser, source: str) -> int:
    import sys

    from tpmtop.cli.common import notice
    from tpmtop.kernel.live import exchanges
    from tpmtop.patterns import detect, summary_lines

    notice(f"{len(commands)} kernel TPM commands" + (f", {parser.lost} events lost" if parser.lost else "")
           + (f", {parser.orphans} returns without an entry" if parser.orphans else ""))
    xs = exchanges(commands, t0_unix_ns)
    from tpmtop.importers.observed import capture_from_exchanges

    cap = capture_from_exchanges(xs, origin="kernel", source=source,
                                 extra={"kernel_trace": {"lost_events": parser.lost, "orphans": parser.orphans,
                                                         "kernel_commands": _own_summaries(commands)}})
    if commands:
        print(_summary(cap))
    for line in summary_lines(detect(cap["events"])):
        notice(line)
    if args.json:
        from tpmtop.capture import write_capture

        write_capture(args.json, cap)
        notice(f"wrote {args.json}")
    sys.stdout.flush()
    return 0


def run_kernel(args) -> int:
    import time

    from tpmtop.cli.common import notice
    from tpmtop.errors import EXIT_INTERRUPTED, Interrupted, UsageError
    from tpmtop.kernel import probes
    from tpmtop.kernel.trace_pipe import Parser

    if args.boot_cmdline:
        print(probes.boot_cmdline())
        return 0
    if args.json:
        from tpmtop.cli.common import check_output_dir

        check_output_dir(args.json, "tpmtop kernel")  # before tracing, not after
    if args.from_trace:
        try:
            with open(args.from_trace, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            raise UsageError(f"tpmtop kernel: cannot read {args.from_trace}: {e.strerror}") from None
        parser = Parser()
        commands = []
        for line in text.splitlines():
            commands.extend(parser.feed(line))
        commands.extend(parser.flush())
        if not commands and not parser.lost:
            raise UsageError(f"tpmtop kernel: {args.from_trace} holds no tpmtop kprobe events")
        commands.sort(key=lambda kc: kc.t_ns)  # completed in return order; shown in start order
        if not args.quiet:
            for kc in commands:
                print(_line(kc))
        return _finish(args, commands, time.time_ns(), parser, f"tracefs:{args.from_trace}")

    from tpmtop.kernel.live import read_pipe

    _preload()
    with probes.Probes() as p:
        for g in p.stale_removed:
            notice(f"removed stale probe group {g} left by a tpmtop that was killed")
        notice(f"tracing tpm_transmit{' and tpm_transmit_cmd' if p.have_cmd else ''} "
               f"(group {p.group}); Ctrl-C to stop")
        if p.skipped:
            notice("not traced: " + "; ".join(p.skipped) + " (user-space commands are then known only by the "
                   "task that ran them)")
        parser = Parser()
        commands = []
        t0_unix = None
        stopped_by: str | None = None
        deadline = time.monotonic() + args.duration if args.duration else None

        def show(kc) -> None:
            nonlocal t0_unix
            if t0_unix is None:
                t0_unix = time.time_ns() - kc.wire_ns
            commands.append(kc)
            if not args.quiet:
                print(_line(kc), flush=True)

        try:
            for kc in read_pipe(p.pipe_fd, parser,
                                lambda: deadline is not None and time.monotonic() >= deadline):
                show(kc)
        except KeyboardInterrupt as e:
            # Ctrl-C, SIGTERM or SIGHUP (Interrupted is a KeyboardInterrupt): how one stops
            # tracing. The probes go in __exit__, the capture is written, and the exit status
            # says the run was interrupted (130), as for every other tpmtop command.
            stopped_by = str(e) if isinstance(e, Interrupted) else "stopped by SIGINT"
        for kc in parser.flush():  # a user-space command whose response code was not seen
            show(kc)
    status = _finish(args, commands, t0_unix or time.time_ns(), parser, "kernel:tpm_transmit")
    if stopped_by:
        notice(f"interrupted ({stopped_by})" + (f"; the capture is in {args.json}" if args.json else ""))
        return EXIT_INTERRUPTED
    return status


def _preload() -> None:
    """Import now what the run and its summary will need, before the probes are armed: a
    lazy import later would read files while tracing, and under an IMA policy that measures
    files read by root (ima_policy=tcb) each new file is a PCR_Extend the kernel sends on
    tpmtop's behalf — traffic the trace would show as tpmtop's own."""
    import tpmtop.capture  # noqa: F401
    import tpmtop.cli.common  # noqa: F401
    import tpmtop.importers.observed  # noqa: F401
    import tpmtop.kernel.live  # noqa: F401
    import tpmtop.patterns  # noqa: F401
    import tpmtop.textsafe  # noqa: F401
    import tpmtop.tpm.names  # noqa: F401
