"""OpenMetrics export, read back with prometheus_client's two independent parsers."""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_prometheus_text

from tests.helpers.paths import TESTS
from tpmtop.capture import load_capture
from tpmtop.errors import UsageError
from tpmtop.exporters.openmetrics import export_openmetrics, render

SAMPLE = TESTS / "captures" / "sample-1.0.json"
TPMTOP = [sys.executable, "-m", "tpmtop"]


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


def test_sample(tmp_path):
    out = tmp_path / "tpmtop.prom"
    export_openmetrics(SAMPLE, out)
    check_metrics(out.read_text(), load_capture(SAMPLE))


def test_without_histograms_still_valid():
    cap = load_capture(SAMPLE)
    for r in cap["runs"]:
        for s in [r["op_us"], r["wire_us"], r["host_us"], *r["commands"].values()]:
            s.pop("histogram", None)
    text = render(cap)
    fam = {f.name: f for f in parse_openmetrics(text)}["tpmtop_operation_seconds"]
    inf = [s for s in fam.samples if s.name.endswith("_bucket")]
    assert all(s.labels["le"] == "+Inf" for s in inf)
    assert [s.value for s in inf] == [r["op_us"]["count"] for r in cap["runs"]]


def test_label_values_are_escaped():
    cap = load_capture(SAMPLE)
    cap["tpm"]["manufacturer"] = 'we"ird\\name\n'
    fams = list(parse_openmetrics(render(cap)))
    assert fams[0].samples[0].labels["manufacturer"] == 'we"ird\\name\n'


def test_duplicate_runs_are_refused():
    cap = load_capture(SAMPLE)
    cap["runs"].append(cap["runs"][0])
    with pytest.raises(UsageError, match=r"runs\[2\]: a second run"):
        render(cap)


def test_cli_stdout():
    proc = subprocess.run(TPMTOP + ["export", str(SAMPLE), "-f", "openmetrics", "-o", "-"],
                          capture_output=True, text=True, check=True)
    check_metrics(proc.stdout, load_capture(SAMPLE))
