"""OpenMetrics export, read back with prometheus_client's two independent parsers."""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from tests.helpers.exports import check_metrics
from tests.helpers.paths import TESTS
from tpmtop.capture import load_capture
from tpmtop.errors import UsageError
from tpmtop.export.openmetrics import export_openmetrics, render

SAMPLE = TESTS / "captures" / "sample-1.0.json"
TPMTOP = [sys.executable, "-m", "tpmtop"]


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
