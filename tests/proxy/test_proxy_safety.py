"""`tpmtop proxy` / `tpmtop run` on a shared machine: nothing deleted or replaced that tpmtop did
not create, outputs checked before anyone is served, the shell's exit statuses, no one let in
uninvited, and no client string reaching the terminal raw. Real swtpm, real tpm2-tools, real
sockets, a real second uid (the tests run as root and drop to nobody)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers.processes import REPO, TPMTOP, alive, free_port_pair, run_tpmtop, wait_until
from tests.helpers.proxy import TIMEOUT, Proxy

pytestmark = pytest.mark.skipif(shutil.which("tpm2_getrandom") is None, reason="tpm2-tools not installed")


def _tool(tcti: str, *argv: str, user: int | None = None, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, TPM2TOOLS_TCTI=tcti, TSS2_LOG="all+NONE")
    prefix = [] if user is None else ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    return subprocess.run(prefix + list(argv), env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd)


def _state(path) -> tuple:
    st = os.lstat(path)
    return st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns


# -- item 1: never unlink what this process did not create -----------------------------------------

def test_socket_on_an_existing_file_leaves_it_untouched(tcp_swtpm, tmp_path):
    path = tmp_path / "tpm.sock"
    path.write_text("not a socket\n")
    ctrl = tmp_path / "tpm.sock.ctrl"
    ctrl.write_text("precious\n")
    before = (_state(path), _state(ctrl))
    r = run_tpmtop("proxy", "-T", tcp_swtpm.tcti, "--port", str(free_port_pair()), "--socket", str(path))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "exists and is not a socket" in r.stderr
    assert (_state(path), _state(ctrl)) == before
    assert path.read_text() == "not a socket\n" and ctrl.read_text() == "precious\n"
    # the .ctrl path alone taken: refused too, and the main path is not left behind
    path.unlink()
    r = run_tpmtop("proxy", "-T", tcp_swtpm.tcti, "--port", str(free_port_pair()), "--socket", str(path))
    assert r.returncode == 2 and "tpm.sock.ctrl exists" in r.stderr, r.stderr
    assert not path.exists() and ctrl.read_text() == "precious\n"


def test_refused_start_leaves_a_live_proxys_sockets(tcp_swtpm, tmp_path):
    """A second proxy on the same port and socket path is refused (exit 2) and removes nothing:
    the first one's tpm.sock and tpm.sock.ctrl still serve."""
    sock = tmp_path / "tpm.sock"
    first = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path, ("--socket", str(sock)))
    try:
        before = (_state(sock), _state(f"{sock}.ctrl"))
        for extra in (("--port", str(first.port)), ("--port", str(free_port_pair()))):
            r = run_tpmtop("proxy", "-T", tcp_swtpm.tcti, "--socket", str(sock), *extra)
            assert r.returncode == 2, r.stderr
            assert r.stderr.count("\n") == 1, r.stderr
            assert (_state(sock), _state(f"{sock}.ctrl")) == before
        assert "in use" in r.stderr
        got = _tool(f"swtpm:path={sock}", "tpm2_getrandom", "--hex", "8")
        assert got.returncode == 0 and len(got.stdout.strip()) == 16, got.stderr
        status, _, _ = first.stop()
        assert status == 130
        assert not sock.exists() and not os.path.exists(f"{sock}.ctrl")  # its own: removed at the end
    finally:
        first.kill()


def test_busy_second_port_names_the_right_ports(tcp_swtpm):
    port = free_port_pair()
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port + 1))
        blocker.listen()
        r = run_tpmtop("proxy", "-T", tcp_swtpm.tcti, "--port", str(port))
    assert r.returncode == 2, r.stderr
    assert f"port {port + 1} on 127.0.0.1 is already in use (the proxy needs {port} and {port + 1})" in r.stderr


# -- item 6: outputs ------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["adir", "missing/out.json"])
def test_proxy_json_checked_before_serving(tcp_swtpm, tmp_path, where):
    (tmp_path / "adir").mkdir()
    r = run_tpmtop("proxy", "-T", tcp_swtpm.tcti, "--port", str(free_port_pair()), "--json", str(tmp_path / where))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "--json" in r.stderr and "-o " not in r.stderr
    assert "serving" not in r.stderr


