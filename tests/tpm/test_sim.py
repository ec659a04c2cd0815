"""The private swtpm never outlives tpmtop and never leaves its state behind."""

import os
import signal
import time

import psutil
import pytest

from tests.helpers.processes import alive
from tpmtop.stats import NOT_JUDGED
from tpmtop.tpm.sim import Swtpm


def test_exception_inside_stops_and_wipes():
    with pytest.raises(RuntimeError), Swtpm() as sim:
        pid, state = sim.pid, sim.state_dir
        assert psutil.pid_exists(pid) and os.path.isdir(state)
        raise RuntimeError("boom")
    assert not alive(pid)
    assert not os.path.exists(state)


LONG = ["--sim", "-n", "1000000", "--warmup", "0", "--modes", "none,per-command", "-q"]


def _state_dir(proc: psutil.Process) -> str:
    # Caught right at its exec, the swtpm may not show its full command line yet.
    deadline = time.monotonic() + 60
    while "--tpmstate" not in (cmd := proc.cmdline()):
        assert time.monotonic() < deadline, cmd
        time.sleep(0.01)
    return cmd[cmd.index("--tpmstate") + 1].removeprefix("dir=")


@pytest.mark.parametrize("engine", ["native", "esys"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signal_stops_swtpm(bench, sig, engine):
    b = bench(*LONG, "--engine", engine)
    sw = b.swtpm()
    state = _state_dir(sw)
    b.working()  # in the workload: commands are flowing
    b.proc.send_signal(sig)
    rc, out, err = b.finish()
    assert rc == 130, err
    # one line, and the one a signal gives: not a TPM failure ("tcti:Catch all"), no
    # "Exception ignored from cffi callback", no traceback
    assert err.splitlines() == ["tpmtop: interrupted: partial results above"], err
    # the partial table, after the header and column titles (and, from fewer than 100
    # operations, the line that says why its op p99 is "–")
    rows = [r for r in out.splitlines()[3:] if not r.startswith(NOT_JUDGED)]
    assert rows and all(r.split()[0] == engine for r in rows), out
    sw.wait(timeout=60)
    assert not alive(sw.pid)
    assert not os.path.exists(state)


def test_sigkill_of_tpmtop_still_ends_swtpm(bench):
    # No clean-up code runs on SIGKILL: swtpm must notice its peer is gone by itself.
    b = bench(*LONG, "--engine", "native")
    sw = b.swtpm()
    b.working()
    b.proc.kill()
    b.proc.wait()
    sw.wait(timeout=60)
    assert not alive(sw.pid)


def test_reset_loses_volatile_state(tpm):
    from tpmtop.sessions.native import NativeEngine
    from tpmtop.tpm.handles import list_handles

    e = NativeEngine(tpm.transport)
    e.create_null_primary()
    p = e.load_null()
    assert [h.handle for h in list_handles(tpm.transport)] == [p]
    tpm.sim.reset()
    assert list_handles(tpm.transport) == []


def test_swtpm_started_from_a_thread_outlives_that_thread():
    """PR_SET_PDEATHSIG fires when the forking *thread* ends: a swtpm started from a worker or
    the proxy's recovery thread (the owner's fast path runs jobs there) must keep running."""
    import threading

    from tpmtop.tpm.sim import Swtpm

    box: list = []
    t = threading.Thread(target=lambda: box.append(Swtpm().start()))
    t.start()
    t.join(60)
    (tpm,) = box
    try:
        tpm.backend().transact(bytes.fromhex("80010000000c0000017b0008"))  # after the thread ended
        assert tpm.proc.poll() is None
    finally:
        tpm.stop()


def test_a_swtpm_killed_but_not_yet_reaped_is_named_as_killed():
    """A reconnection's mark says how the swtpm ended. Its sockets close while it exits, before
    it can be reaped, and the lost connection is often seen first: the note once said "was still
    running" for a swtpm killed by SIGKILL (a Pilot test's mark under load)."""
    with Swtpm() as sim:
        os.kill(sim.pid, signal.SIGKILL)  # not reaped: the note must wait for the end, not guess
        note = sim.exit_note()
        assert f"swtpm pid {sim.pid} ended (killed by SIGKILL)" in note, note


def test_a_private_swtpm_shares_tpmtops_session_but_not_its_process_group():
    """A terminal's Ctrl-C goes to the foreground process group: tpmtop's, not swtpm's, which
    tpmtop stops after its clean-up. The session is tpmtop's: with autogroup scheduling a new
    session is a scheduling group of its own, which a loaded machine made every command wait for."""
    s = Swtpm().start()
    try:
        assert os.getsid(s.pid) == os.getsid(0)
        assert os.getpgid(s.pid) == s.pid != os.getpgid(0)
    finally:
        s.stop()
