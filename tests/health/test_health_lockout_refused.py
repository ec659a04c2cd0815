"""Commands refused with TPM_RC_LOCKOUT (0x921) during a lockout are listed by health with who
sent them, and every failure line says when it happened on the wall clock (the capture's
t0_wall + t_ns), not only its offset."""

from __future__ import annotations

import datetime
import json
import re
import shutil

import pytest

from tests.health.conftest import check_schema
from tests.helpers.da import da_swtpm_factory  # noqa: F401 (fixture)
from tests.helpers.processes import run_tpmtop

pytestmark = pytest.mark.skipif(shutil.which("tpm2_unseal") is None, reason="tpm2-tools not installed")


def test_lockout_refusals_are_listed_with_who_and_wall_clock_time(da_swtpm_factory, tmp_path):
    s = da_swtpm_factory(2, 600)  # two wrong passwords lock it out for long enough
    ctx = s.work / "s.ctx"
    cap = tmp_path / "run.json"
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    loop = f"for i in 1 2 3; do tpm2_unseal -c {ctx} -p wrong; tpm2_flushcontext -t; done"
    run_tpmtop("-T", s.tcti, "run", "--json", str(cap), "--", "sh", "-c", loop, env={"TSS2_LOG": "all+NONE"})
    after = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    assert "t0_wall" in json.loads(cap.read_text())
    r = run_tpmtop("health", "-T", s.tcti, "--json", "--state", "none", "--capture", str(cap))
    doc = check_schema(json.loads(r.stdout))
    lock = next(v for v in doc["verdicts"] if v["kind"] == "lockout")
    assert lock["data"]["in_lockout"] is True, lock
    v = next(v for v in doc["verdicts"] if v["kind"] == "auth-failures")
    refused = [f for f in v["data"]["failures"] if f["refused"]]
    wrong = [f for f in v["data"]["failures"] if not f["refused"]]
    assert len(wrong) == 2 and all(f["counted"] for f in wrong)  # must not be called refusals
    assert len(refused) == 1 and refused[0]["rc"] == "0x921" and refused[0]["who"]["name"] == "tpm2_unseal"
    assert "1 command(s) refused with TPM_RC_LOCKOUT while locked out (tpm2_unseal (pid" in v["text"]
    assert "2 wrong password(s)" in v["text"]
    for f in v["data"]["failures"]:
        when = datetime.datetime.strptime(f["wall"], "%Y-%m-%d %H:%M:%S.%f%z")
        assert before <= when <= after, (f["wall"], before, after)
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z ", e) for e in v["evidence"]), v["evidence"]
    assert any("TPM_RC_LOCKOUT (refused: locked out)" in e for e in v["evidence"])
