"""Command line: ``tpmtop`` (the dashboard) and its headless subcommands.

Kept light at import: argparse only. A subcommand's module is imported only when that
subcommand is chosen (its parser gets its arguments then: :class:`_LazySubcommands`), and it
imports what it needs when it runs — so ``tpmtop --version`` and ``tpmtop --help`` load no
subcommand at all, ``tpmtop handles`` over SSH never loads Textual, and ``tpmtop boot`` never
loads tpm2-pytss unless it talks to a TPM.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from tpmtop import __version__
from tpmtop.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, Interrupted, TpmtopError
from tpmtop.sessions.names import mode_help  # not .modes: its dataclasses/inspect/ast doubled --help
from tpmtop.tpm import interrupts

# name -> (module, one-line help). The module defines add_<name>_arguments(parser) and
# run_<name>(args) -> exit status (dashes in <name> become underscores).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "info": ("tpmtop.cli.tpm_commands", "TPM identity and the properties that matter for sessions"),
    "handles": ("tpmtop.cli.tpm_commands", "list every handle the TPM reports"),
    "flush": ("tpmtop.cli.tpm_commands", "flush a transient object or a session"),
    "replay": ("tpmtop.cli.dashboard_args", "open the dashboard on a saved capture"),
    "boot": ("tpmtop.cli.boot", "is the TPM slowing this boot? system facts, trace import, cost projection"),
    "compare": ("tpmtop.cli.compare", "compare captures: p50/p99 before and after, and whether it is noise"),
    "export": ("tpmtop.cli.export",
               "a capture as a Chrome/Perfetto trace, OpenMetrics histograms or a pcapng for Wireshark"),
    "bench": ("tpmtop.cli.bench", f"measure each HMAC session strategy ({mode_help()})"),
    "profile": ("tpmtop.cli.profile",
                "chip latency profiles: record one from a TPM, derive one from a capture or trace"),
    "decode": ("tpmtop.cli.decode", "a TPM command and its response decoded to the parameter level"),
    "import": ("tpmtop.cli.import_file",
               "recorded TPM traffic (a tpm2-tss pcap: TCTI file, a tcpdump of a simulator port) as a capture"),
    "kernel": ("tpmtop.cli.kernel", "the kernel's own TPM commands, live, through tracefs kprobes"),
    "proxy": ("tpmtop.cli.proxy", "serve the TPM to other programs (swtpm/mssim protocols) and record who sends what"),
    "run": ("tpmtop.cli.proxy", "run a program through a private proxy: strace -c for the TPM"),
    "exporter": ("tpmtop.cli.exporter",
                 "serve /metrics to Prometheus: the kernel's TPM traffic and the boot facts, passively"),
    "lab": ("tpmtop.cli.lab",
            "boot real kernels under qemu with a (chip-shaped) TPM served by tpmtop: HMAC on vs off, measured"),
    "pcrs": ("tpmtop.cli.pcrs",
             "the boot's event log and IMA's list replayed against the TPM's PCRs; bank health; boot-to-boot diff"),
    "health": ("tpmtop.cli.health",
               "is the TPM locked out, and who did it? driver stalls, a TPM the kernel could not set up, IMA"),
    "whatif": ("tpmtop.cli.whatif",
               "a capture re-priced on each chip profile and in each session mode: TPM time, per extend, × none"),
    "unlock": ("tpmtop.cli.unlock",
               "will each TPM-sealed LUKS2 token unseal with the PCRs as they are now? which PCR moved?"),
    "clients": ("tpmtop.cli.proxy", "which processes hold /dev/tpm0 or /dev/tpmrm0 open; is tpm2-abrmd running"),
}

EPILOG = """exit status: 0 ok, 1 the TPM or the system failed, 2 bad usage or bad input,
130 interrupted (Ctrl-C, SIGTERM, SIGHUP). Diagnostics go to stderr, data to stdout."""
# Only on the help of a command that talks to a TPM (add_tpm_options adds it): replay, compare,
# decode … take none, and a line about choosing one would only mislead there.
TPM_SELECTION = ("TPM selection: --sim, else -T/--tcti, else $TPM2TOOLS_TCTI, else /dev/tpmrm0 (with "
                 "--raw-device then /dev/tpm0), else exit 1 naming what was tried (only the dashboard, with "
                 "nothing chosen, opens on a private swtpm then, and says why on its first screen).")


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2)."""

    def error(self, message: str) -> NoReturn:
        raise _UsageExit(f"{self.prog}: {message} (see {self.prog} --help)")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse before 3.12 lists every choice and suggests none: name the near ones.
        if action.choices is not None and value not in action.choices:
            import difflib

            choices = [str(c) for c in action.choices]
            near = difflib.get_close_matches(str(value), choices, n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(near)}?" if near else f"choose from {', '.join(choices)}"
            if isinstance(action, argparse._SubParsersAction):
                self.error(f"unknown command '{value}': {hint}")
            raise argparse.ArgumentError(action, f"invalid choice '{value}': {hint}")
        super()._check_value(action, value)


