"""`tpmtop health --capture K` with a kernel capture: the hwrng's share and tail of the kernel's
TPM time, and the tasks IMA extended for. K is `tpmtop kernel --trace` of a real Debian 6.12
guest's trace (tests/fixtures/kernel/), judged beside the tree saved from the same kind of guest
(tests/fixtures/health/debian-6.12-default)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests.health.conftest import check_schema
from tests.helpers.paths import REPO
from tests.helpers.processes import run_tpmtop

TRACE = REPO / "tests" / "fixtures" / "kernel" / "trace-6.12-debian-qemu-tpmrm.txt"
TREE = REPO / "tests" / "fixtures" / "health" / "debian-6.12-default"


def _kernel_capture(tmp_path: Path) -> tuple[Path, dict]:
    out = tmp_path / "k.json"
    r = run_tpmtop("kernel", "--trace", str(TRACE), "--json", str(out), "-q")
    assert r.returncode == 0, r.stderr
    return out, json.loads(out.read_text())


def _health(*args: str) -> tuple[int, dict[str, dict], str]:
    r = run_tpmtop("health", "--root", str(TREE), "--ima-sample", "0", "--json", *args)
    assert r.returncode in (0, 1), r.stderr
    doc = check_schema(json.loads(r.stdout))
    return r.returncode, {v["kind"]: v for v in doc["verdicts"]}, r.stdout


def test_the_hwrng_share_and_imas_tasks_come_from_the_kernel_capture(tmp_path):
    k, cap = _kernel_capture(tmp_path)
    kernel = [e for e in cap["events"] if e.get("origin") == "kernel"]
    hw = [e for e in kernel if e["path"].startswith("hwrng") and e["command"] == "TPM2_CC_GetRandom"]
    ext = Counter(e["comm"] for e in kernel if e["path"].startswith("PCR extend"))
    assert hw and ext, "the trace holds hwrng reads and IMA extends (a real guest's)"

    status, v, _ = _health("--capture", str(k))
    assert status == 0
    data = v["hwrng"]["data"]["kernel"]
    assert data["commands"] == len(hw) and data["kernel_commands"] == len(kernel)
    assert data["wire_ns"] == sum(e["wire_ns"] for e in hw)
    assert data["max_ns"] == max(e["wire_ns"] for e in hw)
    assert v["hwrng"]["level"] == "info" and "share of TPM time below" in v["hwrng"]["text"]
    assert any(f"{len(hw)} hwrng GetRandom of the kernel's {len(kernel)} TPM commands" in e
               for e in v["hwrng"]["evidence"])
    assert any("too few for a p99" in e for e in v["hwrng"]["evidence"])  # 2 commands: said so
    tasks = v["ima"]["data"]["top_tasks"]
    assert [(t["task"], t["extends"]) for t in tasks] == ext.most_common(len(tasks))
    assert tasks[0]["task"] == "tpm2_getrandom"


def test_without_a_capture_the_hwrng_line_says_how_to_get_its_share():
    _, v, _ = _health()
    assert "kernel" not in v["hwrng"]["data"] and "top_tasks" not in v["ima"]["data"]
    assert "tpmtop kernel --json K" in v["hwrng"]["text"]


def test_a_getrandom_that_holds_the_tpm_100_ms_is_a_problem(tmp_path):
    """The same real capture with one hwrng read's wire time set to 150 ms (edited here, as
    an fTPM stall would show): a WARN, exit 1."""
    _k, cap = _kernel_capture(tmp_path)
    hw = [e for e in cap["events"] if e.get("origin") == "kernel" and e["path"].startswith("hwrng")
          and e["command"] == "TPM2_CC_GetRandom"]
    hw[0]["wire_ns"] = 150_000_000
    edited = tmp_path / "k-stall.json"
    edited.write_text(json.dumps(cap))
    status, v, _ = _health("--capture", str(edited))
    assert status == 1
    assert v["hwrng"]["level"] == "warn" and "1 of its GetRandom held the TPM 100 ms or more" in v["hwrng"]["text"]
    assert v["hwrng"]["data"]["kernel"]["max_ns"] == 150_000_000
