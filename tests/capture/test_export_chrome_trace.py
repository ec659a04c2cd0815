"""Chrome Trace Event Format export: read back with json and checked against the capture."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import pytest

from tests.helpers.paths import TESTS
from tpmtop.capture import CaptureError, load_capture
from tpmtop.exporters.chrome_trace import export_chrome_trace

SAMPLE = TESTS / "captures" / "sample-1.0.json"
TPMTOP = [sys.executable, "-m", "tpmtop"]


def check_trace(trace: dict, cap: dict) -> None:
    """The trace-event fields Perfetto and chrome://tracing rely on, and the capture's content."""
    evs = trace["traceEvents"]
    x = [e for e in evs if e["ph"] == "X"]
    meta = [e for e in evs if e["ph"] == "M"]
    for e in x:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and e["name"]
    cmds = [e for e in x if e["cat"] == "tpm"]
    ops = [e for e in x if e["cat"] == "op"]
    assert len(cmds) == len(cap["events"])
    # every command, in µs, with its name and decoded response code
    for e, c in zip(sorted(cmds, key=lambda e: e["ts"]), sorted(cap["events"], key=lambda c: c["t_ns"]), strict=False):
        assert e["ts"] == pytest.approx(c["t_ns"] / 1000, abs=1e-3)
        assert e["dur"] == pytest.approx(c["wire_ns"] / 1000, abs=1e-3)
        assert e["args"]["command"] == c["command"] and c["command"].endswith(e["name"])
        assert e["args"]["rc"] == (None if c["rc"] is None else f"0x{c['rc']:03x}")
        assert e["args"]["rc_text"] == c["rc_text"]
        assert ("cname" in e) == (c["rc"] != 0)
    # one track per engine/mode, named; the process named after the TPM
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    pairs = {(c["engine"], c["mode"]) for c in cap["events"] if c["engine"]}
    assert {f"{a} / {b}" for a, b in pairs} <= set(names.values())
    tids_by_pair = defaultdict(set)
    for e in cmds:
        if e["args"]["origin"] == "workload":
            tids_by_pair[names[e["tid"]]].add(e["tid"])
    assert all(len(t) == 1 for t in tids_by_pair.values())
    proc = [e for e in meta if e["name"] == "process_name"]
    assert len(proc) == 1 and cap["tpm"]["manufacturer"] in proc[0]["args"]["name"]
    # every operation is a parent slice: same track, and it spans each of its commands
    # (operations missing from "ops", e.g. the bench's warm-up, are derived from op_seq)
    in_ops = {o["op_seq"] for o in cap.get("ops", [])}
    derived = {c["op_seq"] for c in cap["events"] if c["op_seq"] is not None} - in_ops
    assert len(ops) == len(in_ops) + len(derived)
    assert {e["args"]["op_seq"] for e in ops if e["args"].get("derived")} == derived
    op_by_seq = {e["args"]["op_seq"]: e for e in ops}
    for e in cmds:
        seq = e["args"]["op_seq"]
        if seq is None:
            continue
        op = op_by_seq[seq]
        assert op["tid"] == e["tid"]
        assert op["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= op["ts"] + op["dur"] + 1e-3


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