def test_run_json_checked_before_cmd_runs(tmp_path):
    (tmp_path / "adir").mkdir()
    marker = tmp_path / "ran"
    r = run_tpmtop("run", "--sim", "--json", str(tmp_path / "adir"), "--", "touch", str(marker), timeout=120)
    assert r.returncode == 2, r.stderr
    assert "--json" in r.stderr and not marker.exists()


def test_failed_start_keeps_an_existing_capture(tcp_swtpm, tmp_path):
    cap = tmp_path / "keep.json"
    cap.write_text('{"precious": true}\n')
    before = _state(cap)
    port = free_port_pair()
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        r = run_tpmtop("proxy", "-T", tcp_swtpm.tcti, "--port", str(port), "--json", str(cap))
    assert r.returncode == 2, r.stderr
    assert _state(cap) == before and cap.read_text() == '{"precious": true}\n'


def test_run_not_found_and_not_executable(tmp_path):
    r = run_tpmtop("run", "--sim", "--", "tpm2_nonexist_xyz", timeout=120)
    assert r.returncode == 127, r.stderr
    assert r.stderr.strip().endswith("tpm2_nonexist_xyz: command not found")
    script = tmp_path / "noexec.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    r = run_tpmtop("run", "--sim", "--", str(script), timeout=120)
    assert r.returncode == 126, r.stderr
    assert "cannot execute" in r.stderr


@contextlib.contextmanager
def _background_sleep(argv: list[str], pidfile, **popen):
    """Start ``argv`` (a `tpmtop run` whose CMD starts `sleep 300 &` and writes its pid to
    ``pidfile``) and wait for that sleep: yields (the process, the sleep's pid, or None if the
    process ended first). Whatever is left of either is killed after."""
    p = subprocess.Popen(argv, cwd=REPO, text=True, **popen)
    sleep_pid = None
    try:
        wait_until(lambda: p.poll() is not None or (pidfile.exists() and pidfile.read_text().strip()),
                   "CMD's background sleep to start")
        if pidfile.exists() and pidfile.read_text().strip():
            sleep_pid = int(pidfile.read_text())
        yield p, sleep_pid
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if sleep_pid is not None and alive(sleep_pid):
            os.kill(sleep_pid, signal.SIGKILL)


