"""bench -> capture -> validate -> compare -> export (both formats) -> independent parsers.

Runs the real `tpmtop bench --sim` (a private swtpm); nothing is mocked."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from tests.helpers.exports import check_metrics, check_trace
from tpmtop.capture import load_capture

TPMTOP = [sys.executable, "-m", "tpmtop"]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tpmtop.cli.bench") is None,
                                reason="tpmtop.cli.bench (issue 3) is not in this tree")


@pytest.fixture(scope="module")
def bench_capture(bench_captures, tmp_path_factory):
    return bench_captures.copy("extend-none-reuse", tmp_path_factory.mktemp("rt"))


def test_bench_capture_validates_and_has_events(bench_capture):
    cap = load_capture(bench_capture)  # validates against the schema
    assert cap["schema"] == "tpmtop.capture/1"
    modes = {r["mode"] for r in cap["runs"]}
    assert modes == {"none", "reuse"}
    ops = [o for o in cap["ops"]]
    assert len(ops) >= 20 * len(cap["runs"])
    assert any(e["command"] == "TPM2_CC_PCR_Extend" for e in cap["events"])
    assert all(e["t_ns"] >= 0 for e in cap["events"])


def test_compare_a_bench_capture_with_itself(bench_capture):
    proc = subprocess.run(TPMTOP + ["compare", str(bench_capture), str(bench_capture), "--json"],
                          capture_output=True, text=True, check=True)
    rows = json.loads(proc.stdout)["comparisons"][0]["rows"]
    assert rows and all(r["p50_ratio"] == 1.0 and r["p50_verdict"] == "within noise" for r in rows)


def test_export_chrome_trace_of_a_bench_capture(bench_capture, tmp_path):
    out = tmp_path / "trace.json"
    subprocess.run(TPMTOP + ["export", str(bench_capture), "--format", "chrome-trace", "-o", str(out)],
                   check=True, capture_output=True)
    check_trace(json.loads(out.read_text()), load_capture(bench_capture))


def test_export_openmetrics_of_a_bench_capture(bench_capture, tmp_path):
    out = tmp_path / "tpmtop.prom"
    subprocess.run(TPMTOP + ["export", str(bench_capture), "--format", "openmetrics", "-o", str(out)],
                   check=True, capture_output=True)
    cap = load_capture(bench_capture)
    check_metrics(out.read_text(), cap)
    fams = {f.name for f in parse_openmetrics(out.read_text())}
    assert {"tpmtop_operation_seconds", "tpmtop_command_seconds", "tpmtop_commands_per_operation"} <= fams


def test_events_include_the_set_up_and_the_clean_up(bench_captures, tmp_path):
    """bench --events keeps every command the bench sent, not only the timed operations': a
    reuse run's kept session is started (set-up, outside any operation) and flushed at the end."""
    out = bench_captures.copy("reuse-warmup", tmp_path)
    evs = load_capture(out)["events"]
    names = [e["command"].removeprefix("TPM2_CC_") for e in evs]
    start = names.index("StartAuthSession")
    extends = [i for i, n in enumerate(names) if n == "PCR_Extend"]
    assert len(extends) == 4 and start < extends[0]  # warm-up operations left out, as the runs count them
    assert all(evs[i]["op_seq"] is not None for i in extends)
    assert evs[start]["op_seq"] is None
    flushes = [e for e in evs[extends[-1]:] if e["command"] == "TPM2_CC_FlushContext"]
    assert flushes, "the kept session's clean-up flush is missing"


def test_flushcontext_events_name_what_they_flushed(bench_captures, tmp_path):
    """Issue 38: captures stored FlushContext with "handles": [] (its target is a parameter, not
    in the handle area), so replay showed the flush of nothing. Every FlushContext a per-command
    bench sent names the handle it flushed, and replay's stream shows it."""
    from tpmtop.sources.replay import ReplaySource
    from tpmtop.viewmodel.rows.stream import captured_rows

    out = bench_captures.copy("per-command", tmp_path)
    cap = load_capture(out)
    evs = cap["events"]
    flushes = [e for e in evs if e["command"] == "TPM2_CC_FlushContext"]
    assert len(flushes) >= 12
    # per-command flushes the null primary the ContextLoad before it gave back
    for e in flushes:
        assert len(e["handles"]) == 1 and int(e["handles"][0], 16) >> 24 in (0x80, 0x02, 0x03), e
    loaded = {e["handles"][0] for e in flushes}
    assert loaded, loaded
    rows = [r for r in captured_rows(ReplaySource(cap, out).captured_stream()) if "FlushContext" in r.command]
    assert rows and all(r.handles.strip() for r in rows), rows[:2]
