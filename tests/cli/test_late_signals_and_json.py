"""A signal after the work is done, and an empty --json, as a user meets them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from tests.helpers.processes import REPO, TPMTOP, run_tpmtop


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_after_capture_written_is_exit_130_never_death_by_signal(sig, tmp_path):
    """SIGTERM/SIGHUP sent after "capture written", at delays across the process's way out:
    while it still runs, the exit status is 130 (documented), never 128+N from the signal's
    default action (Python restores it while shutting down: 143 in 10 of 10 runs, SIGHUP 129).

    The process exits within milliseconds of the notice, so "still runs" is made a fact rather
    than a hope: it is stopped (SIGSTOP) first, and waitpid says whether the stop took (it was
    alive: the signal is then sent and it is continued) or it had already exited (left alone,
    exit 0). Runs go on until at least one was caught alive."""
    caught = 0
    delays = [0.0, 0.0, 0.005, 0.01, 0.02, 0.05]
    for i in range(24):
        if i >= len(delays) and caught:
            break
        p = subprocess.Popen(TPMTOP + ["bench", "--sim", "-n", "3", "--json", str(tmp_path / f"z{i}.json")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
        try:
            assert p.stderr is not None
            for line in p.stderr:
                if "capture written" in line:
                    break
            time.sleep(delays[i % len(delays)])
            # os.kill, not send_signal (which polls, and so would reap an exited child here): a
            # zombie ignores the stop, and waitpid then reports its exit.
            os.kill(p.pid, signal.SIGSTOP)
            _, status = os.waitpid(p.pid, os.WUNTRACED)
            alive = os.WIFSTOPPED(status)
            if alive:
                os.kill(p.pid, sig)
                os.kill(p.pid, signal.SIGCONT)
                _, status = os.waitpid(p.pid, 0)
            rc = p.returncode = os.waitstatus_to_exitcode(status)
            rest = p.stderr.read()
        finally:
            if p.returncode is None:
                p.kill()
                p.wait()
        assert rc != -sig and rc != 128 + sig, (i, rc, rest)
        assert "Traceback" not in rest
        if alive:
            assert rc == 130, (i, rc, rest)
            assert "tpmtop: interrupted" in rest
            caught += 1
        else:
            assert rc == 0, (i, rc, rest)
        json.loads((tmp_path / f"z{i}.json").read_text())  # the capture is whole either way
    assert caught, "no run was still alive after its notice in 24 tries"


@pytest.mark.parametrize("cmd", [["proxy", "--sim"], ["run", "--sim"]])
def test_an_empty_json_name_is_refused_for_proxy_and_run(cmd, tmp_path):
    """`--json ''` is bad usage (exit 2, one line), as bench says: not accepted and no capture."""
    args = [*cmd, "--json", ""] + (["--", "true"] if cmd[0] == "run" else [])
    r = run_tpmtop(*args, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["tpmtop: --json '': an empty file name"]