def test_run_stopped_by_a_signal_ends_what_cmd_started(tmp_path):
    """A SIGTERM to tpmtop alone (a service manager's, not a terminal's Ctrl-C, which reaches
    the whole job) ends CMD and what CMD started: a shell's background sleep is not left."""
    pidfile = tmp_path / "sleep.pid"
    argv = TPMTOP + ["run", "--sim", "--", "sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"]
    with _background_sleep(argv, pidfile, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as (p, sleep_pid):
        assert p.poll() is None, p.communicate()
        assert sleep_pid is not None and alive(sleep_pid)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 130, err
        wait_until(lambda: not alive(sleep_pid), f"CMD's background sleep (pid {sleep_pid}) to end")


# tpmtop run, with a SIGTERM to itself delivered inside its Popen of CMD: after CMD has
# started (its background sleep written down), before Popen returns to tpmtop
SIGNAL_WHILE_CMD_STARTS = """
import os, signal, subprocess, sys, time
pidfile = sys.argv[1]
real = subprocess.Popen
class Popen(real):
    def __init__(self, args, *a, **kw):
        super().__init__(args, *a, **kw)
        if list(args)[:1] == ["sh"]:
            deadline = time.monotonic() + 60
            while not (os.path.exists(pidfile) and open(pidfile).read().strip()) and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100000):  # the handler runs here, inside Popen
                pass
subprocess.Popen = Popen
from tpmtop.cli import main
sys.exit(main(["run", "--sim", "--", "sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"]))
"""


def test_a_signal_while_cmd_starts_still_ends_what_cmd_started(tmp_path):
    """A signal that lands while tpmtop is still in its Popen of CMD (CMD already running) used
    to leave CMD and its background sleep running, tpmtop gone (exit 130, no table): the
    sleep held tpmtop's pipes open (seen under make test-stress). It is raised once Popen has
    returned, and CMD is ended with what it started."""
    pidfile = tmp_path / "sleep.pid"
    argv = [sys.executable, "-c", SIGNAL_WHILE_CMD_STARTS, str(pidfile)]
    with _background_sleep(argv, pidfile, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as (p, sleep_pid):
        wait_until(lambda: p.poll() is not None, "tpmtop to stop")
        assert p.returncode == 130, p.stderr.read() if p.stderr else ""
        assert sleep_pid is not None
        wait_until(lambda: not alive(sleep_pid), f"CMD's background sleep (pid {sleep_pid}) to end")
        assert "tpmtop run: sh -c" in p.stderr.read()  # the table of what CMD sent, as after any signal


def test_late_sighup_after_the_capture_is_written(tcp_swtpm, tmp_path):
    """SIGTERM ends the proxy (130); a SIGHUP once its capture is on disk (a terminal closing
    after the Ctrl-C) changes nothing: still 130, no traceback, not ended by the signal."""
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path)
    try:
        p.tool("tpm2_getrandom", "--hex", "4")
        p.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + TIMEOUT
        while not p.capture.exists() and p.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        if p.proc.poll() is None:
            p.proc.send_signal(signal.SIGHUP)
        status, _, cap = p.stop()
        assert status == 130, "\n".join(p.lines)
        assert cap["clients"]
        assert not any("Traceback" in ln or "Exception ignored" in ln for ln in p.lines), "\n".join(p.lines)
    finally:
        p.kill()


# -- item 3: access control, closed by default --------------------------------------------------

NOBODY = 65534


def _as_nobody(tcti: str, gid: int = NOBODY) -> subprocess.CompletedProcess:
    env = dict(os.environ, TPM2TOOLS_TCTI=tcti, TSS2_LOG="all+NONE", HOME="/")
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={gid}", "--clear-groups",
                           "tpm2_getrandom", "--hex", "8"], env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, cwd="/")


def test_another_users_client_is_refused_on_tcp(tcp_swtpm, tmp_path):
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path)
    try:
        p.wait_line("open to users")
        r = _as_nobody(p.tcti)
        assert r.returncode != 0 and len(r.stdout.strip()) != 16
        line = p.wait_line("refused a connection on TCP", f"uid {NOBODY}")
        assert "connection closed" in line
        p.tool("tpm2_getrandom", "--hex", "8")  # this user still gets in
        status, _, cap = p.stop()
        assert status == 130
        assert {c["uid"] for c in cap["clients"]} == {os.getuid()}  # nobody's commands never went through
        assert all(e.get("client") is not None for e in cap["events"] if e.get("origin") == "proxy")
    finally:
        p.kill()


def test_allow_user_lets_one_more_user_in(tcp_swtpm, tmp_path):
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path, ("--allow-user", "nobody"))
    try:
        r = _as_nobody(p.tcti)
        assert r.returncode == 0 and len(r.stdout.strip()) == 16, r.stderr
        _status, _, cap = p.stop()
        assert NOBODY in {c["uid"] for c in cap["clients"]}
        assert not any("refused a connection" in ln for ln in p.lines), p.lines
    finally:
        p.kill()


