"""``tpmtop proxy`` (serve the TPM to other programs and record them), ``tpmtop run -- CMD``
(strace -c for the TPM) and ``tpmtop clients`` (who holds the TPM open)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from tpmtop.cli.common import notice, print_json, table, tpm_from_args
from tpmtop.cli.lineout import LineOut
from tpmtop.errors import EXIT_FAILURE, EXIT_INTERRUPTED, UsageError
from tpmtop.proxy.latency import CompactLatency
from tpmtop.textsafe import safe
from tpmtop.tpm import interrupts

if TYPE_CHECKING:
    from tpmtop.output import Output
    from tpmtop.proxy.accounting import Accounts
    from tpmtop.proxy.server import ProxyServer
    from tpmtop.tpm.connection import TpmConnection

EXIT_NOT_FOUND = 127  # tpmtop run: CMD not found (the shell's convention)
EXIT_NOT_EXECUTABLE = 126  # tpmtop run: CMD found but cannot be executed

# What tpm2-tss based programs read to pick a TCTI: tpm2-tools, tpm2-pkcs11, tpm2-tss-engine,
# tpm2-openssl, and the generic names tpm2-tss' own tests and tpm2-pytss examples use.
TCTI_ENV = ("TPM2TOOLS_TCTI", "TSS2_TCTI", "TPM2_PKCS11_TCTI", "TPM2TSSENGINE_TCTI", "TPM2OPENSSL_TCTI", "TCTI")


def _tpm_args(p: argparse.ArgumentParser) -> None:
    from tpmtop.cli import add_tpm_options

    add_tpm_options(p)


def _listen_args(p: argparse.ArgumentParser, default_port: int | None) -> None:
    p.add_argument("--protocol", choices=("swtpm", "mssim"), default="swtpm",
                   help="swtpm: raw commands on PORT, swtpm control channel on PORT+1 (TCTI swtpm:); "
                        "mssim: Microsoft simulator framing on PORT, platform on PORT+1 (TCTI mssim:)")
    p.add_argument("--json", metavar="FILE",
                   help="write the capture (clients, and with --events every command) to FILE")
    p.add_argument("--events", action="store_true", help="keep every command in the --json capture")


def add_proxy_arguments(p: argparse.ArgumentParser) -> None:
    _tpm_args(p)
    p.add_argument("--port", type=int, default=2321, metavar="P",
                   help="TPM port P, control/platform P+1 (default 2321)")
    p.add_argument("--bind", metavar="ADDR", default=None,
                   help="listen on this loopback address instead of 127.0.0.1 (127.x.x.x or ::1; never the network)")
    p.add_argument("--socket", metavar="PATH", help="also listen on a Unix socket, mode 0600 (swtpm protocol; "
                                                    "PATH.ctrl for control); PATH must not exist")
    p.add_argument("--group", metavar="G", help="make the Unix socket 0660, group G, and let G's members in")
    p.add_argument("--allow-user", metavar="U", action="append", default=[],
                   help="let user U use the TPM too (default: only this user and root); repeatable")
    p.add_argument("--allow-group", metavar="G", action="append", default=[],
                   help="let the members of group G use the TPM too; repeatable")
    _serving_args(p)
    _listen_args(p, 2321)


def _serving_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--interleave", action="store_true",
                   help="over a raw TPM, share it command by command instead of one client at a time "
                        "(clients can then run it out of slots: 0x902/0x903)")
    p.add_argument("--turn-idle", type=float, default=None, metavar="S",
                   help="over a raw TPM, a client's turn passes on once it has sent nothing for S seconds "
                        "while others wait (default 2)")
    p.add_argument("--max-connections", type=int, default=None, metavar="N",
                   help="open client connections at most (default 1024)")
    p.add_argument("--luks", action="append", metavar="DEVICE",
                   help="a LUKS2 device or image whose tokens a failing Unseal (0x99d, 0x128) is matched with "
                        "(repeatable; default: /etc/crypttab's and the LUKS2 block devices, read at the first one)")
    p.add_argument("--max-per-user", type=int, default=None, metavar="N",
                   help="open connections of one user at most, root's and the proxy's own user's aside "
                        "(default a quarter of --max-connections)")
    p.add_argument("--idle-timeout", type=float, default=None, metavar="S",
                   help="close a connection that sends nothing for S seconds (default 600)")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    _tpm_args(p)
    _listen_args(p, None)
    _serving_args(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS…]",
                   help="the program to run with its TPM traffic going through a private proxy")


def add_clients_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")


_LINES = LineOut()  # one writer thread: lines never glue, and the proxy's loop never waits on stderr


def _log(text: str) -> None:
    _LINES(f"tpmtop proxy: {text}\n")


def _serving(args: argparse.Namespace) -> dict[str, Any]:
    kw: dict[str, Any] = {"interleave": bool(args.interleave)}
    if args.max_connections is not None:
        if args.max_connections < 1:
            raise UsageError(f"--max-connections {args.max_connections}: expected 1 or more")
        kw["max_connections"] = args.max_connections
    if args.max_per_user is not None:
        if args.max_per_user < 1:
            raise UsageError(f"--max-per-user {args.max_per_user}: expected 1 or more")
        kw["max_per_user"] = args.max_per_user
    if args.turn_idle is not None:
        if not args.turn_idle > 0:
            raise UsageError(f"--turn-idle {args.turn_idle:g}: expected seconds above 0")
        kw["turn_idle"] = args.turn_idle
    if args.idle_timeout is not None:
        if not args.idle_timeout > 0:
            raise UsageError(f"--idle-timeout {args.idle_timeout:g}: expected seconds above 0")
        kw["idle_timeout"] = args.idle_timeout
    return kw


def _loopback(addr: str) -> str:
    """The proxy serves local users only: a peer's uid is asked of this kernel, which knows
    nothing of a remote one (use an SSH tunnel to reach it from elsewhere)."""
    import ipaddress

    if addr == "localhost":
        return "127.0.0.1"
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        raise UsageError(f"--bind {addr}: not an IP address (expected 127.x.x.x or ::1)") from None
    if not ip.is_loopback:
        raise UsageError(f"--bind {addr}: the proxy listens on loopback only (127.x.x.x or ::1): it checks "
                         "each peer's uid with this kernel; reach it from elsewhere through an SSH tunnel")
    return addr


def _check_port(port: int) -> None:
    if not 0 < port < 65535:
        raise UsageError(f"--port {port}: expected 1..65534 (the proxy also uses PORT+1)")


def _json_output(args: argparse.Namespace) -> Output | None:
    """``--json FILE`` checked before anything is served or run (a directory, a missing folder,
    a read-only place: one line, exit 2, nothing lost later)."""
    if args.json is None:  # '' is refused by the check below, as bench refuses it
        return None
    from tpmtop.output import Output

    return Output(args.json, what="--json", big=True).check()


def _write_capture(args: argparse.Namespace, out: Output | None, conn: TpmConnection, accounts: Accounts,
                   extra: dict[str, Any] | None = None, events: bool = False) -> None:
    if out is None:
        return
    from tpmtop.bench import write_capture_file
    from tpmtop.proxy.report import capture

    write_capture_file(out, capture(conn, accounts, args.events or events, extra))
    notice(f"capture written to {args.json}")


def run_proxy(args: argparse.Namespace) -> int:
    from tpmtop.proxy.access import AccessPolicy, gid_of
    from tpmtop.proxy.server import ProxyServer

    _check_port(args.port)
    host = _loopback(args.bind or "127.0.0.1")
    groups = tuple(args.allow_group) + ((args.group,) if args.group else ())
    policy = AccessPolicy.default(tuple(args.allow_user), groups)
    if args.group and not args.socket:
        raise UsageError("--group G sets the Unix socket's group: it needs --socket PATH")
    gid = gid_of(args.group, "--group") if args.group else None
    from tpmtop.proxy.report import proxy_recorder

    out = _json_output(args)
    # Ports and socket paths are taken before the TPM is opened: a refused start (port busy,
    # path taken) says so at once, serves no one, writes no capture and removes nothing.
    server = ProxyServer(None, protocol=args.protocol, host=host, port=args.port, socket_path=args.socket,
                         log=_log, policy=policy, socket_mode=0o660 if gid is not None else 0o600,
                         socket_gid=gid, **_serving(args)).listen()
    server.accounts.unseal_watch.devices = args.luks
    # Without --events no command is kept for the capture: a small ring (the per-command
    # statistics are kept whole either way), so a proxy left running does not grow.
    rec = proxy_recorder(keep_buffers=bool(args.events), capacity=None if args.events else 4096)
    try:
        with tpm_from_args(args, recorder=rec) as conn:
            conn.identity()  # read once now, not in the middle of the clients' traffic
            server.conn = conn
            server.start()
            return _serve_until_stopped(args, server, conn, out, host)
    finally:
        server.stop()  # idempotent; here for a start that failed before serving


def _serve_until_stopped(args: argparse.Namespace, server: ProxyServer, conn: TpmConnection, out: Output | None,
                         host: str) -> int:
    interrupted = False
    try:
        kind = args.protocol
        _log(f"serving {conn.target.tcti} on {host}:{args.port} ({kind}; control on {args.port + 1})"
             + (f" and {args.socket}" if args.socket else ""))
        _log(f"clients use -T {kind}:host={host},port={args.port}"
             + (f" or -T swtpm:path={os.path.abspath(args.socket)}" if args.socket and kind == "swtpm" else ""))
        _log(server.sharing_note())
        _log(f"open to {server.policy.describe()}; everyone else is refused")
        since = interrupts.raised
        while server.failed is None:
            time.sleep(0.5)  # short: a signal tripped just before a long sleep waits for its end
            interrupts.check_lost(since)  # one a finalizer swallowed meanwhile
    except KeyboardInterrupt:
        interrupted = True
    except UsageError:
        raise
    except BaseException as e:
        from tpmtop.errors import Interrupted

        if not isinstance(e, Interrupted):
            raise
        interrupted = True
    finally:
        server.stop()
        _LINES.flush()  # its lines (the departures) before the table
        _print_clients(server.accounts)
        # The outcome is decided: a late signal (a SIGHUP as the terminal closes after the
        # Ctrl-C) must not cut the capture's write nor change the exit status.
        with interrupts.settling():
            _write_capture(args, out, conn, server.accounts)
    if interrupted:
        notice("interrupted")
        return EXIT_INTERRUPTED
    if server.failed:  # the TPM went away for good: the capture is written; the proxy's line said why
        return EXIT_FAILURE
    return 0


def _print_clients(accounts: Accounts) -> None:
    """One row per program (every departed client of it folded in: a proxy that served 10,000
    tpm2_getrandom processes prints one row for them)."""
    from tpmtop.stats import tail_cell, tail_note

    rows = []
    counts = []
    for p in accounts.program_snapshot():
        h = CompactLatency()
        for x in p.per_cc.values():
            h.merge(x)
        s = h.summary()
        counts.append(s["count"])
        rows.append([safe(p.name)[:24], str(p.clients), str(p.commands), str(p.errors),
                     f"{s['p50']:,.1f}", tail_cell(s),
                     str(p.created), str(p.flushed), str(p.leaked)])
    if rows:
        print(table(rows, ["program", "clients", "cmds", "errors", "p50 µs", "p99 µs", "created", "flushed", "leaked"],
                    right={1, 2, 3, 4, 5, 6, 7, 8}), flush=True)
        note = tail_note(*counts)
        if note:
            print(note, flush=True)
    if accounts.queue_max:
        print(f"at most {accounts.queue_max} client(s) waited for their turn at once", flush=True)


def run_run(args: argparse.Namespace) -> int:
    from tpmtop.proxy.report import run_table
    from tpmtop.proxy.server import ProxyServer

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("nothing to run: tpmtop run [options] -- CMD [ARGS…]")
    from tpmtop.proxy.report import proxy_recorder

    out = _json_output(args)
    rec = proxy_recorder()
    with tpm_from_args(args, recorder=rec) as conn:
        conn.identity()
        server = ProxyServer(conn, protocol=args.protocol, host="127.0.0.1", port=0, log=_quiet_log,
                             **_serving(args))
        server.accounts.unseal_watch.devices = args.luks
        server.start()
        port = server.bound_port
        tcti = f"{args.protocol}:host=127.0.0.1,port={port}"
        env = dict(os.environ)
        for k in TCTI_ENV:
            env[k] = tcti
        status = None
        proc = None
        t0 = time.perf_counter_ns()
        try:
            try:
                try:
                    # A signal while CMD starts is raised once Popen has returned: CMD is then
                    # known, and ended with what it started. Raised inside Popen, it left CMD
                    # running and tpmtop gone (seen under load: a shell's background sleep kept
                    # tpmtop's pipes open for minutes).
                    with interrupts.held():
                        proc = subprocess.Popen(cmd, env=env)
                except FileNotFoundError:  # the shell's statuses: 127 not found, 126 not executable
                    print(f"tpmtop run: {safe(cmd[0])}: command not found", file=sys.stderr)
                    return EXIT_NOT_FOUND
                except (PermissionError, IsADirectoryError, OSError) as e:
                    print(f"tpmtop run: {safe(cmd[0])}: cannot execute: {e.strerror or e}", file=sys.stderr)
                    return EXIT_NOT_EXECUTABLE
                # In slices: a signal that lands just before a blocking waitpid would otherwise
                # be acted on only when CMD exits (tpmtop.tpm.owner.Job._wait says why).
                since = interrupts.raised
                while True:
                    try:
                        status = proc.wait(timeout=0.5)
                        break
                    except subprocess.TimeoutExpired:
                        interrupts.check_lost(since)  # one a finalizer swallowed meanwhile
            except BaseException:
                if proc is not None:  # CMD started: it ends, with what it started
                    _end_command(proc)
                raise
        finally:
            wall = time.perf_counter_ns() - t0
            server.stop()
            _LINES.flush()
            if proc is not None:  # a CMD that never started gets no table: its one line says why
                print(f"tpmtop run: {safe(' '.join(cmd))} (through {tcti}; TPM {conn.target.tcti})", file=sys.stderr)
                print(run_table(server.accounts, wall, table), file=sys.stderr, flush=True)
                with interrupts.settling():  # as in run_proxy: nothing cuts the capture's write
                    _write_capture(args, out, conn, server.accounts,
                                   extra={"command": {"argv": cmd, "exit_status": status, "wall_ns": wall}},
                                   events=True)
    if status is None:
        return EXIT_INTERRUPTED
    return status if status >= 0 else 128 - status


def _end_command(proc: subprocess.Popen[bytes]) -> None:
    """End CMD and every process it started, as a terminal's Ctrl-C ends a foreground job.
    tpmtop stopped by a signal to itself alone (a service manager's SIGTERM, a parent's kill)
    ended only CMD: `sh -c '…; sleep 30'` left its sleep running. SIGTERM, then SIGKILL to
    whatever is left after 5 s. The private swtpm is tpmtop's child, not CMD's: not in the tree."""
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)  # before CMD ends: then they move
    except psutil.Error:
        tree = []
    proc.terminate()
    for p in tree:
        try:
            p.terminate()
        except psutil.Error:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _, alive = psutil.wait_procs(tree, timeout=5)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


def _quiet_log(text: str) -> None:
    # `tpmtop run` reports in its table; only cut connections and faults are worth a line now
    from tpmtop.proxy.lines import LineKind, kind_of

    if kind_of(text) in (LineKind.DROPPED, LineKind.FAULT, LineKind.AUTH, LineKind.UNSEAL):
        _log(text)


def run_clients(args: argparse.Namespace) -> int:
    from tpmtop.proxy.holders import tpm_holders

    info = tpm_holders()
    if args.json:
        print_json(info)
        return 0
    for line in clients_lines(info):
        print(line)
    return 0


def clients_lines(info: dict[str, Any]) -> list[str]:
    """``tpmtop clients``'s text from :func:`tpmtop.proxy.holders.tpm_holders`'s dict."""
    out = []
    if not info["devices"]:
        out.append("no /dev/tpm0 or /dev/tpmrm0 on this machine")
    # name and exe are another process's words (a comm can hold an escape sequence): made
    # terminal-safe here; --json keeps them as they are (JSON escapes control characters)
    rows = [[str(h["pid"]), safe(h["user"] or "?"), safe(h["name"]), h["device"], h["since"], safe(h["exe"])]
            for h in info["holders"]]
    if rows:
        out.append(table(rows, ["pid", "user", "name", "device", "since", "exe"], right={0}))
    elif info["devices"]:
        out.append("no process holds " + " or ".join(info["devices"]) + " open")
    ab = info["abrmd"]
    running = f"running (pid {', '.join(map(str, ab['pids']))})" if ab["running"] else "not running"
    out.append(f"tpm2-abrmd: {running}")
    if info["unreadable_processes"] and not info["root"]:
        out.append(f"{info['unreadable_processes']} processes of other users could not be inspected (not root)")
    return out
    if not info["devices"]:
        print("no /dev/tpm0 or /dev/tpmrm0 on this machine")
    # name and exe are another process's words (a comm can hold an escape sequence): made
    # terminal-safe here; --json keeps them as they are (JSON escapes control characters)
    rows = [[str(h["pid"]), safe(h["user"] or "?"), safe(h["name"]), h["device"], h["since"], safe(h["exe"])]
            for h in info["holders"]]
    if rows:
        print(table(rows, ["pid", "user", "name", "device", "since", "exe"], right={0}))
    elif info["devices"]:
        print("no process holds " + " or ".join(info["devices"]) + " open")
    ab = info["abrmd"]
    print(f"tpm2-abrmd: {'running (pid ' + ', '.join(map(str, ab['pids'])) + ')' if ab['running'] else 'not running'}")
    if info["unreadable_processes"] and not info["root"]:
        print(f"{info['unreadable_processes']} processes of other users could not be inspected (not root)")
    return 0
