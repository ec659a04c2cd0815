"""What the proxy keeps and reports about its clients: bounded however many there were, exact
when they leave, and true to what the TPM did (a Clear, one client flushing another's object).
Real swtpm, real tpm2-tools, real client processes."""

from __future__ import annotations

import os
import re
import shutil
import socket
import struct
import subprocess

import psutil
import pytest

from tests.helpers.processes import wait_until
from tests.helpers.proxy import GET_RANDOM_8, TIMEOUT, Proxy, _ask, _tpm_handles

pytestmark = pytest.mark.skipif(shutil.which("tpm2_getrandom") is None, reason="tpm2-tools not installed")


def _forked_clients(port: int, n: int) -> None:
    """``n`` client processes one after another, each one GetRandom through the proxy."""
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
                    s.sendall(GET_RANDOM_8)
                    got = b""
                    while len(got) < 20:
                        chunk = s.recv(20 - len(got))
                        if not chunk:
                            break
                        got += chunk
                    code = 0 if len(got) == 20 else 1
            finally:
                os._exit(code)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_departed_clients_are_folded_and_threads_exit(tcp_swtpm, tmp_path):
    """300 client processes: the capture keeps the last 64 whole and one summary row for the
    program; 100 connections held at once are served by the proxy's one loop: its thread
    count does not move while they are open, nor after they close."""
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path)
    try:
        proc = psutil.Process(p.proc.pid)
        _forked_clients(p.port, 300)
        p.wait_line("client 300 ", "left")
        wait_until(lambda: proc.num_threads() <= 6, f"idle threads did not exit: {proc.num_threads()}")
        idle = proc.num_threads()
        held = [socket.create_connection(("127.0.0.1", p.port), timeout=TIMEOUT) for _ in range(100)]
        for s in held:
            s.sendall(GET_RANDOM_8)
        peak = idle
        for s in held:
            assert len(s.recv(64)) == 20, [ln for ln in p.lines if "refused" in ln or "unknown" in ln][:5]
            peak = max(peak, proc.num_threads())
        assert peak == idle  # no thread per connection
        for s in held:
            s.close()
        wait_until(lambda: not [c for c in proc.net_connections("tcp") if c.laddr and c.laddr.port == p.port
                                and c.status == psutil.CONN_ESTABLISHED], "the proxy to close the 100")
        assert proc.num_threads() == idle
        status, _, cap = p.stop()
        assert status == 130
    finally:
        p.kill()
    assert len(cap["clients"]) <= 64 + 1
    me = [c for c in cap["clients"] if c["pid"] == os.getpid()]
    # one process: one client
    assert len(me) == 1 and me[0]["commands"] == 100, \
        [(c["pid"], c["name"], c["commands"]) for c in cap["clients"]][-8:]
    py = [x for x in cap["programs"] if x["clients"] >= 300]
    assert len(py) == 1 and py[0]["commands"] >= 300 and py[0]["errors"] == 0
    assert not any(c["pid"] is None for c in cap["clients"])


def test_leak_reports_are_the_same_every_run(tcp_swtpm, tmp_path):
    """A script of five startauthsession/flushcontext pairs: every startauthsession leaves its
    saved session behind (the next tool flushes it). The departure is seen when the process
    exits, before the next tool's commands: five LEAK lines, every run."""
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path)
    try:
        script = "for i in 1 2 3 4 5; do tpm2_startauthsession -S s.ctx && tpm2_flushcontext s.ctx || exit 1; done"
        r = p.tool("sh", "-c", script, cwd=tmp_path)
        assert r.returncode == 0
        p.wait_line("client 10 ", "left")
        _status, _, _ = p.stop()
    finally:
        p.kill()
    sas = [ln for ln in p.lines if "tpm2_startauthsession" in ln and " left:" in ln]
    assert len(sas) == 5 and all("LEAK" in ln and "(StartAuthSession, saved)" in ln for ln in sas), sas
    flush = [ln for ln in p.lines if "tpm2_flushcontext" in ln and " left:" in ln]
    assert len(flush) == 5 and all("left nothing loaded" in ln for ln in flush), flush


