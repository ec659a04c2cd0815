"""Bad captures: every reader answers with one line naming the problem and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import TESTS
from tpmtop.capture import CaptureError, load_capture

BAD = sorted((TESTS / "bad_captures").glob("*.json"))
SAMPLE = TESTS / "captures" / "sample-1.0.json"
TPMTOP = [sys.executable, "-m", "tpmtop"]

# What the one line must mention for each committed file: the offending path or the cause.
EXPECT = {
    "array_top_level.json": "top level is a JSON array",
    "empty.json": "empty file",
    "missing_member.json": "tpm: 'manufacturer' is a required property",
    "negative_count.json": "runs[0].op_us.count: -1 is less than the minimum of 0",
    "negative_event_wire.json": "events[3].wire_ns: -5 is less than the minimum of 0",
    "negative_histogram_count.json": "runs[1].commands.TPM2_CC_PCR_Extend.histogram[0][1]: -2",
    "not_json.json": "not valid JSON",
    "not_utf8.json": "not UTF-8 text: byte 0xff at offset",
    "truncated.json": "unexpected end of file (truncated?)",
    "unknown_major_version.json": "unsupported capture version tpmtop.capture/2",
    "wrong_schema.json": 'not a tpmtop capture: "schema" is "tpmtop.profile/1"',
    # hostile numbers: Python's JSON reader takes them, a capture must not
    "nan_p50.json": "runs[0].op_us.p50: NaN is not a finite number",
    "infinity_bound.json": "runs[1].op_us.histogram[0][0]: Infinity is not a finite number",
    "overflow_1e400.json": "runs[0].wire_us.p99: 1e400 is not a finite number",
    "nan_event_wire.json": "events[2].wire_ns: -Infinity is not a finite number",
    "count_not_histogram.json": "runs[0].op_us.count: 35 but its histogram holds 30 samples",
}
BOOT_ROOT = TESTS / "fixtures" / "boot" / "laptop-6.10-hmac"


def test_every_bad_file_has_an_expectation():
    assert {p.name for p in BAD} == set(EXPECT)


def _assert_one_line(proc: subprocess.CompletedProcess, path: Path, expect: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith(f"tpmtop: {path}"), lines[0]
    assert expect in lines[0], lines[0]


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
@pytest.mark.parametrize("argv", [
    ["export", "{f}", "--format", "openmetrics", "-o", "{out}"],
    ["export", "{f}", "--format", "chrome-trace", "-o", "{out}"],
    ["export", "{f}", "--format", "chrome-trace", "-o", "-"],
    ["compare", str(SAMPLE), "{f}"],
    ["compare", "--json", str(SAMPLE), "{f}"],
    ["replay", "{f}"],
    ["profile", "from-capture", "{f}", "-o", "{out}"],
    ["boot", "--root", str(BOOT_ROOT), "--capture", "{f}"],
], ids=["openmetrics", "chrome-trace", "chrome-trace-stdout", "compare", "compare-json", "replay", "profile",
        "boot"])
def test_bad_capture_one_line_exit_2(path, argv, tmp_path, capfd, monkeypatch):
    """Every reader, every bad file: in-process (tpmtop.cli.main, the code `tpmtop` runs; 128
    interpreters cost ~25 s of the suite). One file goes through a real process per reader
    (`nan_p50.json`), for what only a process shows."""
    out = tmp_path / "out"
    args = [a.format(f=path, out=out) for a in argv]
    if path.name == "nan_p50.json":
        proc = subprocess.run(TPMTOP + args, capture_output=True, text=True, timeout=60)
    else:
        proc = _in_process(args, capfd, monkeypatch)
    _assert_one_line(proc, path, EXPECT[path.name])
    assert proc.stdout == ""
    assert not out.exists(), "a failed export must not leave an output file"
    assert os.listdir(tmp_path) == [], "nor a temporary file"


def _in_process(args: list[str], capfd, monkeypatch) -> subprocess.CompletedProcess:
    """``tpmtop ARGS`` as a call: its status, stdout and stderr; the signal handlers and the
    environment it sets are put back."""
    import signal

    from tpmtop.cli import main

    monkeypatch.setenv("TSS2_LOG", os.environ.get("TSS2_LOG", "all+NONE"))  # restored after the test
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    capfd.readouterr()
    try:
        rc = main(args)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(args, rc, out, err)


def test_bad_capture_api_raises_capture_error():
    for path in BAD:
        with pytest.raises(CaptureError) as exc:
            load_capture(path)
        assert EXPECT[path.name] in str(exc.value)


def _write_junk(path: Path, size: int, block: bytes) -> None:
    with open(path, "wb") as f:
        for _ in range(size // len(block)):
            f.write(block)


JUNK_SIZE = 200 * 1024 * 1024


def test_200mb_random_junk(tmp_path):
    junk = tmp_path / "junk.json"
    _write_junk(junk, JUNK_SIZE, os.urandom(1024 * 1024))
    proc = subprocess.run(TPMTOP + ["export", str(junk), "--format", "openmetrics", "-o", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    # Random bytes fail as UTF-8 or as JSON, whichever comes first.
    assert "not UTF-8" in proc.stderr or "not valid JSON" in proc.stderr


def test_200mb_of_one_json_string(tmp_path):
    # Valid UTF-8, valid start of a capture, then one 200 MB value: refused without reading
    # it all into memory (the limit for one member other than events/ops is 64 MiB).
    junk = tmp_path / "junk.json"
    with open(junk, "wb") as f:
        f.write(b'{"schema": "tpmtop.capture/1", "junk": "')
        block = b"x" * (1024 * 1024)
        for _ in range(JUNK_SIZE // len(block)):
            f.write(block)
        f.write(b'"}')
    proc = subprocess.run(TPMTOP + ["compare", str(junk), str(SAMPLE)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "over 64 MiB" in proc.stderr


def test_deep_nesting_is_one_line(tmp_path):
    junk = tmp_path / "deep.json"
    junk.write_text('{"schema": "tpmtop.capture/1", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(CaptureError, match="nested too deeply"):
        load_capture(junk)
