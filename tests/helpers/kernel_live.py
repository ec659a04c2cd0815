"""Shared by the live `tpmtop kernel` tests: whether live tracing can run here, and a running
`tpmtop kernel` whose output is read while it runs.

The live tests skip, with the reason, where tracing is impossible (no root, no tracefs, no
kprobe events, no TPM). `scripts/kernel-vm.sh` runs them in a VM with a real kernel and sets
TPMTOP_KERNEL_LIVE=required there: a skip is then a failure, so they cannot pass by not
running."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.processes import REPO, TPMTOP
from tpmtop.kernel import probes

WAIT_S = 180  # generous: the VM may be emulated (TCG) on a busy 2-core machine


def live_unavailable() -> str | None:
    """Why the live path cannot run here, or None."""
    try:
        t = probes.find_tracefs()
    except probes.KernelTraceError as e:
        return str(e)
    if not probes.kernel_has(t, "tpm_transmit"):
        return "this kernel has no tpm_transmit (no TPM driver)"
    if not os.path.exists("/dev/tpmrm0"):
        return "no /dev/tpmrm0 to send a command through"
    return None


def require_live() -> None:
    why = live_unavailable()
    if why is None:
        return
    if os.environ.get("TPMTOP_KERNEL_LIVE") == "required":
        pytest.fail(f"live kernel tracing is required here (TPMTOP_KERNEL_LIVE=required) but: {why}")
    pytest.skip(f"live kernel tracing: {why}")


def wait_for(cond, what: str, timeout: float = WAIT_S, on_fail=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}; {on_fail()}")
        time.sleep(0.1)


class Tracer:
    """`tpmtop kernel ARGS…` as a child, its stdout and stderr in files read while it runs."""

    def __init__(self, tmp_path: Path, *args: str, name: str = "tpmtop"):
        self.out = tmp_path / f"{name}.out"
        self.err = tmp_path / f"{name}.err"
        env = dict(os.environ)
        env.pop("TPM2TOOLS_TCTI", None)
        with open(self.out, "w") as o, open(self.err, "w") as e:
            self.proc = subprocess.Popen(TPMTOP + ["kernel", *args], cwd=REPO, stdout=o, stderr=e,
                                         stdin=subprocess.DEVNULL, env=env)
        self.group = f"{probes.GROUP_PREFIX}{self.proc.pid}"
        self.t = probes.find_tracefs()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def lines(self) -> list[str]:
        return self.stdout().splitlines()

    def why(self) -> str:
        return f"exit {self.proc.poll()}; stderr: {self.stderr()[-2000:]!r}; stdout tail: {self.stdout()[-2000:]!r}"

    def wait_armed(self) -> None:
        """Until the probes are enabled in tpmtop's instance (it says so on stderr after)."""
        wait_for(lambda: "tracing tpm_transmit" in self.stderr() or self.proc.poll() is not None,
                 "tpmtop kernel to arm its probes", on_fail=self.why)
        assert self.proc.poll() is None, self.why()
        assert self.group in self.t.read("kprobe_events")
        assert self.instance_exists()

    def wait_line(self, pred, what: str) -> str:
        def find():
            return next((ln for ln in self.lines() if pred(ln)), None)

        return wait_for(find, what, on_fail=self.why)

    def instance_exists(self) -> bool:
        return os.path.isdir(self.t.path("instances", self.group))

    def group_armed(self) -> bool:
        return self.group in self.t.read("kprobe_events")

    def stop(self, sig: int = signal.SIGINT) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(WAIT_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run(*argv: str, **kw) -> subprocess.Popen:
    """Run a program to its end; the Popen (for its pid) is returned, checked."""
    p = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    try:
        out, err = p.communicate(timeout=WAIT_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, f"{argv}: exit {p.returncode}: {err.decode(errors='replace')}"
    p.stdout_bytes = out
    return p
