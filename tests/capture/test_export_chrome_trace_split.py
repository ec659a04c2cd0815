"""The chrome-trace export split across two processes: a forked helper converts the second
part of the events array. Whatever happens to the helper, the trace is the one a single
process writes, and errors keep their real place."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tpmtop.export.chrome_trace as ct
from tests.helpers.captures import make_capture
from tests.helpers.exports import check_trace
from tests.helpers.paths import TESTS
from tpmtop.capture import CaptureError, load_capture
from tpmtop.export.chrome_trace import export_chrome_trace

SAMPLE = TESTS / "captures" / "sample-1.0.json"


def event_line_offsets(path: Path) -> list[int]:
    data = path.read_bytes()
    out, i = [], data.find(b'\n{"t_ns":')
    while i >= 0:
        out.append(i + 1)
        i = data.find(b'\n{"t_ns":', i + 1)
    return out


@pytest.fixture
def split(monkeypatch):
    """split(path, k): the next export hands the events from the k-th on to a helper; returns
    a list that records whether the helper's part was taken (True) or redone (False)."""
    joins: list[bool] = []
    orig_join = ct._Export.join

    def join(self, *a):
        ok = orig_join(self, *a)
        joins.append(ok)
        return ok

    monkeypatch.setattr(ct._Export, "join", join)
    monkeypatch.setattr(ct, "_have_spare_core", lambda: True)
    monkeypatch.setattr(ct, "_SPLIT_MIN_BYTES", 0)

    def at(path: Path, k: int, delta: int = 0):
        off = event_line_offsets(path)[k] + delta
        monkeypatch.setattr(ct, "_line_start", lambda p, a: off)
        return joins

    return at


def serial(monkeypatch, src: Path, out: Path) -> dict:
    with monkeypatch.context() as m:
        m.setattr(ct, "_have_spare_core", lambda: False)
        return export_chrome_trace(src, out)


def events_of(path: Path) -> list[str]:
    # Derived operations may come in another order; nothing else may differ.
    return sorted(json.dumps(e, sort_keys=True) for e in json.loads(path.read_text())["traceEvents"])


@pytest.mark.parametrize("k", [1, 57, 150])
def test_split_output_is_the_single_process_output(tmp_path, monkeypatch, split, k):
    src = make_capture(tmp_path / "cap.json")
    counts1 = serial(monkeypatch, src, tmp_path / "one.json")
    joins = split(src, k)
    counts2 = export_chrome_trace(src, tmp_path / "two.json")
    assert joins == [True]
    assert counts1 == counts2
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()
    check_trace(json.loads((tmp_path / "two.json").read_text()), load_capture(src))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap.json", "one.json", "two.json"]


@pytest.mark.parametrize("k", [3, 100, 101, 102])  # 100..102: around an operation of 3 commands
def test_derived_operations_across_the_split(tmp_path, monkeypatch, split, k):
    src = make_capture(tmp_path / "cap.json", with_ops=False, modes_from=0)
    counts1 = serial(monkeypatch, src, tmp_path / "one.json")
    joins = split(src, k)
    counts2 = export_chrome_trace(src, tmp_path / "two.json")
    # With no "ops" array the parent knows no track when it forks: the helper's part is taken
    # only if it happens to number the tracks as the parent does.
    assert len(joins) == 1
    assert counts1 == counts2 and counts1["derived_ops"] == 120
    assert events_of(tmp_path / "one.json") == events_of(tmp_path / "two.json")
    check_trace(json.loads((tmp_path / "two.json").read_text()), load_capture(src))


