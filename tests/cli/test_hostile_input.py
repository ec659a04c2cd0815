"""Hostile files (issue 12, items 9, 10, 12): numbers JSON should not hold, nesting deep
enough to break a recursive parser, and strings that would drive the user's terminal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.captures import EVIL, write_evil_capture
from tests.helpers.paths import TESTS
from tests.helpers.processes import run_tpmtop

SAMPLE = TESTS / "captures" / "sample-1.0.json"
PROFILE = TESTS.parent / "tpmtop" / "profiles" / "slb9670.json"
BOOT_ROOT = TESTS / "fixtures" / "boot" / "laptop-6.10-hmac"
BENCH = ["bench", "--sim", "-n", "3", "--warmup", "0", "--engine", "native", "--modes", "none", "-q"]



def _strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"bare {name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def _one_line(proc, status: int) -> str:
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# -- compare --json: strict JSON whatever the ratios ----------------------------------------------

def test_compare_json_never_emits_nan_or_infinity(tmp_path):
    a, b = json.loads(SAMPLE.read_text()), json.loads(SAMPLE.read_text())
    # Valid, finite figures whose ratio overflows a double.
    a["runs"][0]["op_us"]["p50"] = 1e-300
    b["runs"][0]["op_us"]["p50"] = 1e300
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    proc = run_tpmtop("compare", "--json", str(pa), str(pb))
    assert proc.returncode == 0, proc.stderr
    rows = _strict_json(proc.stdout)["comparisons"][0]["rows"]
    assert rows[0]["p50"] == [1e-300, 1e300] and rows[0]["p50_ratio"] is None


# -- profiles: refused before anything is opened -----------------------------------------------

def _profile_with(tmp_path: Path, literal: str) -> Path:
    text = PROFILE.read_text()
    doc = json.loads(text)
    cmd = next(iter(doc["commands"]))
    variant = next(iter(doc["commands"][cmd]))
    doc["commands"][cmd][variant]["median_us"] = 424242.5
    p = tmp_path / "p.json"
    p.write_text(json.dumps(doc, indent=1).replace("424242.5", literal))
    return p


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_profile_with_a_non_finite_figure_is_refused_before_the_tpm(tmp_path, literal):
    p = _profile_with(tmp_path, literal)
    proc = run_tpmtop(*BENCH, "--profile", str(p), timeout=120)
    line = _one_line(proc, 2)
    assert "not a finite number" in line and str(p) in line
    assert proc.stdout == ""  # no "# IBM SWTPM …" line: no swtpm was started


def test_deeply_nested_profile_is_bad_input(tmp_path):
    p = tmp_path / "deep.json"
    p.write_text('{"schema": "tpmtop.profile/1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    proc = run_tpmtop(*BENCH, "--profile", str(p), timeout=120)
    assert "nested too deeply" in _one_line(proc, 2)


def test_moderately_nested_profile_is_bad_input(tmp_path):
    # Deep enough for jsonschema's recursive walk, not for the C JSON parser.
    p = tmp_path / "deep.json"
    p.write_text('{"schema": "tpmtop.profile/1", "name": "x", "chip": {}, "commands": {"PCR_Extend": '
                 + '{"any": ' * 2000 + "1" + "}" * 2000 + "}}")
    proc = run_tpmtop(*BENCH, "--profile", str(p), timeout=120)
    assert _one_line(proc, 2).startswith(f"tpmtop: profile {p}")


# -- terminal escapes from files ---------------------------------------------------------------

@pytest.fixture
def evil_capture(tmp_path) -> Path:
    return write_evil_capture(tmp_path, names=True)


def _no_raw_controls(text: str) -> None:
    for ch in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert ch not in text, f"raw {ch!r} reached the terminal"


def test_compare_shows_capture_strings_escaped(evil_capture):
    proc = run_tpmtop("compare", str(evil_capture), str(evil_capture))
    assert proc.returncode == 0, proc.stderr
    _no_raw_controls(proc.stdout + proc.stderr)
    assert "\\x1b]0;owned\\x07" in proc.stdout  # visible, not obeyed


def test_compare_json_is_escaped_json(evil_capture):
    proc = run_tpmtop("compare", "--json", str(evil_capture), str(evil_capture))
    assert proc.returncode == 0, proc.stderr
    _no_raw_controls(proc.stdout)
    assert _strict_json(proc.stdout)["comparisons"][0]["rows"]


def test_boot_capture_report_is_escaped(evil_capture):
    proc = run_tpmtop("boot", "--root", str(BOOT_ROOT), "--capture", str(evil_capture))
    assert proc.returncode == 0, proc.stderr
    _no_raw_controls(proc.stdout + proc.stderr)
    proc = run_tpmtop("boot", "--root", str(BOOT_ROOT), "--capture", str(evil_capture), "--json")
    assert proc.returncode == 0, proc.stderr
    _no_raw_controls(proc.stdout)
    # The capture's TPM names reach the report (cost sources) made safe, not raw.
    assert "IBM\\x1b]0;owned" in proc.stdout.replace("\\\\", "\\")


def test_profile_from_capture_output_and_notices_are_escaped(tmp_path):
    doc = json.loads(write_evil_capture(tmp_path, names=False).read_text())
    doc["tpm"]["profile"] = "slb" + EVIL  # quoted in a notice
    p = tmp_path / "evil2.json"
    p.write_text(json.dumps(doc, ensure_ascii=False))
    proc = run_tpmtop("profile", "from-capture", str(p))
    assert proc.returncode == 0, proc.stderr
    _no_raw_controls(proc.stdout + proc.stderr)
    assert json.loads(proc.stdout)["chip"]["manufacturer"].startswith("IBM\\x1b")


def test_export_notice_and_errors_are_escaped(evil_capture, tmp_path):
    proc = run_tpmtop("export", str(evil_capture), "-f", "chrome-trace", "-o", str(tmp_path / "t.json"))
    assert proc.returncode == 0, proc.stderr
    _no_raw_controls(proc.stderr)
    # A bad member name in an error line (jsonschema quotes it raw in the path)
    doc = json.loads(evil_capture.read_text())
    doc["runs"][0]["commands"]["TPM2_CC_PCR_Extend" + EVIL]["count"] = -1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc, ensure_ascii=False))
    proc = run_tpmtop("compare", str(bad), str(SAMPLE))
    line = _one_line(proc, 2)
    _no_raw_controls(line)
    assert "\\x1b]0;owned" in line


def test_replay_source_strings_are_escaped(evil_capture):
    from tpmtop.sources.replay import ReplaySource, load
    from tpmtop.viewmodel.rows.stream import captured_rows

    src = ReplaySource(load(evil_capture), evil_capture)
    stream = captured_rows(src.captured_stream())
    shown = json.dumps([src.tpm, src.host, [r.engine for r in src.runs()],
                        [list(r.commands) for r in src.runs()], [row.command for row in stream]],
                       ensure_ascii=False)
    _no_raw_controls(shown)
    assert stream and "\\x1b" in stream[0].command


def test_textsafe_leaves_plain_text_alone():
    from tpmtop.textsafe import safe, safe_tree

    plain = "TPM2_CC_PCR_Extend 6,360 µs ×1.05 IFX SLB9670 — ok"
    assert safe(plain) == plain
    assert safe_tree({"a": [plain, 1, 2.5, None, True]}) == {"a": [plain, 1, 2.5, None, True]}
    assert safe("a\tb\nc\x00") == "a\\x09b\\x0ac\\x00"


@pytest.mark.parametrize("number", ["1e-400", "5.0"])
def test_a_float_where_an_integer_belongs_is_refused(tmp_path, number):
    """JSON Schema's "integer" also admits 5.0 (and 1e-400 reads as 0.0); every reader that
    counts with such a member then failed on a float (profile from-capture: an internal error).
    Found by test_fuzz_cli; now one line, exit 2, naming the member."""
    text = SAMPLE.read_text()
    bad = tmp_path / "bad.json"
    bad.write_text(re.sub(r'"ops": \d+', f'"ops": {number}', text, count=1))
    for argv in (["profile", "from-capture", str(bad), "-o", str(tmp_path / "p.json")],
                 ["compare", str(SAMPLE), str(bad)]):
        proc = run_tpmtop(*argv)
        line = _one_line(proc, 2)
        assert "runs[0].ops" in line and "integer" in line
