"""Shared fixtures. Every TPM here is a real swtpm process; nothing is mocked."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tpmtop.connect import open_tpm

REPO = Path(__file__).resolve().parent.parent
TPMTOP = [sys.executable, "-m", "tpmtop"]


@pytest.fixture
def tpm():
    """A fresh private swtpm (clean state) with an instrumented connection."""
    conn = open_tpm(sim=True)
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture(scope="module")
def shared_tpm():
    """One swtpm for a module whose tests do not care about each other's state."""
    conn = open_tpm(sim=True)
    try:
        yield conn
    finally:
        conn.close()


def _free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            with socket.socket() as s2:
                try:
                    s2.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair")


class TcpSwtpm:
    """A swtpm on TCP ports, as a user would run one: other processes (the tpmtop CLI)
    connect to it with -T swtpm:port=N, and its state outlives each client."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tpmtop-test-swtpm-")
        self.port = _free_port_pair()
        self.proc = subprocess.Popen(
            ["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={self.dir}",
             "--server", f"type=tcp,port={self.port}", "--ctrl", f"type=tcp,port={self.port + 1}",
             "--flags", "not-need-init,startup-clear"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("swtpm did not listen")

    @property
    def tcti(self) -> str:
        return f"swtpm:host=127.0.0.1,port={self.port}"

    def connect(self):
        return open_tpm(tcti=self.tcti, env={})

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def tcp_swtpm():
    s = TcpSwtpm()
    try:
        yield s
    finally:
        s.stop()


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