def test_derived_operation_spanning_the_split_is_one_slice(tmp_path, monkeypatch, split):
    # All "none" until op 200, so both parts number that one track 1: the helper's part is taken.
    src = make_capture(tmp_path / "cap.json", n_ops=300, with_ops=False, modes_from=400)
    serial(monkeypatch, src, tmp_path / "one.json")
    offsets = event_line_offsets(src)
    cap = load_capture(src)
    # the second command of an operation of three
    k = next(i for i, e in enumerate(cap["events"]) if i and e["op_seq"] == cap["events"][i - 1]["op_seq"]
             and e["op_seq"] % 3 == 2 and i > 100)
    assert offsets[k]
    joins = split(src, k)
    export_chrome_trace(src, tmp_path / "two.json")
    assert joins == [True]
    assert events_of(tmp_path / "one.json") == events_of(tmp_path / "two.json")
    seq = cap["events"][k]["op_seq"]
    ops = [e for e in json.loads((tmp_path / "two.json").read_text())["traceEvents"]
           if e.get("cat") == "op" and e["args"]["op_seq"] == seq]
    assert len(ops) == 1 and ops[0]["args"]["commands"] == 3


def test_a_new_track_in_the_helpers_part(tmp_path, monkeypatch, split):
    src = make_capture(tmp_path / "cap.json", with_ops=True)  # the poll event comes last
    serial(monkeypatch, src, tmp_path / "one.json")
    joins = split(src, 200)
    export_chrome_trace(src, tmp_path / "two.json")
    assert joins == [True]
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


def test_new_tracks_in_both_parts_are_redone_by_the_parent(tmp_path, monkeypatch, split):
    # no ops: the parent meets tracks after the fork, and the helper meets "saved" first
    src = make_capture(tmp_path / "cap.json", with_ops=False, late_mode="saved")
    serial(monkeypatch, src, tmp_path / "one.json")
    joins = split(src, 200)
    export_chrome_trace(src, tmp_path / "two.json")
    assert joins == [False]
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


@pytest.mark.parametrize("delta", [5, -1])
def test_a_split_point_that_is_no_element_start(tmp_path, monkeypatch, split, delta):
    src = make_capture(tmp_path / "cap.json")
    serial(monkeypatch, src, tmp_path / "one.json")
    joins = split(src, 100, delta)
    export_chrome_trace(src, tmp_path / "two.json")
    # inside an event: the parent needs the text past the split point mid-element and goes on
    # alone; on the newline before an event: a valid place between two events, taken
    assert joins == ([] if delta > 0 else [True])
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


def test_a_failing_helper_changes_nothing(tmp_path, monkeypatch, split):
    src = make_capture(tmp_path / "cap.json")
    serial(monkeypatch, src, tmp_path / "one.json")
    joins = split(src, 100)
    monkeypatch.setattr(ct._Export, "run_helper", lambda *a: 1 / 0)
    export_chrome_trace(src, tmp_path / "two.json")
    assert joins == []
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


@pytest.mark.parametrize("bad", [20, 150, 229])
def test_an_invalid_event_keeps_its_place(tmp_path, monkeypatch, split, bad):
    src = make_capture(tmp_path / "cap.json")
    text = src.read_text().split("\n")
    line = next(i for i, t in enumerate(text) if t.startswith('{"t_ns":')) + bad
    text[line] = text[line].replace('"0x00000010"', '"0x10"')
    src.write_text("\n".join(text))
    with pytest.raises(CaptureError) as one:
        serial(monkeypatch, src, tmp_path / "trace.json")
    assert f"events[{bad}].handles[0]" in str(one.value) and f"line {line + 1} " in str(one.value)
    split(src, 100)
    with pytest.raises(CaptureError) as two:
        export_chrome_trace(src, tmp_path / "trace.json")
    assert str(two.value) == str(one.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap.json"]


def test_cli_on_a_capture_big_enough_to_split(tmp_path):
    """The real thing, no monkeypatching: a capture over the split threshold."""
    src = tmp_path / "cap.json"
    make_capture(src, n_ops=int(ct._SPLIT_MIN_BYTES / 700) + 1000)
    out = tmp_path / "trace.json"
    proc = subprocess.run([sys.executable, "-m", "tpmtop", "export", str(src), "--format", "chrome-trace",
                           "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    trace = json.loads(out.read_text())
    cap = load_capture(src)
    check_trace(trace, cap)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap.json", "trace.json"]
