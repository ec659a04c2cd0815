"""The dashboard's command line: options on the top-level parser, and ``tpmtop replay``.

Argparse only at import: ``tpmtop handles`` builds the whole parser, and must not pay for
Textual. Textual (and the TPM stack) are imported inside ``run``/``run_replay``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from tpmtop.errors import UsageError
from tpmtop.sessions.names import ENGINES, MODES, OPS, Engine, Mode, Op  # light: help

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import FrameType

    from tpmtop.proxy.server import ProxyServer
    from tpmtop.sources.protocol import Source
    from tpmtop.tpm.connection import TpmConnection
    from tpmtop.tui.app import TpmtopApp


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
    if not 0.1 <= v <= 3600:
        raise argparse.ArgumentTypeError("must be between 0.1 and 3600 seconds")
    return v


def _rate(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a rate") from None
    if v != v or v in (float("inf"), float("-inf")):  # float() takes 'nan' and 'inf'
        raise argparse.ArgumentTypeError(f"'{text}' is not a rate (a finite number of operations per second)")
    if v < 0:
        raise argparse.ArgumentTypeError("must be ≥ 0 (0: as fast as the TPM allows)")
    return v


def _display_options(g: argparse._ActionsContainer) -> None:
    g.add_argument("--theme", metavar="NAME",
                   help="colour theme: dark (default), light, high-contrast, colour-blind-safe, or any "
                        "Textual theme; remembered for next time. NO_COLOR=1 turns colour off")


class _ListThemes(argparse.Action):
    """``--list-themes``: print the themes and exit, as ``--version`` does (whatever else is on
    the line). Reading the files validates every colour, which takes Textual: imported here only."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        import sys

        from tpmtop.tui.themes import DEFAULT_THEME, load_themes, remembered_theme

        loaded = load_themes()
        last = remembered_theme()
        for name in loaded.names:
            marks = [m for m, yes in (("default", name == DEFAULT_THEME), ("chosen last", name == last)) if yes]
            print(f"{name:<20}({', '.join(marks)})" if marks else name)
        for n in loaded.notices:
            print(f"tpmtop: {n}", file=sys.stderr)
        parser.exit(0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("dashboard (no subcommand)")
    _display_options(g)
    g.add_argument("--list-themes", action=_ListThemes,
                   help="print tpmtop's colour themes (the files installed with it), one a line, and exit")
    g.add_argument("--passive", action="store_true",
                   help="send nothing to the TPM: show what sysfs and securityfs tell (IMA measurements/s, "
                        "PCR values) and, where tpmtop can trace (root, kprobe events), the kernel's own TPM "
                        "commands as with --kernel. On Linux 6.12+ any command a program sends ends the "
                        "kernel's kept HMAC session, so this is how to watch a kernel unperturbed")
    g.add_argument("--kernel", action="store_true",
                   help="the kernel's own TPM commands live (IMA extends, session set-ups, hwrng, user "
                        "space through /dev/tpmrm0), through kprobes on tpm_transmit as `tpmtop kernel` "
                        "arms them: latency per command, each extend's TPM and host time, the session "
                        "behaviour. Needs root and CONFIG_KPROBE_EVENTS; sends no TPM command")
    g.add_argument("--trace", "--kernel-trace", dest="kernel_trace", metavar="FILE",
                   help="the kernel's commands as --kernel shows them (--trace implies --kernel), read from "
                        "FILE instead of armed probes: tpmtop's kprobe events in a saved trace, a FIFO, or "
                        "/sys/kernel/tracing/trace_pipe after a boot armed with `tpmtop kernel "
                        "--boot-cmdline`, followed as it grows. An ftrace function_graph or bpftrace "
                        "file is what `tpmtop boot --trace FILE` reads. --kernel-trace: the older name")
    g.add_argument("--poll-interval", type=_positive, metavar="SECONDS",
                   help="how often to ask the TPM for its handles and slots (default 1 with --sim, "
                        "5 on a real TPM: each poll perturbs the kernel's session, see --passive)")
    g.add_argument("--rate", type=_rate, default=100.0, metavar="OPS",
                   help="workload operations per second on average (default 100; 0: as fast as the TPM "
                        "allows). Paced in bursts of >= 4 back to back so each operation runs warm")
    g.add_argument("--mode", default=Mode.PER_COMMAND.value, choices=MODES,
                   help="session mode the workload starts in (default per-command)")
    g.add_argument("--engine", default=Engine.NATIVE.value, choices=ENGINES, help="crypto engine (default native)")
    g.add_argument("--op", default=Op.EXTEND.value, choices=OPS,
                   help="workload operation (default extend, on PCR 16)")
    g.add_argument("--start", choices=("running", "paused"),
                   help="workload state at start (default: running with --sim, paused on a real TPM, "
                        "where it changes PCR 16)")
    g.add_argument("--export-dir", metavar="DIR",
                   help="where the export key (x) writes captures (default: $XDG_DATA_HOME/tpmtop, "
                        "~/.local/share/tpmtop when unset; created private)")
    g.add_argument("--listen", type=int, metavar="P",
                   help="also serve the TPM to other programs on 127.0.0.1:P (swtpm protocol, control on P+1; "
                        "see `tpmtop proxy`): the Clients panel and the stream show who sends what")
    # Top-level, not in the dashboard group: `tpmtop --profile X bench --sim` must mean the
    # same as `tpmtop bench --sim --profile X` (bench adds them with suppressed defaults).
    from tpmtop.profiles.apply import add_profile_options

    add_profile_options(parser, top=True)


def add_replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("capture", metavar="CAPTURE.json",
                   help="a capture from `tpmtop bench --json` or the dashboard's export")
    p.add_argument("--decode", action="store_true", help="the stream's handles column shows each command's "
                   "handles and parameters decoded by name (from the bytes the capture kept)")
    _display_options(p)


GRACE_S = 3.0


def require_terminal(kernel: bool = False) -> None:
    """The dashboard draws on a terminal. Without one (a pipe, a file, cron) Textual would
    write escape codes into the file and spin; say so instead, before anything is opened."""
    import sys

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        which = "stdin" if not sys.stdin.isatty() else "stdout"
        if kernel:
            raise UsageError(f"the dashboard needs a terminal ({which} is not one); without one, the kernel's "
                             "commands headless: tpmtop kernel [--json FILE] (see tpmtop kernel --help)")
        raise UsageError(f"the dashboard needs a terminal ({which} is not one); without one use the headless "
                         "commands: tpmtop info, handles, bench --json, boot, export (see tpmtop --help)")


def _run_app(app: TpmtopApp, cleanup: Callable[[], None] | None = None, more_signals: tuple[str, ...] = ()) -> int:
    """Run the app with SIGTERM/SIGHUP (an SSH drop) asking it to exit cleanly, so the
    caller's ``finally`` flushes handles and stops a private swtpm.

    With the terminal gone (SIGHUP) Textual's shutdown can block for ever writing to it
    (seen with Textual 8.2: the driver's writer queue never drains). So a signal also starts
    a watchdog: if the app has not returned within GRACE_S, it runs ``cleanup`` itself and
    leaves with status 130 — the TPM is left clean either way."""
    import asyncio
    import threading

    from tpmtop.errors import EXIT_INTERRUPTED

    done = threading.Event()

    def watchdog() -> None:
        if done.wait(GRACE_S):
            return
        try:
            if cleanup is not None:
                cleanup()
        finally:
            os._exit(EXIT_INTERRUPTED)

    def ask_exit(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=watchdog, name="tpmtop-exit-watchdog", daemon=True).start()
        try:
            asyncio.get_event_loop().call_soon_threadsafe(lambda: app.exit(return_code=EXIT_INTERRUPTED))
        except RuntimeError:
            app.exit(return_code=EXIT_INTERRUPTED)

    sigs = [signal.SIGTERM, signal.SIGHUP] + [getattr(signal, n) for n in more_signals if hasattr(signal, n)]
    old = {s: signal.signal(s, ask_exit) for s in sigs}
    try:
        app.run()
    finally:
        done.set()
        for s, h in old.items():
            signal.signal(s, h)
    from tpmtop.textsafe import safe

    for path in getattr(app, "exported", ()):  # the toasts that named them are gone with the screen
        print(f"tpmtop: capture written to {safe(str(path))}", file=sys.stderr)
    return int(app.return_code or 0)


def run(args: argparse.Namespace) -> int:
    from tpmtop.tui.app import TpmtopApp

    if args.kernel_trace:
        args.kernel = True  # --trace FILE: the kernel's commands, from that file
    if args.passive or args.kernel:
        flag = "--kernel" if args.kernel else "--passive"
        if args.sim or args.tcti:
            raise UsageError(f"{flag} sends nothing to any TPM: it cannot be combined with --sim or -T")
        if args.profile is not None or args.seed is not None:
            raise UsageError(f"{flag} sends nothing to any TPM: there is no simulator for --profile/--seed "
                             "to slow down")
        if args.kernel_trace:
            _check_trace_file(args.kernel_trace)
        require_terminal(kernel=args.kernel)
        return _run_watch(args, TpmtopApp)

    from tpmtop.cli.common import notice
    from tpmtop.connect import open_tpm
    from tpmtop.profiles.apply import apply_profile, describe, profile_from_args
    from tpmtop.sources.live import LiveSource

    if args.export_dir is not None and not os.path.isdir(args.export_dir):
        raise UsageError(f"--export-dir {args.export_dir}: no such directory")
    # Checked (and a profile file validated) before anything is opened: refused without --sim.
    profile = profile_from_args(args)
    require_terminal()
    # The one place a private swtpm may stand in for a missing TPM: the reason is on the first
    # screen (header and a message), not only on stderr after quitting.
    conn = open_tpm(tcti=args.tcti, sim=args.sim, raw_device=args.raw_device, notice=notice, timeout=args.timeout,
                    fallback=True)
    source = None
    proxy = None
    try:
        apply_profile(conn, profile, args.seed)
        start = None if args.start is None else args.start == "running"
        log: list[str] = []
        proxy = _start_listen(args, conn, log)
        source = LiveSource(conn, read_only=args.read_only, poll_interval=args.poll_interval, rate=args.rate,
                            start_running=start, engine=args.engine, mode=args.mode, op=args.op,
                            profile_note=describe(profile, args.seed) if profile is not None else None,
                            proxy=proxy, proxy_log=log)
        return _run_app(TpmtopApp(source, theme=args.theme, export_dir=args.export_dir), cleanup=source.close)
    finally:
        if source is not None:
            source.close()  # stops the proxy first
        else:
            if proxy is not None:
                proxy.stop()
            conn.close()


def _check_trace_file(path: str) -> None:
    """--trace: a file, FIFO or tracefs pipe tpmtop can read, checked before the dashboard
    starts (a directory or a socket is bad usage, exit 2; no permission is exit 1)."""
    import stat

    from tpmtop.errors import TpmtopError

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"--trace {path}: no such file") from None
    except OSError as e:
        raise UsageError(f"--trace {path}: {e.strerror}") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        raise UsageError(f"--trace {path}: not a file or a pipe")
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    except PermissionError:
        raise TpmtopError(f"--trace {path}: permission denied (tracefs is root's: run with sudo)") from None
    except OSError as e:
        raise TpmtopError(f"--trace {path}: {e.strerror}") from None


