"""A signal after the work is done, and an empty --json, as a user meets them."""

from __future__ import annotations

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
    A process that has already exited when the signal would be sent is left alone (exit 0)."""
    sent_rcs = []
    for i in range(6):
        p = subprocess.Popen(TPMTOP + ["bench", "--sim", "-n", "3", "--json", str(tmp_path / f"z{i}.json")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
        try:
            assert p.stderr is not None
            for line in p.stderr:
                if "capture written" in line:
                    break
            time.sleep(0.02 * i)
            sent = p.poll() is None
            if sent:
                p.send_signal(sig)
            rest = p.stderr.read()
            rc = p.wait(120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert rc != -sig and rc != 128 + sig, (i, rc, rest)
        assert "Traceback" not in rest
        if sent:
            assert rc in (130, 0), (i, rc, rest)  # 0: it had exited between the look and the signal
            sent_rcs.append(rc)
        else:
            assert rc == 0
    assert 130 in sent_rcs


@pytest.mark.parametrize("cmd", [["proxy", "--sim"], ["run", "--sim"]])
def test_an_empty_json_name_is_refused_for_proxy_and_run(cmd, tmp_path):
    """`--json ''` is bad usage (exit 2, one line), as bench says: not accepted and no capture."""
    args = [*cmd, "--json", ""] + (["--", "true"] if cmd[0] == "run" else [])
    r = run_tpmtop(*args, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["tpmtop: --json '': an empty file name"]
