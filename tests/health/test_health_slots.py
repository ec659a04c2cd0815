"""Slots with their holders: three tpm2_createprimary runs through `tpmtop proxy` leave three
objects loaded in a swtpm (3 object slots); health, given the proxy's capture, names who left
each one and warns that the next load fails with TPM_RC_OBJECT_MEMORY."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.health.conftest import check_schema
from tests.helpers.processes import run_tpmtop
from tests.helpers.proxy import Proxy

pytestmark = pytest.mark.skipif(shutil.which("tpm2_createprimary") is None, reason="tpm2-tools not installed")


def _slots(doc: dict) -> dict:
    return next(v for v in doc["verdicts"] if v["kind"] == "slots")


def test_three_objects_leaked_through_the_proxy_are_listed_with_their_holder(tcp_swtpm, tmp_path):
    doc = check_schema(json.loads(run_tpmtop("health", "-T", tcp_swtpm.tcti, "--json", "--state", "none").stdout))
    v = _slots(doc)
    assert v["level"] == "info" and v["data"]["transients"] == 0  # must not fire: nothing loaded
    p = Proxy(tcp_swtpm.tcti, "swtpm", tmp_path)
    try:
        for i in range(3):
            p.tool("tpm2_createprimary", "-Q", "-c", str(tmp_path / f"p{i}.ctx"))
            p.wait_line("tpm2_createprimary", "LEAK", f"0x8000000{i}")  # the proxy saw it leave
    finally:
        p.stop()
    cap = p.capture
    r = run_tpmtop("health", "-T", tcp_swtpm.tcti, "--state", "none", "--capture", str(cap))
    doc = check_schema(json.loads(run_tpmtop("health", "-T", tcp_swtpm.tcti, "--json", "--state", "none",
                                             "--capture", str(cap)).stdout))
    v = _slots(doc)
    assert r.returncode == 1 and v["level"] == "warn" and "TPM_RC_OBJECT_MEMORY" in v["text"], v
    assert v["data"]["transients"] == 3 and v["data"]["transient_avail"] == 0
    held = [h for h in v["data"]["handles"] if h["handle"].startswith("0x80")]
    assert len(held) == 3
    assert all(h["holder"] == "tpm2_createprimary" and h["left"] is True and h["pid"] for h in held), held
    assert len({h["pid"] for h in held}) == 3  # three processes, each named
    text = " ".join(r.stdout.split())  # lines wrap at 80 columns
    assert "held by tpm2_createprimary (pid" in text and "exited without flushing it" in text, r.stdout
