"""The chrome-trace export's one-line notice counts what the trace holds: operations from the
capture's "ops" array plus those derived from the events' op_seq, saying how many were
derived (it once said "160 operations (derived from op_seq)" when 160 came from "ops" and
only 16 were derived)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.helpers.paths import TESTS
from tests.helpers.processes import run_tpmtop

SAMPLE = TESTS / "captures" / "sample-1.0.json"


def _notice(proc) -> tuple[int, int | None]:
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"(\d+) operations(?: \((\d+) of them derived from op_seq\)| \(derived from op_seq\))?",
                  proc.stderr)
    assert m, proc.stderr
    return int(m.group(1)), (int(m.group(2)) if m.group(2) else None)


def _op_slices(trace: Path) -> tuple[int, int]:
    evs = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "op"]
    return len(evs), sum(1 for e in evs if e["args"].get("derived"))


def test_notice_counts_listed_and_derived_operations(tmp_path):
    doc = json.loads(SAMPLE.read_text())
    seqs = sorted({o["op_seq"] for o in doc["ops"]})
    dropped = set(seqs[:5])  # five operations only the events know (like a bench's warm-up)
    doc["ops"] = [o for o in doc["ops"] if o["op_seq"] not in dropped]
    cap = tmp_path / "cap.json"
    cap.write_text(json.dumps(doc))
    out = tmp_path / "t.json"
    total, derived = _notice(run_tpmtop("export", str(cap), "-f", "chrome-trace", "-o", str(out)))
    slices, derived_slices = _op_slices(out)
    assert derived_slices == len(dropped) == derived
    assert total == slices == len(doc["ops"]) + len(dropped)


def test_notice_without_an_ops_array(tmp_path):
    doc = json.loads(SAMPLE.read_text())
    del doc["ops"]
    cap = tmp_path / "cap.json"
    cap.write_text(json.dumps(doc))
    out = tmp_path / "t.json"
    proc = run_tpmtop("export", str(cap), "-f", "chrome-trace", "-o", str(out))
    total, _ = _notice(proc)
    assert "(derived from op_seq)" in proc.stderr
    assert total == _op_slices(out)[0] == _op_slices(out)[1] > 0
