"""``tpmtop boot`` end to end through the CLI entry point."""

import json

import pytest

from tests.helpers.paths import TESTS
from tpmtop.cli import main

TREES = TESTS / "fixtures" / "boot"
TRACES = TESTS / "fixtures" / "traces"


def test_this_machine_reports_and_exits_0(capsys):
    assert main(["boot"]) == 0
    out = capsys.readouterr().out
    assert "Verdict: " in out
    assert "no TPM commands sent" in out


def test_fixture_json_has_facts_sources_and_projection(capsys):
    args = ["boot", "--root", str(TREES / "laptop-6.10-hmac"), "--json",
            "--trace", str(TRACES / "ftrace-graph-extend-hmac-slb9670.txt"),
            "--trace", str(TRACES / "ftrace-graph-extend-nohmac-slb9670.txt")]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    facts = {f["name"]: f for f in doc["facts"]}
    assert facts["ima.measurements"] == {"name": "ima.measurements", "value": 87,
                                         "source": "/sys/kernel/security/ima/runtime_measurements_count",
                                         "reason": None}
    assert doc["session_mode"]["mode"] == "per-command"
    comps = doc["projection"]["components_us"]
    assert comps["L"]["us"] == 36976.99 and comps["E0"]["us"] == 6360.029
    # 87 × (36976.99 + 84746.51 + 3195.083 + 24356.46) µs = 87 × 149275.043 = 12986928.741 µs
    assert doc["projection"]["modes"]["per-command"]["total_s"] == 12.986928741
    assert doc["traces"][0]["operations"]["ContextLoad"]["summary_us"]["p50"] == 36976.99


def test_bad_trace_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("# tracer: function_graph\n 0)               |  f() {\n 0) # oops us |  }\n")
    assert main(["boot", "--root", str(TREES / "vm-no-tpm"), "--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}:3: unreadable DURATION cell" in err


def test_bad_arguments_exit_2(capsys):
    assert main(["boot", "--root", "/nonexistent-dir"]) == 2
    assert main(["boot", "--extends", "many"]) == 2
    assert main(["boot", "--trace", "/nonexistent-file"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(ln.startswith("tpmtop") for ln in lines)


def test_boot_module_is_light_at_import():
    import subprocess
    import sys

    code = ("import sys, tpmtop.cli.boot; "
            "print(any(m.startswith(('textual', 'tpm2_pytss', 'tpmtop.boot')) for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


# -- #12 item 11: hostile numbers in trace imports and options ----------------------------------

def test_ftrace_duration_beyond_u64_is_exit_2_with_file_line(tmp_path, capsys):
    bad = tmp_path / "huge.txt"
    bad.write_text("# tracer: function_graph\n 1)               |  tpm2_pcr_extend() {\n"
                   " 1) * 99999999999999999999999999999.9 us |    tpm_transmit_cmd();\n"
                   " 1) @ 151171.0 us |  }\n")
    assert main(["boot", "--root", str(TREES / "vm-no-tpm"), "--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}:3: duration larger than a kernel can print" in err


def test_ftrace_largest_u64_duration_is_read(tmp_path, capsys):
    ok = tmp_path / "max.txt"
    ok.write_text("# tracer: function_graph\n 1) $ 18446744073709551.615 us |  tpm_transmit_cmd();\n")
    assert main(["boot", "--root", str(TREES / "vm-no-tpm"), "--json", "--trace", str(ok)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["traces"][0]["functions"]["tpm_transmit_cmd"]["total_us"] == 18446744073709551.615


def test_negative_bpftrace_sum_is_refused(tmp_path, capsys):
    bad = tmp_path / "neg.txt"
    bad.write_text("Attaching 2 probes...\n\n@[tpm2_pcr_extend]: -150000000\n")
    assert main(["boot", "--root", str(TREES / "vm-no-tpm"), "--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}:3: negative value: not a sum of durations" in err


def test_extends_has_an_upper_bound(capsys):
    assert main(["boot", "--root", str(TREES / "vm-no-tpm"), "--extends", "100000001"]) == 2
    assert "at most 100,000,000" in capsys.readouterr().err


def test_extends_0_beside_ima_measurements_says_what_it_assumes(capsys):
    assert main(["boot", "--root", str(TREES / "laptop-6.10-hmac"), "--extends", "0"]) == 0
    verdict = capsys.readouterr().out.rsplit("Verdict: ", 1)[1]
    assert "IMA is off" not in verdict
    assert verdict.startswith("With --extends 0 the projection assumes the kernel extends no PCRs")
    assert "IMA counted 87 measurements" in verdict


def test_rate_nan_and_inf_are_refused(capsys):
    import argparse

    from tpmtop.cli.dashboard_args import _rate

    for text in ("nan", "inf", "-inf", "NaN"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a rate"):
            _rate(text)
    assert _rate("0") == 0.0 and _rate("250") == 250.0
