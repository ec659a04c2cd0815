"""A busy or silent TPM (issue 12, item 13): every connection has a response timeout
(--timeout), and running out of it is one line naming the TPM, exit status 1.

Real swtpm processes: a standalone swtpm serves one connection at a time, so a test that
holds it makes it busy for everyone else; a SIGSTOPped swtpm is a TPM that went silent.
"""

from __future__ import annotations

import json
import os
import signal
import socket

import pytest

from tests.helpers.processes import TcpSwtpm, run_tpmtop


@pytest.fixture
def swtpm():
    s = TcpSwtpm()
    try:
        yield s
    finally:
        try:
            os.kill(s.proc.pid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        except ProcessLookupError:
            pass
        s.stop()


def _one_line(r) -> str:
    lines = r.stderr.strip("\n").splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize("cmd", [["handles"], ["info"], ["bench", "-n", "5", "--engine", "native"]])
def test_busy_swtpm_is_named_and_exits_1(swtpm, cmd):
    hold = socket.create_connection(("127.0.0.1", swtpm.port))  # swtpm's one client: us
    try:
        r = run_tpmtop(*cmd, "-T", swtpm.tcti, "--timeout", "2", timeout=120)
    finally:
        hold.close()
    assert r.returncode == 1, r.stderr
    line = _one_line(r)
    assert f"swtpm 127.0.0.1:{swtpm.port}" in line and "did not answer" in line and "busy" in line
    assert "within 2 s" in line and "--timeout" in line
    assert r.stdout == ""
    # Once released the TPM answers again, and the timed-out run left nothing behind.
    r = run_tpmtop("handles", "--json", "-T", swtpm.tcti, timeout=120)
    assert r.returncode == 0, r.stderr
    handles = json.loads(r.stdout)["handles"]
    assert not [h for h in handles if not h["handle"].startswith("0x81")], handles


def test_silent_swtpm_is_named_and_exits_1(swtpm):
    os.kill(swtpm.proc.pid, signal.SIGSTOP)  # connects (the kernel accepts), never answers
    try:
        r = run_tpmtop("info", "-T", swtpm.tcti, "--timeout", "1.5", timeout=120)
    finally:
        os.kill(swtpm.proc.pid, signal.SIGCONT)
    assert r.returncode == 1, r.stderr
    line = _one_line(r)
    assert f"swtpm 127.0.0.1:{swtpm.port}" in line and "did not answer GetCapability within 1.5 s" in line


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "soon"])
def test_bad_timeout_is_usage(bad):
    r = run_tpmtop("handles", "--sim", "--timeout", bad)
    assert r.returncode == 2
    assert "--timeout" in _one_line(r)


def test_timeout_is_generous_enough_for_a_working_tpm(swtpm):
    r = run_tpmtop("handles", "-T", swtpm.tcti, "--timeout", "30", timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("engine", ["native", "esys"])
def test_tpm_silent_mid_run_stops_the_bench_with_its_name(swtpm, bench, engine):
    """A TPM that stops answering in the middle of a run, under either crypto engine (ESAPI
    sees only a TCTI failure: the line is still the transport's)."""
    b = bench("-T", swtpm.tcti, "--engine", engine, "-n", "1000000", "--warmup", "0", "--timeout", "2", "-q")
    b.working(tpm_pid=swtpm.proc.pid, cpu_s=0.2)
    os.kill(swtpm.proc.pid, signal.SIGSTOP)
    rc, out, err = b.finish()
    assert rc == 1, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"tpmtop: stopped: swtpm 127.0.0.1:{swtpm.port} did not answer ") and "within 2 s" in err
    assert engine in out  # what was completed is kept