class _UsageExit(Exception):
    """argparse's complaint, carried to main() so that it prints one line and exits 2."""


def add_tpm_options(p: argparse.ArgumentParser, top: bool = False) -> None:
    """TPM selection options. On subcommands the defaults are suppressed so that
    ``tpmtop --sim handles`` and ``tpmtop handles --sim`` mean the same."""
    d = (lambda v: v) if top else (lambda v: argparse.SUPPRESS)
    if TPM_SELECTION not in (p.epilog or ""):
        p.epilog = f"{p.epilog}\n{TPM_SELECTION}" if p.epilog else TPM_SELECTION
    g = p.add_argument_group("TPM selection")
    g.add_argument("-T", "--tcti", default=d(None), metavar="TCTI",
                   help="tpm2-tools TCTI string, e.g. device:/dev/tpmrm0 or swtpm:host=127.0.0.1,port=2321 "
                        "(beats $TPM2TOOLS_TCTI)")
    g.add_argument("--sim", action="store_true", default=d(False),
                   help="start a private swtpm for this run (removed on exit)")
    g.add_argument("--raw-device", action="store_true", default=d(False),
                   help="allow /dev/tpm0 (no resource manager)")
    g.add_argument("--read-only", action="store_true", default=d(False),
                   help="refuse every action that changes TPM state")
    g.add_argument("--timeout", type=_seconds, default=d(None), metavar="SECONDS",
                   help="how long to wait for the TPM to answer one command before giving up with exit "
                        "status 1 (default: the settings' tpm_deadline, 30, and tpm_deadline_long, 300, for "
                        "key generation: docs/settings.md)")


def _seconds(text: str) -> float:
    import math

    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or not 0.001 <= v <= 86400:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds between 0.001 and 86400")
    return v


def add_common(p: argparse.ArgumentParser, top: bool = False) -> None:
    d = (lambda v: v) if top else (lambda v: argparse.SUPPRESS)
    p.add_argument("--debug", action="store_true", default=d(False), help="show tracebacks")
    p.add_argument("--set", action="append", default=d(None), metavar="NAME=VALUE", dest="settings",
                   help="a tuning knob for this run, e.g. --set placement=on (beats $TPMTOP_<NAME> and "
                        "the settings file; docs/settings.md lists them; captures record them)")


if TYPE_CHECKING:
    _SubParsersAction = argparse._SubParsersAction[argparse.ArgumentParser]
else:  # not subscriptable at run time
    _SubParsersAction = argparse._SubParsersAction