def watch_source(args: argparse.Namespace) -> tuple[Source, list[str]]:
    """--passive and --kernel: (source, notices). Nothing is sent to the TPM. The kernel's
    commands are traced where that is possible (a KernelTraceError, exit 1, for --kernel
    where it is not); --passive without it shows sysfs alone and says why."""
    from tpmtop.kernel.probes import KernelTraceError
    from tpmtop.kernel.tap import KernelTap
    from tpmtop.sources.kernel import KernelSource
    from tpmtop.sources.passive import PassiveSource

    if not args.kernel_trace:
        from tpmtop.cli.kernel import preload

        preload()  # nothing read from disk while tracing that tpmtop could read now (IMA)
    try:
        # a file the dashboard follows like tail -f: this machine's trace_pipe as it is written
        tap = (KernelTap(trace_path=args.kernel_trace, this_machine_now=True) if args.kernel_trace
               else KernelTap.arm())
    except KernelTraceError as e:
        if args.kernel:
            raise  # one line, exit 1: --kernel asked for what this machine cannot do
        why = f"sysfs only, no live kernel TPM commands: {e}"
        return PassiveSource(note=why), [why]
    notices = [f"removed stale probe group {g} left by a tpmtop that was killed"
               for g in getattr(tap.probes, "stale_removed", ())]
    return KernelSource(tap, passive=args.passive), notices


