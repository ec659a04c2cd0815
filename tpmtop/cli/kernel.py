"""``tpmtop kernel``: the kernel's own TPM commands, live, through tracefs kprobe events."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tpmtop.kernel.tap import KernelTap
    from tpmtop.kernel.trace_pipe import KernelCommand
    from tpmtop.output import Output

EXAMPLES = """Needs root and a kernel with kprobe events (CONFIG_KPROBE_EVENTS) and a TPM driver.
tpmtop sends no TPM command in this mode: it only watches tpm_transmit, so it does not
perturb the session the kernel keeps (Linux 6.12+). The probes live in a group of tpmtop's
own and are removed on exit, on Ctrl-C/SIGTERM/SIGHUP (exit status 130, after the capture
is written), and (if tpmtop was killed) at the next start. The dashboard shows the same live:
sudo tpmtop --kernel.

examples:
  sudo tpmtop kernel                          # one line per command until Ctrl-C
  sudo tpmtop kernel --duration 60 --json k.json
  tpmtop kernel --boot-cmdline                # arm the same probes from the next boot
  tpmtop kernel --trace boot-trace.txt --json boot.json  # import what they recorded
                                         # (cat /sys/kernel/tracing/trace > boot-trace.txt)"""


def add_kernel_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES + "\n\n" + (p.epilog or "")
    p.add_argument("--json", metavar="FILE", help="write the commands seen as a capture")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: Ctrl-C)")
    p.add_argument("--trace", "--from-trace", dest="from_trace", metavar="FILE",
                   help="parse saved tracefs text of tpmtop's probes instead of tracing live (an ftrace "
                        "function_graph or bpftrace file: tpmtop boot --trace FILE). --from-trace: the older name")
    p.add_argument("--boot-cmdline", action="store_true",
                   help="print the kernel command-line parameters that arm these probes at boot")
    p.add_argument("--quiet", "-q", action="store_true", help="no line per command")


def _line(kc: KernelCommand) -> str:
    from tpmtop.textsafe import safe  # a task's comm is whatever the task set (PR_SET_NAME)
    from tpmtop.tpm import names

    rc = "rc ?" if kc.rc is None else f"rc 0x{kc.rc:x}"
    mig = f" (cpu {kc.cpu}→{kc.cpu_return})" if kc.migrated else f" (cpu {kc.cpu})"
    via = f" via {safe(kc.task)}" if kc.task else ""
    return (f"{kc.t_ns / 1e9:14.6f}  {names.cc_short(kc.cc):<20} {rc:<9} {kc.wire_ns / 1e3:>10.1f} µs  "
            f"{safe(kc.comm)}-{kc.pid}{via}{mig}  {safe(kc.path)}")


def _summary(cap: dict[str, Any]) -> str:
    """Per command code: count, errors, p50/p99/max wire latency (from the capture's histograms)."""
    from tpmtop.cli.common import table
    from tpmtop.stats import tail_cell, tail_note

    rows = []
    errors: dict[str, int] = {}
    for e in cap["events"]:
        if e["rc"]:
            errors[e["command"]] = errors.get(e["command"], 0) + 1
    counts = []
    for run in cap["runs"]:
        if run["engine"] != "observed":
            continue
        for name, summ in sorted(run["commands"].items(), key=lambda kv: -kv[1]["count"]):
            counts.append(summ["count"])
            rows.append([name.removeprefix("TPM2_CC_"), str(summ["count"]), str(errors.get(name, 0)),
                         f"{summ['p50']:,.1f}", tail_cell(summ), f"{summ['max']:,.1f}"])
    note = tail_note(*counts)
    return ("\n" + table(rows, ["command", "count", "errors", "p50 µs", "p99 µs", "max µs"], right={1, 2, 3, 4, 5})
            + (f"\n{note}" if note else ""))


