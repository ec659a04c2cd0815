"""Issue 24 item 11: every long headless job shows how far it is, with a rate and the time
left, on a terminal (stderr a TTY: here a real pseudo-terminal from ``pty``), and prints nothing
of the kind when stderr is piped. The TPM is a real swtpm (``--sim``)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.processes import run_on_pty, run_tpmtop

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("progress") / "run.json"
    r = run_tpmtop("bench", "--sim", "-n", "20", "--warmup", "0", "--modes", "none,per-command",
                   "--engine", "native", "--events", "--json", str(path))
    assert r.returncode == 0, r.stderr
    return path


def test_piped_bench_prints_no_progress(capture):
    """The fixture's bench ran with stderr piped: run again, look at every byte of stderr."""
    r = run_tpmtop("bench", "--sim", "-n", "20", "--warmup", "0", "--modes", "none",
                   "--engine", "native", "--events", "--json", str(capture.parent / "piped.json"))
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"tpmtop: capture written to {capture.parent / 'piped.json'}\n"


@pytest.mark.parametrize("argv", [["compare", "{c}", "{c}"], ["export", "{c}", "--format", "openmetrics", "-o",
                                                                "{d}/m.prom"]])
def test_piped_readers_print_no_progress(capture, argv):
    r = run_tpmtop(*[a.format(c=capture, d=capture.parent) for a in argv])
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "ETA" not in r.stderr and "reading" not in r.stderr


def test_bench_on_a_terminal_shows_rate_and_time_left(tmp_path):
    out = tmp_path / "t.json"
    status, tty, stdout = run_on_pty("bench", "--sim", "-n", "40", "--warmup", "0", "--modes", "none,per-command",
                                     "--engine", "native", "--events", "--json", str(out))
    assert status == 0, tty
    assert re.search(r"bench .*\d+/80 [\d,?]+ ops/s .*ETA", tty), tty
    assert re.search(r"writing the capture .* lines/s .*ETA", tty), tty
    assert f"capture written to {out}" in tty
    assert "ETA" not in stdout and "\r" not in stdout  # the report on stdout stays clean


def test_bench_quiet_on_a_terminal_draws_nothing(tmp_path):
    status, tty, _ = run_on_pty("bench", "--sim", "-n", "10", "--warmup", "0", "--modes", "none",
                                "--engine", "native", "-q")
    assert status == 0, tty
    assert "ETA" not in tty and "ops/s" not in tty


@pytest.mark.parametrize("argv", [["compare", "{c}", "{c}"],
                                  ["export", "{c}", "--format", "chrome-trace", "-o", "{d}/t.json"]])
def test_readers_on_a_terminal_show_progress(capture, argv):
    status, tty, _ = run_on_pty(*[a.format(c=capture, d=capture.parent) for a in argv])
    assert status == 0, tty
    assert re.search(r"reading run\.json .*ETA", tty), tty