def test_unix_socket_is_0600_and_checks_the_peer(tcp_swtpm, tmp_path):
    """The socket is created 0600 whatever the umask; with --group root it is 0660 and the
    kernel lets a process with egid root connect, but its uid (nobody, not a member of root)
    is refused by the peer check (SO_PEERCRED)."""
    import tempfile

    d = tempfile.mkdtemp(prefix="tpmtop-proxy-sock-")
    os.chmod(d, 0o711)  # nobody may reach a socket in it, the socket's mode decides the rest
    try:
        sock = os.path.join(d, "tpm.sock")
        p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path, ("--socket", sock))
        try:
            assert os.stat(sock).st_mode & 0o777 == 0o600 and os.stat(f"{sock}.ctrl").st_mode & 0o777 == 0o600
            r = _as_nobody(f"swtpm:path={sock}", gid=0)
            assert r.returncode != 0  # the kernel refuses: permission denied on the socket
            got = _tool(f"swtpm:path={sock}", "tpm2_getrandom", "--hex", "8")
            assert got.returncode == 0, got.stderr
            assert p.stop()[0] == 130
        finally:
            p.kill()
        p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path, ("--socket", sock, "--group", "root"))
        try:
            st = os.stat(sock)
            assert st.st_mode & 0o777 == 0o660 and st.st_gid == 0
            r = _as_nobody(f"swtpm:path={sock}", gid=0)
            assert r.returncode != 0
            line = p.wait_line("refused a connection on a Unix socket", f"uid {NOBODY}")
            assert " pid " in line
            assert p.stop()[0] == 130
        finally:
            p.kill()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_bind_refuses_a_network_address(tcp_swtpm):
    r = run_tpmtop("proxy", "-T", tcp_swtpm.tcti, "--port", str(free_port_pair()), "--bind", "0.0.0.0")
    assert r.returncode == 2 and "loopback only" in r.stderr, r.stderr


# -- item 7: other processes' strings are made terminal-safe -----------------------------------

_HOSTILE_CLIENT = r"""
import ctypes, sys
from tpm2_pytss import ESAPI, TCTILdr, TPM2B_SENSITIVE_CREATE
libc = ctypes.CDLL(None)
libc.prctl(15, b"\x1b[31mEV\x1b]0;X\x07", 0, 0, 0)  # PR_SET_NAME: the comm the proxy reads
ectx = ESAPI(TCTILdr("swtpm", sys.argv[1]))
ectx.get_random(8)
ectx.create_primary(TPM2B_SENSITIVE_CREATE(), "ecc256")  # left loaded: a LEAK line names it
ectx.close()
"""


def test_client_names_reach_the_terminal_escaped(tcp_swtpm, tmp_path):
    script = tmp_path / "evil\x1b[2J\nFORGED.py"  # a command line with a screen clear and a newline
    script.write_text(_HOSTILE_CLIENT)
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path)
    try:
        r = subprocess.run([sys.executable, script.name, f"host=127.0.0.1,port={p.port}"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=TIMEOUT, env=dict(os.environ, TSS2_LOG="all+NONE"))
        assert r.returncode == 0, r.stderr
        line = p.wait_line("LEAK", "0x80000000")
        status, out, cap = p.stop()
        assert status == 130
        assert "\\x1b[31mEV\\x1b]0;X\\x07" in line
        connected = next(ln for ln in p.lines if "connected" in ln and "EV" in ln)
        assert "\\x1b[2J\\x0aFORGED.py" in connected
        for text in p.lines + out.splitlines():
            assert "\x1b" not in text and "\x07" not in text, text
        assert "\\x1b[31mEV" in out  # the per-client table on stdout
        assert any(c["name"] == "\x1b[31mEV\x1b]0;X\x07" for c in cap["clients"])  # the capture keeps the truth
    finally:
        p.kill()


def _pair_while_taking(monkeypatch, offsets: tuple[int, ...]) -> tuple[int, list[int]]:
    """The proxy's automatic port pair, while a real socket takes the ports at ``offsets`` from
    each port bind(0) gives, as soon as the proxy has it. Both ports of the pair must listen.
    Returns the pair's first port and the ports bind(0) gave."""

    from tpmtop.proxy import listening as server

    taken: list[socket.socket] = []
    given: list[int] = []
    real = server._listen_tcp

    def listen(host, port, base=None):
        s = real(host, port, base)
        if port == 0:
            given.append(s.getsockname()[1])
            for off in offsets:
                blocker = socket.socket()
                try:
                    blocker.bind((host, given[-1] + off))
                    taken.append(blocker)
                except OSError:  # busy already: taken all the same
                    blocker.close()
        return s

    monkeypatch.setattr(server, "_listen_tcp", listen)
    try:
        data, ctrl = server.listen_pair("127.0.0.1", 0)
        try:
            p = data.getsockname()[1]
            assert ctrl.getsockname()[1] == p + 1
            for port in (p, p + 1):
                with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT):
                    pass
        finally:
            data.close()
            ctrl.close()
    finally:
        for s in taken:
            s.close()
    return p, given