def _op_summary(tap: KernelTap) -> str:
    """Per kernel operation: its p50 split into TPM and host time, and the session behaviour."""
    from tpmtop.cli.common import table
    from tpmtop.kernel.ops import host_text
    from tpmtop.stats import tail_cell, tail_note

    acc = tap.accounts
    rows = []
    counts = []
    for kind, st in acc.by_kind.items():
        s_total, s_wire, s_host = st.op_hist.summary(), st.wire_hist.summary(), st.host_hist.summary()
        counts.append(s_total["count"])
        rows.append([kind, str(st.ops), f"{st.with_setup}", f"{s_total['p50']:,.1f}", f"{s_wire['p50']:,.1f}",
                     host_text(st, s_host['p50']), tail_cell(s_total), str(st.failed)])
    if not rows:
        return ""
    out = ["", table(rows, ["kernel operation", "count", "set up a session", "p50 µs", "TPM p50 µs",
                            "host p50 µs", "p99 µs", "failed"], right={1, 2, 3, 4, 5, 6, 7})]
    note = tail_note(*counts)
    if note:
        out.append(note)
    mode, why = acc.mode()
    out.append(f"sessions: {mode or 'cannot tell'}: {why}")
    ext = acc.by_kind.get("extend")
    if mode == "reuse" and ext is not None and ext.setup_after:  # what ended the kept session
        out.append("set-ups after: " + ", ".join(f"{k} ×{n}" for k, n in ext.setup_after.most_common()))
    if any(s.estimated for s in acc.by_kind.values()):
        out.append("timing: no operation probes in this trace: an operation runs from its first command's "
                   "entry to its last one's return (host work before and after is not seen)")
    return "\n".join(out)


def _finish(args: argparse.Namespace, tap: KernelTap, source_note: str, out: Output | None = None,
            report: TextIO | None = None) -> int:
    import sys

    from tpmtop.cli.common import notice
    from tpmtop.patterns import detect, summary_lines

    report = report or sys.stdout

    p = tap.parser
    notice(f"{len(tap.commands)} kernel TPM commands from {source_note}"
           + (f", {p.lost} events lost" if p.lost else "")
           + (f", {p.orphans} returns without an entry" if p.orphans else "")
           + (f", {p.backwards} returns timed before their entry (dropped)" if p.backwards else "")
           + (f", {p.dropped} entries dropped" if p.dropped else ""))
    cap = tap.capture()
    if tap.commands:
        print(_summary(cap), file=report)
        ops = _op_summary(tap)
        if ops:
            print(ops, file=report)
    for line in summary_lines(detect(cap["events"])):
        notice(line)
    if out is not None:
        from tpmtop.capture import write_capture

        write_capture(out, cap, keep=True)
        notice(f"wrote {'the capture to stdout' if out.kind == 'stdout' else args.json}")
    sys.stdout.flush()
    return 0


