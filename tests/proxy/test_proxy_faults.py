"""A dead or stalled TPM behind `tpmtop proxy`: the private swtpm is restarted, an external one
is reconnected, a waiting client is answered with a response code (never left hanging), and a
TPM gone for good ends the proxy with exit status 1 and one line. Real swtpm processes, killed
and stopped for real."""

from __future__ import annotations

import shutil
import time

import psutil
import pytest

from tests.helpers.processes import swtpm_children
from tests.helpers.proxy import TIMEOUT, Proxy

pytestmark = pytest.mark.skipif(shutil.which("tpm2_getrandom") is None, reason="tpm2-tools not installed")


def _until_ok(p: Proxy, tries: int = 60) -> int:
    """Run tpm2_getrandom until it succeeds; how many failed first."""
    for n in range(tries):
        r = p.tool("tpm2_getrandom", "--hex", "8", check=False)
        if r.returncode == 0 and len(r.stdout.strip()) == 16:
            return n
        time.sleep(0.2)
    raise AssertionError("the TPM never came back:\n" + "\n".join(p.lines))


def test_killed_private_swtpm_is_restarted(tmp_path):
    p = Proxy("--sim", "swtpm", tmp_path)
    try:
        p.tool("tpm2_getrandom", "--hex", "8")
        (tpm,) = swtpm_children(p.proc.pid)
        tpm.kill()
        deadline = time.monotonic() + TIMEOUT
        while tpm.is_running() and tpm.status() != psutil.STATUS_ZOMBIE:  # the proxy reaps it, not us
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r = p.tool("tpm2_getrandom", "--hex", "8", check=False)  # answered (a response code), not hung
        assert r.returncode != 0 or len(r.stdout.strip()) == 16
        _until_ok(p)
        p.wait_line("restarting the private swtpm")
        p.wait_line("the TPM answers again")
        (new,) = swtpm_children(p.proc.pid)
        assert new.pid != tpm.pid
        status, _, _ = p.stop()
        assert status == 130
    finally:
        p.kill()


def test_stalled_external_tpm_answers_and_recovers(tcp_swtpm, tmp_path):
    """SIGSTOP the swtpm: a client's command is answered TPM_RC_RETRY after --timeout instead of
    hanging; after SIGCONT clients are served again (the connection is made anew)."""
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path, ("--timeout", "2"))
    tpm = psutil.Process(tcp_swtpm.proc.pid)
    try:
        p.tool("tpm2_getrandom", "--hex", "8")
        tpm.suspend()
        try:
            t0 = time.monotonic()
            r = p.tool("tpm2_getrandom", "--hex", "8", check=False)
            assert r.returncode != 0  # told, not left hanging (TIMEOUT would raise)
            assert "0x922" in r.stderr or "retry" in r.stderr.lower() or r.returncode != 0
            assert time.monotonic() - t0 < TIMEOUT
            p.wait_line("the TPM was lost", "reconnecting")
        finally:
            tpm.resume()
        _until_ok(p)
        p.wait_line("the TPM answers again")
        status, _, _ = p.stop()
        assert status == 130
    finally:
        if tpm.is_running() and tpm.status() == psutil.STATUS_STOPPED:
            tpm.resume()
        p.kill()


def test_external_tpm_gone_for_good_exits_1(tcp_swtpm, tmp_path):
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path, ("--timeout", "2"))
    try:
        p.tool("tpm2_getrandom", "--hex", "8")
        tcp_swtpm.proc.kill()
        tcp_swtpm.proc.wait()
        r = p.tool("tpm2_getrandom", "--hex", "8", check=False)
        assert r.returncode != 0
        assert p.proc.wait(TIMEOUT) == 1
        p._t.join(TIMEOUT)
        gone = [ln for ln in p.lines if "the TPM is gone" in ln]
        assert len(gone) == 1, p.lines  # said once, by the proxy's log (it was said again on exit)
        assert "Connection refused" in gone[0]
        assert not any("Traceback" in ln for ln in p.lines)
        assert p.capture.exists()  # what it recorded until then is written
    finally:
        p.kill()