def test_a_port_pair_is_found_when_every_neighbour_above_is_taken(monkeypatch):
    """The kernel gives bind(0) ports of one parity and outgoing connections the other, so on
    a busy machine the port above the one bind(0) gives is often in TIME_WAIT (a stress run
    once failed 100 tries of it): the proxy takes the pair below instead."""
    p, given = _pair_while_taking(monkeypatch, (+1,))
    assert p + 1 in given


def test_a_port_pair_is_found_below_the_ephemeral_range_when_it_is_full(monkeypatch):
    """A benchmark through the swtpm TCTI fills the ephemeral range with TIME_WAIT (a stress run
    right after one failed `tpmtop run`): with both neighbours of every port bind(0) gives
    taken, the proxy takes a pair below the range."""
    from tpmtop.proxy import listening as server

    monkeypatch.setattr(server, "PAIR_TRIES", 20)  # the fallback's tries too: 20 are plenty
    p, _ = _pair_while_taking(monkeypatch, (-1, +1))
    assert server.BELOW_EPHEMERAL_FROM <= p < server.ephemeral_low() - 1


# -- issue 50: per-user caps ------------------------------------------------------------------------

# nobody opens N connections to the TPM port and holds them, silent, until killed
_HOLDER = """
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
print("held", flush=True)
time.sleep(120)
"""


def test_one_user_cannot_take_every_connection_slot(tcp_swtpm, tmp_path):
    """Issue 50: one allowed user holding idle connections filled the global cap and locked
    every other user out for the idle time-out. With --max-per-user 4 (of 8) its fifth and
    later connections are refused with a line naming the per-user limit, and this user's
    tool is still served."""
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path,
              ("--allow-user", "nobody", "--max-connections", "8", "--max-per-user", "4"))
    holder = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                               "/usr/bin/python3", "-c", _HOLDER, str(p.port), "8"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        assert holder.stdout.readline() == "held\n", holder.stderr.read()
        line = p.wait_line("per-user limit", f"uid {NOBODY}")
        assert "connection refused" in line
        got = _tool(p.tcti, "tpm2_getrandom", "--hex", "8")
        assert got.returncode == 0 and len(got.stdout.strip()) == 16, got.stderr + "\n".join(p.lines)
        assert not any("connections are open (the limit)" in ln for ln in p.lines), p.lines
        holder.kill()
        holder.wait()
        assert p.stop()[0] == 130
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        p.kill()


def test_the_per_user_limit_is_checked_as_a_usage(tcp_swtpm):
    r = run_tpmtop("proxy", "-T", tcp_swtpm.tcti, "--port", str(free_port_pair()), "--max-per-user", "0")
    assert r.returncode == 2 and "--max-per-user 0" in r.stderr, r.stderr


def test_clients_prints_a_holders_name_terminal_safe(tmp_path):
    """`tpmtop clients` lists processes that hold the TPM open; their names are other processes'
    words. A real process renames itself to an escape sequence (prctl PR_SET_NAME, as any user
    can) and holds a file open; the holders found for that file print escaped, never raw."""
    from tpmtop.cli.proxy import clients_lines
    from tpmtop.proxy.holders import tpm_holders

    held = tmp_path / "tpm-stand-in"
    held.write_bytes(b"")
    child = subprocess.Popen([sys.executable, "-c", (
        "import ctypes, sys, time\n"
        "f = open(sys.argv[1], 'rb')\n"
        "ctypes.CDLL(None).prctl(15, b'\\x1b[2J\\x1b]0;X\\x07', 0, 0, 0)\n"  # PR_SET_NAME
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"), str(held)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        info = tpm_holders(devices=(str(held),))
        mine = [h for h in info["holders"] if h["pid"] == child.pid]
        assert mine and "\x1b" in mine[0]["name"]  # the name really holds the escape
        text = "\n".join(clients_lines(info))
        assert str(child.pid) in text
        assert "\x1b" not in text and "\x07" not in text, text
        assert "\\x1b[2J" in text
    finally:
        child.kill()
        child.wait()
