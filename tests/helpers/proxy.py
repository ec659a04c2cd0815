"""A `tpmtop proxy` process as the proxy room's tests run it (in front of a TcpSwtpm), and
two questions asked around it: what the TPM holds, and a raw request on a port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time

from tests.helpers.processes import REPO, TPMTOP, free_port_pair, run_tpmtop

GET_RANDOM_8 = bytes.fromhex("80010000000c0000017b0008")
TIMEOUT = 60


class Proxy:
    """A `tpmtop proxy` process; its stderr lines are collected as they come."""

    def __init__(self, tcti: str, protocol: str, tmp_path, extra: tuple = ()):
        self.protocol = protocol
        self.capture = tmp_path / "capture.json"
        env = dict(os.environ)
        env.pop("TPM2TOOLS_TCTI", None)
        # A port pair chosen free can be taken before the proxy binds it (a loaded suite):
        # the proxy then says so (exit 2) and another pair is tried.
        for attempt in range(5):
            self.port = free_port_pair()
            self.proc = subprocess.Popen(
                TPMTOP + ["proxy", *(["--sim"] if tcti == "--sim" else ["-T", tcti]), "--port", str(self.port),
                          "--protocol", protocol,
                          "--json", str(self.capture), "--events", *extra],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
            self.lines: list[str] = []
            self._cv = threading.Condition()
            self._t = threading.Thread(target=self._pump, daemon=True)
            self._t.start()
            try:
                self.wait_line("serving")
                return
            except AssertionError:
                self._t.join(TIMEOUT)
                if attempt == 4 or not any("already in use" in ln for ln in self.lines):
                    raise

    def _pump(self):
        for line in self.proc.stderr:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()

    def wait_line(self, *needles: str, timeout: float = TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for line in self.lines:
                    if all(n in line for n in needles):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._t.is_alive()):
                    raise AssertionError(f"no line with {needles!r} in proxy output:\n" + "\n".join(self.lines))
                self._cv.wait(min(left, 0.5))

    @property
    def tcti(self) -> str:
        return f"{self.protocol}:host=127.0.0.1,port={self.port}"

    def tool(self, *argv: str, check: bool = True, cwd=None) -> subprocess.CompletedProcess:
        env = dict(os.environ, TPM2TOOLS_TCTI=self.tcti, TSS2_LOG="all+NONE")
        r = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd)
        if check:
            # the proxy's lines say why (a refusal, a time-out) where the client says "IO failure"
            assert r.returncode == 0, f"{argv}: {r.stderr}\nproxy:\n" + "\n".join(self.lines)
        return r

    def stop(self) -> tuple[int, str, dict]:
        self.proc.send_signal(signal.SIGTERM)
        # Not communicate(): it would read (and close) stderr under the pump thread, which then
        # died with "I/O operation on closed file" (a warning in a stress run) and lost lines.
        # stdout is a line or two, well under a pipe's buffer, so waiting first cannot block.
        self.proc.wait(timeout=TIMEOUT)
        out = self.proc.stdout.read()
        self.proc.stdout.close()
        self._t.join(TIMEOUT)
        if not self._t.is_alive():
            self.proc.stderr.close()
        cap = json.loads(self.capture.read_text()) if self.capture.exists() else {}
        return self.proc.returncode, out, cap

    def kill(self):
        if self.proc.poll() is None:
            from tests.helpers.processes import swtpm_children

            orphans = swtpm_children(self.proc.pid)  # a --sim proxy's private swtpm
            self.proc.kill()
            self.proc.wait()
            for c in orphans:
                try:
                    c.kill()
                except Exception:
                    pass


def _tpm_handles(p: Proxy) -> dict[int, str]:
    """What the TPM holds, asked by `tpmtop handles` through the proxy (swtpm serves one
    connection at a time, and the proxy holds it)."""
    r = run_tpmtop("handles", "--json", "-T", p.tcti)
    assert r.returncode == 0, r.stderr
    return {int(h["handle"], 16): h["kind"] for h in json.loads(r.stdout)["handles"]}


def _ask(port: int, request: bytes, n: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(request)
        got = b""
        while len(got) < n:
            chunk = s.recv(n - len(got))
            assert chunk, f"closed after {got!r}"
            got += chunk
        return got
