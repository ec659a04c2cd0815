"""Every CLI subcommand with missing, contradictory or malformed arguments (issue 8):
exit status 2, exactly one line on stderr, never a traceback unless --debug.

Each case is a real ``python -m tpmtop`` subprocess. None of them needs a TPM: every one
must be refused before a TPM is opened (those that would open one are given -T pointing
at a port nobody listens on, so reaching the TPM would fail with status 1, not 2).
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers.processes import REPO, run_tpmtop
from tpmtop.cli import SUBCOMMANDS

DEAD = "swtpm:host=127.0.0.1,port=9"  # discard port: nothing answers TPM commands there


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "garbage.json").write_bytes(b"\x00\xffnot json at all{")
    (d / "wrong.json").write_text(json.dumps({"schema": "tpmtop.capture/999", "runs": "x"}))
    (d / "empty.txt").write_text("")
    (d / "notrace.txt").write_text("hello\nthis is not a trace\n")
    return d


# (subcommand, args). "{d}" is the module's temp directory of bad files.
CASES = [
    # info / handles / flush
    ("info", ["--sim", "-T", DEAD]),                       # contradictory
    ("info", ["-T", "nosuchtcti:xyz"]),                    # malformed TCTI
    ("info", ["-T", "device:/dev/tpm0"]),                  # no resource manager, no --raw-device
    ("info", ["unexpected"]),
    ("handles", ["--sim", "--tcti", DEAD]),
    ("handles", ["--bogus-option"]),
    ("flush", []),                                         # missing handle
    ("flush", ["not-a-handle", "-T", DEAD]),
    ("flush", ["0x40000001", "-T", DEAD]),                 # a permanent handle cannot be flushed
    ("flush", ["0x80000000", "--read-only", "-T", DEAD]),
    # replay
    ("replay", []),
    ("replay", ["{d}/does-not-exist.json"]),
    ("replay", ["{d}/garbage.json"]),
    # boot
    ("boot", ["--extends", "-3"]),
    ("boot", ["--extends", "many"]),
    ("boot", ["--bpftrace-unit", "parsecs"]),
    ("boot", ["--trace", "{d}/does-not-exist.txt"]),
    ("boot", ["--trace", "{d}/notrace.txt"]),
    ("boot", ["--capture", "{d}/garbage.json"]),
    # compare
    ("compare", []),
    ("compare", ["{d}/does-not-exist.json"]),
    ("compare", ["{d}/garbage.json", "{d}/wrong.json"]),
    # export
    ("export", ["{d}/garbage.json"]),                      # missing --format and -o
    ("export", ["{d}/garbage.json", "-f", "svg", "-o", "{d}/out"]),
    ("export", ["{d}/garbage.json", "-f", "openmetrics", "-o", "{d}/out"]),
    ("export", ["{d}/wrong.json", "-f", "chrome-trace", "-o", "{d}/out"]),
    # bench
    ("bench", ["-T", DEAD, "--modes", "sometimes"]),
    ("bench", ["-T", DEAD, "--engine", "gpu"]),
    ("bench", ["-T", DEAD, "--op", "sign"]),
    ("bench", ["-T", DEAD, "-n", "0"]),
    ("bench", ["-T", DEAD, "-n", "lots"]),
    ("bench", ["-T", DEAD, "--events"]),                   # --events without --json
    ("bench", ["-T", DEAD, "--pcr", "7"]),                 # boot PCR without --allow-pcr
    ("bench", ["-T", DEAD, "--pcr", "99", "--allow-pcr"]),
    ("bench", ["-T", DEAD, "--read-only"]),
    ("bench", ["--sim", "-T", DEAD]),
    ("bench", ["-T", DEAD, "--profile", "no-such-chip"]),
    # profile
    ("profile", []),                                       # missing action
    ("profile", ["show"]),
    ("profile", ["show", "no-such-profile"]),
    ("profile", ["show", "{d}/garbage.json"]),
    ("profile", ["from-capture", "{d}/garbage.json"]),
    ("profile", ["from-trace", "{d}/notrace.txt"]),
    ("profile", ["record", "-T", DEAD, "--pcr", "3"]),
    ("profile", ["record", "--sim", "-T", DEAD]),
    # decode / import / kernel (issue 14)
    ("decode", []),
    ("decode", ["not-hex-nor-a-file"]),
    ("decode", ["80010000000c0000017b00"]),                 # cut short: partial decode
    ("decode", ["800100000014000000000008dbecfe91abd2b12f"]),  # a lone response without --cc
    ("import", ["{d}/garbage.json", "-o", "{d}/out.json"]),  # not a pcap
    ("import", ["{d}/does-not-exist.pcap", "-o", "{d}/out.json"]),
    ("import", ["{d}/garbage.json"]),                      # missing -o
    ("kernel", ["--from-trace", "{d}/does-not-exist.txt"]),
    ("kernel", ["--from-trace", "{d}/notrace.txt"]),
    ("kernel", ["--duration", "soon"]),
    # exporter (issue 27)
    ("exporter", ["--kernel-trace", "{d}/does-not-exist.txt"]),
    ("exporter", ["--no-kernel", "--listen", "127.0.0.1:http"]),
    ("exporter", ["--no-kernel", "--probe", "0"]),
    ("export", ["{d}/wrong.json", "-f", "pcapng", "-o", "{d}/out"]),
    ("import", ["{d}/garbage.json", "-o", "{d}/no-such-dir/out.json"]),  # output folder missing
    ("kernel", ["--from-trace", "{d}/notrace.txt", "--json", "{d}/no-such-dir/k.json"]),
    ("proxy", ["-T", DEAD, "--port", "65535"]),            # needs PORT and PORT+1
    ("proxy", ["-T", DEAD, "--protocol", "tcp"]),
    ("run", ["-T", DEAD]),                                 # nothing to run
    ("run", ["--sim", "--json", "{d}", "--", "true"]),      # --json a directory (CMD not found: 127)
    ("clients", ["--bogus"]),
    ("lab", ["--boots", "0"]),                             # issue 26: argument checks before any VM
    ("lab", ["--accel", "xen"]),
    # health (issue 42)
    ("health", ["--capture", "{d}/garbage.json", "--sim"]),  # not a capture
    ("health", ["--root", "{d}/no-such-dir"]),
    ("health", ["--ima-sample", "-1"]),
    ("health", ["--sim", "-T", DEAD]),
    # pcrs (issue 41)
    ("pcrs", ["--no-tpm", "--eventlog", "{d}/no-such-log"]),
    ("pcrs", ["--no-tpm", "--eventlog", "{d}/garbage.json", "--diff", "{d}/no-such-snapshot"]),
    ("pcrs", ["--sim", "-T", DEAD]),
    # whatif (issue 56): not a capture, no capture, unknown chip or mode
    ("whatif", []),
    ("whatif", ["{d}/garbage.json"]),
    ("whatif", ["{d}/wrong.json", "--chip", "no-such-chip"]),
    ("whatif", ["{d}/wrong.json", "--mode", "sometimes"]),
    # unlock (issue 53): a bad header, a missing snapshot, --trial under --read-only
    ("unlock", ["{d}/garbage.json", "-T", DEAD]),
    ("unlock", ["{d}/garbage.json", "--since", "{d}/no-such-snapshot", "-T", DEAD]),
    ("unlock", ["{d}/garbage.json", "--trial", "--read-only", "-T", DEAD]),
]

# Cases that exercise someone else's code and show a bug there (issue 8 lists them):
XFAIL: dict[tuple[str, tuple[str, ...]], str] = {}


def _id(case):
    return f"{case[0]}:{' '.join(case[1]).replace('{d}/', '')}"


def test_every_subcommand_is_covered():
    covered = {c for c, _ in CASES}
    assert set(SUBCOMMANDS) <= covered, f"no bad-argument case for {set(SUBCOMMANDS) - covered}"


def _params():
    out = []
    for c in CASES:
        reason = XFAIL.get((c[0], tuple(c[1])))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(c, id=_id(c), marks=marks))
    return out


@pytest.mark.parametrize("case", _params())
def test_bad_arguments_exit_2_one_line(case, files):
    cmd, args = case
    argv = [cmd] + [a.replace("{d}", str(files)) for a in args]
    r = run_tpmtop(*argv, timeout=60)
    lines = r.stderr.strip("\n").splitlines()
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(lines) == 1, r.stderr
    assert lines[0].strip(), r.stderr


def test_top_level_bad_arguments():
    for argv in (["no-such-subcommand"], ["--sim", "-T", DEAD], ["--mode", "sometimes"]):
        r = run_tpmtop(*argv)
        assert r.returncode == 2, (argv, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, (argv, r.stderr)
        assert "Traceback" not in r.stderr


# -- an internal error: one line pointing at --debug; --debug shows the traceback ---------------
# A real bug is not available on demand, so this injects one: run_info replaced, in a
# subprocess, by a function that raises a plain (non-tpmtop) exception. Everything else is
# the real main().
INJECT = ("import sys, tpmtop.cli.tpm_commands as m\n"
          "def boom(args):\n    raise RuntimeError('injected fault')\n"
          "m.run_info = boom\n"
          "from tpmtop.cli import main\n"
          "sys.exit(main(sys.argv[1:]))\n")


def _inject(*argv):
    import subprocess

    return subprocess.run([sys.executable, "-c", INJECT, *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=60)


def test_internal_error_says_run_with_debug():
    r = _inject("info", "-T", DEAD)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "run with --debug" in lines[0] and "injected fault" in lines[0]
    assert "Traceback" not in r.stderr


def test_internal_error_with_debug_shows_traceback():
    r = _inject("info", "-T", DEAD, "--debug")
    assert r.returncode != 0
    assert "Traceback" in r.stderr and "RuntimeError: injected fault" in r.stderr


def test_tpm_error_with_debug_shows_traceback():
    """A tpmtop error (nothing listening) is one line; with --debug, a traceback."""
    r = run_tpmtop("info", "-T", DEAD)
    assert r.returncode == 1, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = run_tpmtop("info", "-T", DEAD, "--debug")
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_top_level_profile_is_refused_where_it_would_be_ignored():
    r = run_tpmtop("--profile", "slb9670", "info", "--sim")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--profile" in r.stderr
    assert r.stdout == ""  # refused before any TPM was opened
