"""Chrome Trace Event Format export: read back with json and checked against the capture."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.exports import check_trace
from tests.helpers.paths import TESTS
from tpmtop.capture import CaptureError, load_capture
from tpmtop.export.chrome_trace import export_chrome_trace

SAMPLE = TESTS / "captures" / "sample-1.0.json"
TPMTOP = [sys.executable, "-m", "tpmtop"]


def test_sample_exports_with_ops(tmp_path):
    out = tmp_path / "trace.json"
    counts = export_chrome_trace(SAMPLE, out)
    cap = load_capture(SAMPLE)
    assert counts["events"] == len(cap["events"]) and counts["ops"] == len(cap["ops"])
    check_trace(json.loads(out.read_text()), cap)


def test_ops_are_derived_from_op_seq_without_an_ops_array(tmp_path):
    cap = json.loads(SAMPLE.read_text())
    del cap["ops"]
    src = tmp_path / "noops.json"
    src.write_text(json.dumps(cap))
    out = tmp_path / "trace.json"
    counts = export_chrome_trace(src, out)
    assert counts["ops"] == 0 and counts["derived_ops"] > 0
    check_trace(json.loads(out.read_text()), cap)


def test_ops_after_events_and_partly_missing(tmp_path):
    """A hand-written file: "ops" after "events", and some operations missing from it."""
    cap = json.loads(SAMPLE.read_text())
    ops = cap.pop("ops")
    cap["ops"] = ops[5:]  # the first five operations are only in the events
    src = tmp_path / "late_ops.json"
    src.write_text(json.dumps(cap))
    out = tmp_path / "trace.json"
    counts = export_chrome_trace(src, out)
    assert counts["ops"] == len(ops) - 5 and counts["derived_ops"] == 5
    check_trace(json.loads(out.read_text()), cap)


def test_no_events_is_exit_2_and_no_file(tmp_path):
    cap = json.loads(SAMPLE.read_text())
    del cap["events"]
    src = tmp_path / "noevents.json"
    src.write_text(json.dumps(cap))
    out = tmp_path / "trace.json"
    out.write_text("previous")
    with pytest.raises(CaptureError, match="has no events"):
        export_chrome_trace(src, out)
    proc = subprocess.run(TPMTOP + ["export", str(src), "--format", "chrome-trace", "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "no events" in proc.stderr and "--events" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert out.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noevents.json", "trace.json"]


def test_an_error_in_the_middle_of_the_events_leaves_no_output(tmp_path):
    text = SAMPLE.read_text()
    cap = json.loads(text)
    cap["events"][40]["handles"] = ["0x123"]
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(cap))
    with pytest.raises(CaptureError, match=r"events\[40\]\.handles\[0\]"):
        export_chrome_trace(src, tmp_path / "trace.json")
    assert not (tmp_path / "trace.json").exists()
