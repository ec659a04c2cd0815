"""The processes the tests start: ``tpmtop`` as a user runs it (this tree's code: ``python -m
tpmtop`` from the repository), swtpm on TCP ports, and a running ``tpmtop bench``."""

from __future__ import annotations

import os
import pty
import random
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from tests.helpers.paths import REPO
from tpmtop.connect import open_tpm
from tpmtop.proxy.listening import ephemeral_low

TPMTOP = [sys.executable, "-m", "tpmtop"]

__all__ = ["REPO", "TPMTOP", "BenchProcess", "TcpSwtpm", "alive", "free_port_pair", "run_tpmtop",
           "swtpm_children", "wait_until"]


def wait_until(cond, what: str, timeout: float = 60.0) -> None:
    """Poll ``cond()`` until it is true; fail naming ``what`` after ``timeout`` s (generous:
    a condition, never a time bound)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """The process runs (a zombie, ended but not yet reaped, does not)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def free_port_pair() -> int:
    """A free TCP port N whose N+1 is free too (swtpm's server and control ports), below the
    ephemeral range: a benchmark through tpm2-tss's swtpm TCTI (a connection per command)
    leaves thousands of ephemeral ports in TIME-WAIT, where a server's bind then fails."""
    low = ephemeral_low()
    for _ in range(100):
        if low > 12000:
            port = random.randrange(10000, low - 2, 2)
        else:  # an unusual range: take what the kernel gives
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port >= 65000:
                continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair")


def _listening_ports(pid: int) -> set[int]:
    import psutil

    try:
        return {c.laddr.port for c in psutil.Process(pid).net_connections("tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr}
    except psutil.NoSuchProcess:
        return set()


class TcpSwtpm:
    """A swtpm on TCP ports, as a user would run one: other processes (the tpmtop CLI)
    connect to it with -T swtpm:port=N, and its state outlives each client.

    Ready when the swtpm process itself listens on both ports (its own sockets, asked of the
    kernel), not when something answers on the number chosen: under load the suite failed
    with "cannot connect to TPM at 127.0.0.1:<port>: Connection refused" when another process
    took a port between choosing and binding. A swtpm that could not bind exits, and another
    pair is tried."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tpmtop-test-swtpm-")
        for _ in range(10):
            self.port = free_port_pair()
            self.proc = subprocess.Popen(
                ["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={self.dir}",
                 "--server", f"type=tcp,port={self.port}", "--ctrl", f"type=tcp,port={self.port + 1}",
                 "--flags", "not-need-init,startup-clear"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while self.proc.poll() is None and time.monotonic() < deadline:
                if {self.port, self.port + 1} <= _listening_ports(self.proc.pid):
                    return
                time.sleep(0.02)
            self.stop(keep_dir=True)  # it exited (a port taken meanwhile) or never listened
        shutil.rmtree(self.dir, ignore_errors=True)
        raise RuntimeError("swtpm did not listen on a free port pair in 10 tries")

    @property
    def tcti(self) -> str:
        return f"swtpm:host=127.0.0.1,port={self.port}"

    def connect(self):
        return open_tpm(tcti=self.tcti, env={})

    def stop(self, keep_dir: bool = False):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


# the name the tests used when it lived in tests/conftest.py
_free_port_pair = free_port_pair


def run_tpmtop(*args: str, env: dict | None = None, timeout: float = 60, prefix: list | None = None,
               **kw) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("TPM2TOOLS_TCTI", None)
    if env:
        e.update(env)
    return subprocess.run((prefix or []) + TPMTOP + list(args), capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=REPO, **kw)


def swtpm_children(pid: int) -> list:
    import psutil

    try:
        return [c for c in psutil.Process(pid).children(recursive=True) if c.name() == "swtpm"]
    except psutil.NoSuchProcess:
        return []


class BenchProcess:
    """A ``tpmtop bench`` as a user runs it (a separate process), for signal and fault tests.

    Waits are on conditions with generous limits, never fixed sleeps: ``swtpm()`` until the
    private swtpm is there, ``working()`` until the bench has printed its header and its TPM
    has spent CPU on its commands. ``kill()`` (the ``bench`` fixture's finalizer) ends it
    whatever happened, so a test that fails never leaves a million-operation bench running.
    """

    LIMIT = 60.0

    def __init__(self, *args: str):
        import threading

        self.proc = subprocess.Popen(TPMTOP + ["bench", *args], cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self._reader = threading.Thread(target=lambda: self.out.extend(iter(self.proc.stdout.readline, "")),
                                        daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _until(self, cond, what: str) -> None:
        deadline = time.monotonic() + self.LIMIT
        while not cond():
            if self.proc.poll() is not None:
                raise AssertionError(f"bench exited ({self.proc.returncode}) before {what}: {self.proc.stderr.read()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"bench: no {what} within {self.LIMIT:.0f} s")
            time.sleep(0.01)

    def swtpm(self):
        """The private swtpm (psutil.Process), once it is there."""
        self._until(lambda: swtpm_children(self.pid), "private swtpm")
        return swtpm_children(self.pid)[0]

    def working(self, tpm_pid: int | None = None, cpu_s: float = 0.05) -> None:
        """Until the header is out and the TPM (the private swtpm unless *tpm_pid*) has spent
        *cpu_s* of CPU since then: the workload's commands are flowing."""
        import psutil

        tpm = psutil.Process(tpm_pid) if tpm_pid else self.swtpm()
        self._until(lambda: self.out, "header")
        start = sum(tpm.cpu_times()[:2])
        self._until(lambda: sum(tpm.cpu_times()[:2]) - start >= cpu_s, "TPM work")

    def finish(self, timeout: float = LIMIT) -> tuple[int, str, str]:
        """Exit status, stdout, stderr (waits at most *timeout*)."""
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout)
        return rc, "".join(self.out), self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            f.close()


ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def run_on_pty(*args: str, timeout: float = 300) -> tuple[int, str, str]:
    """tpmtop with stderr on a pseudo-terminal (stdout piped): (status, terminal text, stdout)."""
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="120")
    env.pop("TPM2TOOLS_TCTI", None)
    p = subprocess.Popen(TPMTOP + list(args), stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                         cwd=REPO, env=env)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed its end
                    break
                if not chunk:
                    break
                seen += chunk
            elif p.poll() is not None:
                break
        out = p.stdout.read().decode()
        status = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        os.close(master)
    return status, ANSI.sub(b"", seen).decode("utf-8", "replace"), out
