"""The kernel's CreatePrimary time-out (30 s since Linux 6.18, 300 s before) against the
CreatePrimary times a capture shows; and a kernel message's moment tied to the command in
flight then. The capture is a real one (tpm2_createprimary through `tpmtop run` on a swtpm);
the slow chip is that capture with its CreatePrimary's wire time and kernel edited, as a slow
chip on another kernel would have recorded it."""

from __future__ import annotations

import datetime
import json
import shutil

import pytest

from tests.health.conftest import check_schema
from tests.helpers.processes import run_tpmtop
from tpmtop.health.kernel_traffic import KernelTraffic

pytestmark = pytest.mark.skipif(shutil.which("tpm2_createprimary") is None, reason="tpm2-tools not installed")


@pytest.fixture
def create_capture(tcp_swtpm, tmp_path):
    cap = tmp_path / "run.json"
    r = run_tpmtop("-T", tcp_swtpm.tcti, "run", "--json", str(cap), "--", "tpm2_createprimary", "-Q", "-c",
                   str(tmp_path / "p.ctx"), env={"TSS2_LOG": "all+NONE"})
    assert r.returncode == 0, r.stderr
    return tcp_swtpm, cap


def _edited(cap, tmp_path, kernel: str, seconds: float):
    doc = json.loads(cap.read_text())
    doc["host"]["kernel"] = kernel
    for e in doc["events"]:
        if e["command"] == "TPM2_CC_CreatePrimary":
            e["wire_ns"] = int(seconds * 1e9)
    out = tmp_path / f"slow-{kernel}.json"
    out.write_text(json.dumps(doc))
    return out


def _waits(swtpm, cap) -> dict:
    r = run_tpmtop("health", "-T", swtpm.tcti, "--json", "--state", "none", "--capture", str(cap))
    doc = check_schema(json.loads(r.stdout))
    return next(v for v in doc["verdicts"] if v["kind"] == "cmd-timeouts")


def test_a_createprimary_near_the_618_time_out_warns_with_kernel_and_commit(create_capture, tmp_path):
    swtpm, cap = create_capture
    fast = _waits(swtpm, cap)  # swtpm's own: milliseconds, far from any time-out
    assert fast["level"] in ("ok", "info") and fast["data"]["captures"][0]["count"] == 1, fast
    slow = _waits(swtpm, _edited(cap, tmp_path, "6.18.3-arch1", 12.0))
    assert slow["level"] == "warn", slow
    assert "12.0 s" in slow["text"] and "40%" in slow["text"] and "207696b17f38" in slow["text"]
    assert "6.18.3-arch1" in slow["text"]
    # must not fire: the same 12 s on a kernel before 6.18 is 4% of its 300 s
    old = _waits(swtpm, _edited(cap, tmp_path, "6.12.48", 12.0))
    assert old["level"] == "ok" and "300 s" in old["text"], old


def test_a_moment_is_tied_to_the_command_in_flight_then(create_capture):
    _, cap = create_capture
    doc = json.loads(cap.read_text())
    t = KernelTraffic()
    t.feed_capture(doc)
    ev = next(e for e in doc["events"] if e["command"] == "TPM2_CC_CreatePrimary")
    t0 = datetime.datetime.fromisoformat(doc["t0_wall"]).timestamp()
    at = int((t0 * 1e9) + ev["t_ns"] + ev["wire_ns"] // 2)
    cmd, who, after = t.command_at(at)
    assert (cmd, who) == ("CreatePrimary", "tpm2_createprimary") and 0 <= after < 1
    assert t.command_at(at - 3_600_000_000_000) is None  # an hour before: nothing in flight
