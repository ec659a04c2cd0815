"""Checks of what tpmtop's exporters wrote, against the capture they were written from: a Chrome
trace read back with json, OpenMetrics text read back with prometheus_client's parsers."""

from __future__ import annotations

from collections import defaultdict

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_prometheus_text


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


def check_metrics(text: str, cap: dict) -> None:
    assert text.endswith("# EOF\n")
    fams = {f.name: f for f in parse_openmetrics(text)}
    assert fams["tpmtop_operation_seconds"].type == "histogram"
    assert fams["tpmtop_command_seconds"].type == "histogram"
    tpm = cap["tpm"]
    for fam in fams.values():
        for s in fam.samples:
            assert s.labels["manufacturer"] == tpm["manufacturer"] and s.labels["firmware"] == tpm["firmware"]
    # each run's op histogram: cumulative buckets, +Inf == _count == the capture's count, _sum
    for run in cap["runs"]:
        sel = {"engine": run["engine"], "mode": run["mode"], "op": run["op"]}
        samples = [s for s in fams["tpmtop_operation_seconds"].samples
                   if all(s.labels.get(k) == v for k, v in sel.items())]
        buckets = [(float(s.labels["le"]), s.value) for s in samples if s.name.endswith("_bucket")]
        assert buckets == sorted(buckets) and buckets[-1][0] == float("inf")
        counts = [v for _, v in buckets]
        assert counts == sorted(counts)
        count = next(s.value for s in samples if s.name.endswith("_count"))
        total = next(s.value for s in samples if s.name.endswith("_sum"))
        assert counts[-1] == count == sum(c for _, c in run["op_us"]["histogram"]) == run["op_us"]["count"]
        assert total == pytest.approx(run["op_us"]["mean"] * count / 1e6, rel=1e-6)
        # a bucket bound is the capture's µs bound in seconds
        assert buckets[0][0] == pytest.approx(run["op_us"]["histogram"][0][0] / 1e6)
        for cc in run["commands"]:
            assert any(s.labels.get("command") == cc and s.labels.get("mode") == run["mode"]
                       for s in fams["tpmtop_command_seconds"].samples)
    # node_exporter reads the classic text format: the same file must parse there too
    classic = {f.name: f for f in parse_prometheus_text(text)}
    assert classic["tpmtop_operation_seconds"].type == "histogram"
    assert len(classic["tpmtop_command_seconds"].samples) == len(fams["tpmtop_command_seconds"].samples)