def test_flushing_another_clients_object_and_clear_are_reported(tcp_swtpm, tmp_path):
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path)
    try:
        p.tool("tpm2_createprimary", "-C", "o", "-G", "ecc", "-c", "p.ctx", cwd=tmp_path)
        p.tool("tpm2_flushcontext", "-t")
        line = p.wait_line("flushed 0x80000000")
        assert "tpm2_flushcontext" in line and "tpm2_createprimary" in line and "CreatePrimary" in line
        p.tool("tpm2_createprimary", "-C", "o", "-G", "ecc", "-c", "p.ctx", cwd=tmp_path)
        p.tool("tpm2_createprimary", "-C", "o", "-G", "ecc", "-c", "q.ctx", cwd=tmp_path)
        assert {0x80000000, 0x80000001} <= set(_tpm_handles(p))
        p.tool("tpm2_clear")  # (a throw-away swtpm: its lockout auth is empty)
        line = p.wait_line("sent Clear: the TPM flushed", "(asked of the TPM)")
        assert "0x80000000 transient object" in line and "0x80000001 transient object" in line, line
        assert not [h for h in _tpm_handles(p) if h >> 24 == 0x80]  # the TPM holds none
        status, _, cap = p.stop()
        assert status == 130
    finally:
        p.kill()
    assert not any(c["held"] for c in cap["clients"])  # the model agrees with the TPM


def test_refused_control_request_payload_is_not_parsed(tcp_swtpm, tmp_path):
    """CMD_GET_STATEBLOB with its 12-byte payload: one refusal, then the connection ends —
    the payload is never taken for three more requests."""
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", p.port + 1), timeout=TIMEOUT) as s:
            s.sendall(struct.pack(">I", 0x0C) + struct.pack(">III", 1, 0, 0))
            got = b""
            while True:
                chunk = s.recv(64)
                if not chunk:
                    break
                got += chunk
        assert got == struct.pack(">I", 10)  # TPM_BAD_ORDINAL, once
        assert _ask(p.port + 1, struct.pack(">I", 0x01), 8)[:4] == b"\0\0\0\0"  # the channel still answers
        assert p.stop()[0] == 130
    finally:
        p.kill()


def test_log_lines_never_glue(tcp_swtpm, tmp_path):
    """Many clients at once: every stderr line is one whole line of the proxy's."""
    p = Proxy(tcp_swtpm.tcti, "mssim", tmp_path)
    try:
        pids = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                try:
                    _forked_clients_mssim(p.port, 15)
                finally:
                    os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        p.wait_line("left")
        p.stop()
    finally:
        p.kill()
    for ln in p.lines:
        assert ln.count("tpmtop proxy:") <= 1 and ln.count("tpmtop:") <= 1, ln


def _forked_clients_mssim(port: int, n: int) -> None:
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
                    s.sendall(struct.pack(">IBI", 8, 0, 12) + GET_RANDOM_8)
                    got = b""
                    while len(got) < 28:
                        chunk = s.recv(28 - len(got))
                        if not chunk:
                            break
                        got += chunk
                    s.sendall(struct.pack(">I", 20))
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


def test_connection_cap_and_idle_timeout(tcp_swtpm, tmp_path):
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path, ("--max-connections", "2", "--idle-timeout", "1"))
    try:
        held = [socket.create_connection(("127.0.0.1", p.port), timeout=TIMEOUT) for _ in range(2)]
        for s in held:
            s.sendall(GET_RANDOM_8)
            assert len(s.recv(64)) == 20
        with socket.create_connection(("127.0.0.1", p.port), timeout=TIMEOUT) as third:
            try:
                assert third.recv(64) == b""  # closed at once
            except ConnectionResetError:
                pass
        p.wait_line("2 connections are open (the limit): connection refused")
        for s in held:  # silent for the idle time-out: closed by the proxy
            assert s.recv(64) == b""
            s.close()
        p.wait_line("idle for 1 s; connection closed")
        p.tool("tpm2_getrandom", "--hex", "8")  # room again
        assert p.stop()[0] == 130
    finally:
        p.kill()


