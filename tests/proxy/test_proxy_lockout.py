"""Issue 52 item 3 (the proxy's part): a command the TPM refuses in dictionary-attack lockout
(TPM_RC_LOCKOUT, 0x921) is said by the proxy, naming the client and the command, at most a
line a second, and its failure lines carry the wall-clock time. A private swtpm put into
lockout by the test (tests/helpers/da.py), real tpm2-tools through a real proxy."""

from __future__ import annotations

import calendar
import re
import shutil
import time

import pytest

from tests.helpers.da import da_swtpm_factory  # noqa: F401 (a fixture)
from tests.helpers.proxy import Proxy

pytestmark = pytest.mark.skipif(shutil.which("tpm2_unseal") is None, reason="tpm2-tools not installed")

_WALL = re.compile(r"\(at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\)")


def test_commands_refused_in_lockout_are_said_with_who_and_when(da_swtpm_factory, tmp_path):
    swtpm = da_swtpm_factory(1, 600)  # one wrong password locks it out for 10 minutes
    ctx = str(swtpm.work / "s.ctx")
    p = Proxy(swtpm.tcti, "swtpm", tmp_path)
    try:
        before = time.time()
        r = p.tool("tpm2_unseal", "-c", ctx, "-p", "wrong", check=False)
        assert r.returncode != 0
        wrong = p.wait_line("wrong password", "Unseal")
        t0 = time.monotonic()
        for _ in range(6):  # in lockout now: refused, whatever the password
            r = p.tool("tpm2_unseal", "-c", ctx, "-p", "right", check=False)
            assert r.returncode != 0
            p.tool("tpm2_flushcontext", "-t", check=False)
        elapsed = time.monotonic() - t0
        first = p.wait_line("TPM_RC_LOCKOUT")
        status, _, _ = p.stop()
        assert status == 130
    finally:
        p.kill()
    assert "tpm2_unseal" in first and "Unseal refused: 0x921" in first
    for line in (wrong, first):  # the wall-clock time, now-ish
        m = _WALL.search(line)
        assert m, line
        t = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ"))
        assert before - 5 <= t <= time.time() + 5, line
    said = [ln for ln in p.lines if "TPM_RC_LOCKOUT" in ln]
    # all six said or counted, in no more lines than one a second (and the first at once)
    counted = sum(int(m.group(1)) for ln in said if (m := re.search(r"(\d+) refused in lockout", ln)))
    plain = [ln for ln in said if "refused in lockout" not in ln]
    assert len(plain) + counted == 6, said
    assert len(said) <= elapsed + 2, (len(said), elapsed)