def _run_watch(args: argparse.Namespace, app_cls: type[TpmtopApp]) -> int:
    source, notices = watch_source(args)
    tap = getattr(source, "tap", None)
    try:
        if tap is not None:
            tap.start()
        app = app_cls(source, theme=args.theme, export_dir=args.export_dir, notices=notices)
        # While probes are armed, the signals whose default would kill tpmtop without removing
        # them (SIGQUIT, SIGUSR1 …) end the dashboard as SIGTERM does (app.exit, with the
        # watchdog), rather than as an exception raised into Textual's event loop.
        more = getattr(getattr(tap, "probes", None), "UNWIND_SIGNALS", ()) if tap is not None else ()
        return _run_app(app, cleanup=tap.close if tap is not None else None, more_signals=more)
    finally:
        if tap is not None:
            tap.close()


def _start_listen(args: argparse.Namespace, conn: TpmConnection, log: list[str]) -> ProxyServer | None:
    """`tpmtop --listen P`: the proxy inside the dashboard; its commands are jobs on the TPM's
    owner thread like the workload's and the polls', each with its own labels. It is handed
    to the source, which stops it when it closes."""
    if getattr(args, "listen", None) is None:
        return None
    if not 0 < args.listen < 65535:
        raise UsageError(f"--listen {args.listen}: expected 1..65534 (the proxy also uses P+1)")
    from tpmtop.proxy.server import ProxyServer

    return ProxyServer(conn, port=args.listen, log=log.append).start()


def run_replay(args: argparse.Namespace) -> int:
    from tpmtop.sources.replay import ReplaySource, load

    # `tpmtop --profile X replay F` parses (the options are top-level): refuse it rather than
    # ignore it. A capture's timings are what they are; its header names the profile it had.
    if getattr(args, "profile", None) is not None or getattr(args, "seed", None) is not None:
        raise UsageError("replay shows a capture's own timings: --profile/--seed apply to a live --sim "
                         "dashboard (the replay header names the profile the capture was taken with)")

    source = ReplaySource(load(args.capture), args.capture,
                          decode=getattr(args, "decode", False))  # a bad file: one line, exit 2
    require_terminal()
    from tpmtop.tui.app import TpmtopApp

    return _run_app(TpmtopApp(source, theme=args.theme))