def test_a_stderr_nobody_reads_does_not_stall_the_clients(tcp_swtpm, tmp_path):
    """The proxy's stderr is a pipe nobody reads: 400 client processes (two lines each, with
    their command lines: more than the pipe's 64 KiB) are all served. Its loop only queues its
    lines; a loop that wrote them itself stopped at the full pipe and every client after it hung."""
    import signal
    import subprocess

    from tests.helpers.processes import REPO, TPMTOP, free_port_pair

    port = free_port_pair()
    proc = subprocess.Popen(TPMTOP + ["proxy", "-T", tcp_swtpm.tcti, "--port", str(port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_until(listening, "the proxy to listen")
        _forked_clients(port, 400)  # each asserts its answer came (60 s time-out per client)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=TIMEOUT)[1].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    # every client said: in its own line, or counted in a summary (CLIENT_LINES_PER_S a second)
    said = sum(1 for ln in err.splitlines() if " connected: " in ln and " in the last " not in ln)
    counted = sum(int(n.replace(",", "")) for n in re.findall(r"([\d,]+) clients connected(?:,| in the last)", err))
    assert said + counted >= 400, err[-2000:]


def _tpm_lists(tcti: str) -> set[tuple[str, int]]:
    """What the TPM holds, by tpm2_getcap straight to the swtpm: transient handles, and session
    slots loaded or saved (the saved list names a policy session with the HMAC range's top byte)."""
    env = dict(os.environ, TPM2TOOLS_TCTI=tcti, TSS2_LOG="all+NONE")
    out: set[tuple[str, int]] = set()
    for what in ("handles-transient", "handles-loaded-session", "handles-saved-session"):
        r = subprocess.run(["tpm2_getcap", what], env=env, capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 0, r.stderr
        for h in (int(x, 16) for x in re.findall(r"0x[0-9a-fA-F]+", r.stdout)):
            out.add(("transient", h) if h >> 24 == 0x80 else ("session", h & 0xFFFFFF))
    return out


def _model(cap: dict) -> set[tuple[str, int]]:
    """What the proxy's report says clients left loaded."""
    out: set[tuple[str, int]] = set()
    for c in cap["clients"]:
        for h in (int(x["handle"], 16) for x in c["held"]):
            out.add(("transient", h) if h >> 24 == 0x80 else ("session", h & 0xFFFFFF))
    return out


@pytest.mark.parametrize("protocol", ["swtpm", "mssim"])
def test_what_clients_left_after_a_clear_is_what_the_tpm_says(tcp_swtpm, tmp_path, protocol):
    """Issue 55 item 10: an NV workload with policy sessions and a TPM2_Clear through the
    proxy (tpm2-tools, a fresh swtpm: empty lockout and platform auth). A Clear flushes the
    owner's and endorsement's objects, not the platform's, nor sessions: the proxy guessed
    "every transient object" and reported a platform primary gone that the TPM still held.
    Its report is now what the TPM lists."""
    (tmp_path / "data").write_bytes(b"hello")
    p = Proxy(tcp_swtpm.tcti, protocol, tmp_path)
    try:
        for argv in (["tpm2_nvdefine", "0x1500016", "-C", "o", "-s", "32", "-a", "ownerread|ownerwrite"],
                     ["tpm2_nvwrite", "0x1500016", "-C", "o", "-i", "data"],
                     ["tpm2_nvread", "0x1500016", "-C", "o", "-s", "5"],
                     ["tpm2_startauthsession", "-S", "s.ctx", "--policy-session"],
                     ["tpm2_policypcr", "-S", "s.ctx", "-l", "sha256:0"],
                     ["tpm2_startauthsession", "-S", "h.ctx", "--hmac-session"],
                     ["tpm2_createprimary", "-C", "p", "-c", "pp.ctx"],
                     ["tpm2_createprimary", "-C", "o", "-c", "op.ctx"],
                     ["tpm2_clear"],
                     ["tpm2_nvdefine", "0x1500017", "-C", "o", "-s", "8"],
                     ["tpm2_nvundefine", "0x1500017", "-C", "o"]):
            p.tool(*argv, cwd=tmp_path)
        status, _, cap = p.stop()
        assert status == 130
    finally:
        p.kill()
    tpm = _tpm_lists(tcp_swtpm.tcti)
    assert ("transient", 0x80000000) in tpm  # the platform primary outlived the Clear
    assert _model(cap) == tpm, (_model(cap), tpm, p.lines)
    line = next(ln for ln in p.lines if "sent Clear: the TPM flushed" in ln)
    assert "0x80000001 transient object" in line and "(asked of the TPM)" in line, line
