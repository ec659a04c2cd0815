"""The private swtpm never outlives tpmtop and never leaves its state behind."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tpmtop.tpm.sim import Swtpm
from conftest import REPO, TPMTOP, swtpm_children


def test_exception_inside_stops_and_wipes():
    with pytest.raises(RuntimeError):
        with Swtpm() as sim:
            pid, state = sim.pid, sim.state_dir
            assert psutil.pid_exists(pid) and os.path.isdir(state)
            raise RuntimeError("boom")
    assert not _alive(pid)
    assert not os.path.exists(state)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _start_long_bench():
    p = subprocess.Popen(TPMTOP + ["bench", "--sim", "-n", "1000000", "--modes", "none", "--engine", "native", "-q"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        kids = swtpm_children(p.pid)
        if kids:
            time.sleep(0.5)  # let it get into the workload
            return p, kids[0]
        time.sleep(0.05)
    p.kill()
    raise AssertionError("tpmtop did not start a swtpm")


def _state_dir(proc: psutil.Process) -> str:
    arg = proc.cmdline()[proc.cmdline().index("--tpmstate") + 1]
    return arg.removeprefix("dir=")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signal_stops_swtpm(sig):
    p, sw = _start_long_bench()
    state = _state_dir(sw)
    p.send_signal(sig)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    assert not _alive(sw.pid)
    assert not os.path.exists(state)


def test_sigkill_of_tpmtop_still_ends_swtpm():
    # No clean-up code runs on SIGKILL: swtpm must notice its peer is gone by itself.
    p, sw = _start_long_bench()
    p.kill()
    p.wait()
    sw.wait(timeout=10)
    assert not _alive(sw.pid)


def test_reset_loses_volatile_state(tpm):
    from tpmtop.sessions.native import NativeEngine
    from tpmtop.tpm.handles import list_handles

    e = NativeEngine(tpm.transport)
    e.create_null_primary()
    p = e.load_null()
    assert [h.handle for h in list_handles(tpm.transport)] == [p]
    tpm.sim.reset()
    assert list_handles(tpm.transport) == []