class _LazySubcommands(_SubParsersAction):
    """Subparsers whose arguments are added when their subcommand is chosen.

    ``tpmtop --help`` lists the subcommands from :data:`SUBCOMMANDS` alone; importing all
    fifteen modules to build parsers nobody uses cost ~60 ms of every start-up (the chip
    profiles' loader and its dataclasses, the proxy's helpers …)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        sp = self._name_parser_map.get(values[0])
        if sp is not None:
            _populate(values[0], sp)
        super().__call__(parser, namespace, values, option_string)



def _populate(name: str, sp: argparse.ArgumentParser) -> None:
    if sp.get_default("_run") is not None:
        return  # populated already: its run function is set last
    mod = importlib.import_module(SUBCOMMANDS[name][0])
    add_common(sp)
    ident = name.replace("-", "_")
    getattr(mod, f"add_{ident}_arguments")(sp)
    sp.set_defaults(_run=getattr(mod, f"run_{ident}"))


def build_parser(*, eager: bool = False) -> argparse.ArgumentParser:
    """The whole command line; ``eager``: every subcommand's arguments now (tests that walk
    them), rather than when one is chosen."""
    parser = Parser(prog="tpmtop", description="See what a TPM 2.0 is doing: handles, sessions, "
                    "command latencies and the cost of HMAC sessions. Without a subcommand: the dashboard.",
                    epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tpmtop {__version__}")
    add_common(parser, top=True)
    add_tpm_options(parser, top=True)
    importlib.import_module("tpmtop.cli.dashboard_args").add_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser, action=_LazySubcommands)
    for name, (_modname, helptext) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=helptext, description=helptext, epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        if eager:
            _populate(name, sp)
    return parser


def main(argv: list[str] | None = None) -> int:
    program = argv is None  # the program itself (python -m tpmtop, the tpmtop script), not a caller
    if program:
        interrupts.end_at_exit()
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--version"]:  # what argparse would print, without building any parser
        print(f"tpmtop {__version__}")
        return 0
    debug = "--debug" in argv
    # tpm2-tss logs TPM errors to stderr itself ("WARNING:esys:…"); tpmtop reports them in
    # its own one line, so keep the library quiet unless asked (--debug, or TSS2_LOG set).
    if not debug:
        os.environ.setdefault("TSS2_LOG", "all+NONE")
    try:
        args = build_parser().parse_args(argv)
    except _UsageExit as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    if getattr(args, "profile", None) and args.command not in (None, "bench", "replay", "lab"):
        # A top-level option that only the dashboard and bench act on must not be ignored
        # (replay refuses it itself, saying why).
        print("tpmtop: --profile applies to the dashboard, `tpmtop bench` and `tpmtop lab`, "
              f"not `tpmtop {args.command}`",
              file=sys.stderr)
        return EXIT_USAGE
    if getattr(args, "kernel_trace", None) and args.command not in (None, "exporter"):
        # `tpmtop --trace F boot`: the dashboard's option, given before a subcommand that has
        # its own --trace: say where it goes rather than ignore the file.
        print(f"tpmtop: --trace before `{args.command}` opens the dashboard on a trace; for "
              f"`tpmtop {args.command}` put it after the command", file=sys.stderr)
        return EXIT_USAGE
    # The tuning knobs in force (defaults, file, environment, --set): checked here, so a bad
    # value is one line and exit 2 before any TPM is opened.
    from tpmtop import settings

    try:
        settings.use(settings.load(flags=getattr(args, "settings", None) or ()))
    except TpmtopError as e:
        print(f"tpmtop: {e}", file=sys.stderr)
        return e.exit_status
    # SIGTERM, SIGHUP (an SSH drop) and Ctrl-C unwind as Interrupted, so every `finally`
    # runs: handles are flushed, the private swtpm is stopped, partial captures are written.
    # (The dashboard installs its own SIGTERM/SIGHUP handlers: it asks the app to exit.)
    interrupts.install()
    try:
        status = _run(args, debug)
    except KeyboardInterrupt:  # a signal between the command's end and the line below
        status = EXIT_INTERRUPTED
    # A caller in a process that goes on (a test) keeps its signals: only the program blocks them.
    return interrupts.exit_status(status) if program else status


def _run(args: argparse.Namespace, debug: bool) -> int:
    run = getattr(args, "_run", None)
    if run is None:
        run = importlib.import_module("tpmtop.cli.dashboard_args").run
    try:
        return int(run(args) or 0)
    except TpmtopError as e:
        if debug:
            raise
        print(f"tpmtop: {e}", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt as e:  # Ctrl-C, or Interrupted from a signal
        interrupts.ignore()  # clean-up is done: another signal now would only cut this line
        print(f"tpmtop: interrupted{f' ({e})' if isinstance(e, Interrupted) else ''}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # stdout closed early (| head): not an error worth a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        if debug:
            raise
        msg = _tss_message(e)
        if msg:
            print(f"tpmtop: {msg}", file=sys.stderr)
            return EXIT_FAILURE
        print(f"tpmtop: internal error: {type(e).__name__}: {e} (run with --debug for the traceback)",
              file=sys.stderr)
        return EXIT_FAILURE


def _tss_message(e: Exception) -> str | None:
    """A tpm2-tss error (TSS2_Exception) as tpm2_rc_decode words it."""
    if type(e).__name__ == "TSS2_Exception":
        rc = getattr(e, "rc", None)
        return f"TPM error 0x{int(rc):x}: {e}" if rc is not None else f"TPM error: {e}"
    return None
