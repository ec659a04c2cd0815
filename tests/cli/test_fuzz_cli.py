"""Hostile captures end to end: every command that reads a capture (compare, compare --json,
replay, profile from-capture, boot --capture), run through tpmtop's real entry point
(``tpmtop.cli.main``, in this process so that hypothesis can afford enough examples).

The rule: a capture the reader refuses makes every command exit 2 with one line naming the
file; a capture it accepts never makes one exit 1 (an "internal error") — 0, or 2 when the
command has a reason of its own (no per-command latencies, an implausible extend cost), and
compare --json output is always strict JSON.

Examples: 60 per strategy (about 180 captures x 5 commands); the file runs in ~10 s on a
2-core VM.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.mutations import EDITS, _mutate, _mutate_json
from tests.helpers.paths import TESTS
from tpmtop.capture import CaptureError, load_capture
from tpmtop.cli import main

SAMPLE = TESTS / "captures" / "sample-1.0.json"
SAMPLE_DOC = json.loads(SAMPLE.read_text())
BOOT_ROOT = TESTS / "fixtures" / "boot" / "laptop-6.10-hmac"
SET = dict(deadline=None, max_examples=60,
           suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

HOSTILE_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1e-400", "-1", "-0.0", "1.5",
                   "99999999999999999999999", "1e308", "0", "null", '"7"', "[]", "{}", "true"]
_SUMMARY = re.compile(r'"(?:count|p50|p90|p99|max|mean|ops)": (-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)')
_NUMBER = re.compile(r"(?<=[:\[,\s])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?=[,\]\}\s])")


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def _strict(text: str):
    def refuse(name):
        raise AssertionError(f"bare {name} in compare --json output")

    return json.loads(text, parse_constant=refuse)


def _check_all(capsys, path: Path, tmp: Path) -> None:
    try:
        load_capture(path)
        valid = True
    except CaptureError:
        valid = False
    commands = {
        "compare": ["compare", str(SAMPLE), str(path)],
        "compare-json": ["compare", "--json", str(path), str(SAMPLE)],
        "profile": ["profile", "from-capture", str(path), "-o", str(tmp / "p.json"), "--force"],
        "boot": ["boot", "--root", str(BOOT_ROOT), "--capture", str(path)],
    }
    if not valid:
        commands["replay"] = ["replay", str(path)]  # refused before the dashboard starts
    for name, argv in commands.items():
        status, out, err = _run(capsys, argv)
        lines = err.strip().splitlines()
        assert "Traceback" not in err and "internal error" not in err, (name, err)
        if not valid:
            assert status == 2, (name, status, err)
            assert len(lines) == 1 and lines[0].startswith(f"tpmtop: {path}"), (name, err)
            assert out == "", name
            continue
        assert status in (0, 2), (name, status, err)
        if status == 2:
            assert len(lines) == 1, (name, err)
        if name == "compare-json" and status == 0:
            _strict(out)
    if valid:
        from tpmtop.sources.replay import ReplaySource, load

        ReplaySource(load(path), path)  # what `tpmtop replay` builds before drawing


def _write(tmp_path_factory, data: bytes) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("fuzzcli")
    p = d / "cap.json"
    p.write_bytes(data)
    return p, d


@settings(**SET)
@given(data=st.data())
def test_mutated_document_end_to_end(tmp_path_factory, capsys, data):
    doc = _mutate_json(SAMPLE_DOC, data)
    _check_all(capsys, *_write(tmp_path_factory, json.dumps(doc).encode()))


@settings(**SET)
@given(data=st.data())
def test_hostile_numbers_end_to_end(tmp_path_factory, capsys, data):
    text = json.dumps(SAMPLE_DOC, indent=1)
    for _ in range(data.draw(st.integers(1, 3))):
        # Mostly the runs (float summaries, histograms: where a schema lets NaN through),
        # sometimes the events and ops (integers).
        where = data.draw(st.sampled_from(["summary", "summary", "runs", "anywhere"]))
        if where == "summary":  # p50, p99, count …: what compare, boot and profiles compute with
            spots = [m.span(1) for m in _SUMMARY.finditer(text)]
        else:
            head = text.find('\n "ops": [') if where == "runs" else -1  # the top-level array
            spots = [m.span() for m in _NUMBER.finditer(text, 0, head if head > 0 else len(text))]
        if not spots:  # an earlier replacement took the last number there
            continue
        a, b = data.draw(st.sampled_from(spots))
        lit = data.draw(st.sampled_from(HOSTILE_NUMBERS))
        text = text[:a] + lit + text[b:]
    _check_all(capsys, *_write(tmp_path_factory, text.encode()))


@settings(**SET)
@given(edits=EDITS)
def test_mutated_bytes_end_to_end(tmp_path_factory, capsys, edits):
    raw = json.dumps(SAMPLE_DOC).encode()
    _check_all(capsys, *_write(tmp_path_factory, _mutate(raw, edits)))


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "1e400"])
def test_the_hostile_numbers_are_refused(tmp_path, capsys, literal):
    """The strategies above could pass without ever hitting a refused capture."""
    text = json.dumps(SAMPLE_DOC, indent=1).replace('"p50": ', f'"p50": {literal}, "was": ', 1)
    p = tmp_path / "cap.json"
    p.write_text(text)
    with pytest.raises(CaptureError):
        load_capture(p)
    _check_all(capsys, p, tmp_path)