def run_kernel(args: argparse.Namespace) -> int:
    import time

    from tpmtop.cli.common import notice
    from tpmtop.errors import EXIT_INTERRUPTED, Interrupted
    from tpmtop.kernel import probes
    from tpmtop.kernel.tap import KernelTap

    if args.boot_cmdline:
        print(probes.boot_cmdline())
        return 0
    import sys

    from tpmtop.cli.common import is_stdout
    from tpmtop.output import Output

    # checked before tracing, not after; with the capture on stdout (-, /dev/stdout) the
    # lines and tables go to stderr, so stdout stays one JSON document
    out = Output(args.json, what="--json", big=True).check() if args.json is not None else None
    report = sys.stderr if is_stdout(args.json) else sys.stdout
    if args.from_trace:
        return _from_trace(args, out, report)

    from tpmtop.kernel.live import read_lines

    preload()
    tap = KernelTap.arm()
    stopped_by: str | None = None
    try:
        p = tap.probes
        assert p is not None  # KernelTap.arm() armed them
        for g in p.stale_removed:
            notice(f"removed stale probe group {g} left by a tpmtop that was killed")
        ops = " and ".join(probes.OP_FUNCS[o][0] for o in p.ops)
        notice(f"tracing tpm_transmit{' and tpm_transmit_cmd' if p.have_cmd else ''}"
               f"{(', operations ' + ops) if ops else ''} (group {p.group}); Ctrl-C to stop")
        if p.skipped:
            notice("not traced: " + "; ".join(p.skipped))
        deadline = time.monotonic() + args.duration if args.duration else None

        def show(cmds: Iterable[KernelCommand]) -> None:
            if not args.quiet:
                for kc in cmds:
                    print(_line(kc), file=report, flush=True)

        try:
            for lines in read_lines(tap.pipe_path, lambda: deadline is not None and time.monotonic() >= deadline):
                show(tap.feed(lines))
        except KeyboardInterrupt as e:
            # Ctrl-C, SIGTERM or SIGHUP (Interrupted is a KeyboardInterrupt): how one stops
            # tracing. The probes go below, the capture is written, and the exit status says
            # the run was interrupted (130), as for every other tpmtop command.
            stopped_by = str(e) if isinstance(e, Interrupted) else "stopped by SIGINT"
        show(tap.finish())  # a user-space command whose response code was not seen
    finally:
        tap.close()
    status = _finish(args, tap, "tpm_transmit", out, report)
    if stopped_by:
        notice(f"interrupted ({stopped_by})" + (f"; the capture is in {args.json}" if args.json else ""))
        return EXIT_INTERRUPTED
    return status


def _from_trace(args: argparse.Namespace, out: Output | None, report: TextIO) -> int:
    """A saved trace, read in pieces (memory stays bounded whatever the file holds)."""
    import os
    import stat

    from tpmtop.cli.common import notice
    from tpmtop.errors import UsageError
    from tpmtop.kernel.live import file_lines
    from tpmtop.kernel.tap import KernelTap
    from tpmtop.textsafe import counted

    path = args.from_trace
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise UsageError(f"cannot read {path}: it is a folder")
        if stat.S_ISFIFO(mode):
            notice(f"reading the FIFO {path} until its writer closes it")
        tap = KernelTap(trace_path=path)
        commands = []
        for lines in file_lines(path):
            commands += tap.feed(lines)
        commands += tap.finish()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    p = tap.parser
    if not commands and not p.lost:
        if not p.events:
            from tpmtop.boot.traces import FORMAT_NAMES

            other = FORMAT_NAMES.get(tap.foreign or "")
            raise UsageError(f"{path} holds no tpmtop kprobe events"
                             + (f": it is {other}, which tpmtop boot --trace {path} reads" if other else ""))
        why = [counted(n, *what) for n, what in (
            (p.pending(), ("entry whose return is not in it", "entries whose return is not in it")),
            (p.orphans, ("return whose entry is not", "returns whose entry is not")),
            (p.backwards, ("return timed before its entry", "returns timed before their entry")),
            (p.dropped, ("entry dropped", "entries dropped"))) if n]
        raise UsageError(f"{path} holds {counted(p.events, 'probe event', 'probe events')} but no whole command "
                         f"({', '.join(why)}): a trace that wrapped or was cut?")
    if not args.quiet:
        for kc in sorted(commands, key=lambda kc: kc.t_ns):  # completed in return order; shown in start order
            print(_line(kc), file=report)
    return _finish(args, tap, path, out, report)


def preload() -> None:
    """Import now what the run and its summary will need, before the probes are armed: a
    lazy import later would read files while tracing, and under an IMA policy that measures
    files read by root (ima_policy=tcb) each new file is a PCR_Extend the kernel sends on
    tpmtop's behalf — traffic the trace would show as tpmtop's own."""
    import tpmtop.capture
    import tpmtop.cli.common
    import tpmtop.importers.observed
    import tpmtop.kernel.capture
    import tpmtop.kernel.live
    import tpmtop.patterns
    import tpmtop.textsafe
    import tpmtop.tpm.names  # noqa: F401
    from tpmtop.tpm import wire

    wire.num_handles(0x182)  # tpm2-pytss's command tables: the session-handle offsets need them
