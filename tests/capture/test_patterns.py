"""Failure patterns, from real TPM failures: tpm2-tools against a private swtpm recorded with
tpm2-tss's pcap: TCTI, tpmtop's own recorder, and bench captures in `tpmtop compare`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.processes import run_tpmtop
from tpmtop.capture import load_capture
from tpmtop.patterns import Detector, detect

needs_tcti_pcap = pytest.mark.skipif(not any(Path("/usr/lib").glob("*/libtss2-tcti-pcap.so*")),
                                     reason="tpm2-tss's pcap TCTI (libtss2-tcti-pcap0) is not installed")


def _tool(tcp_swtpm, pcap, *argv) -> int:
    env = dict(os.environ, TCTI_PCAP_FILE=str(pcap))
    env.pop("TPM2TOOLS_TCTI", None)
    return subprocess.run([argv[0], "-T", f"pcap:swtpm:host=127.0.0.1,port={tcp_swtpm.port}", *argv[1:]],
                          capture_output=True, env=env, timeout=120).returncode


@needs_tcti_pcap
def test_repeated_failure_and_slots_full_from_tpm2_tools(tcp_swtpm, tmp_path):
    """ReadPublic of a missing persistent handle three times (TPM_RC_HANDLE), then primaries
    until the swtpm's 3 transient slots run out (0x902): both named, with counts and time."""
    pcap = tmp_path / "fail.pcap"
    for _ in range(3):
        assert _tool(tcp_swtpm, pcap, "tpm2_readpublic", "-c", "0x81000099") != 0
    codes = [_tool(tcp_swtpm, pcap, "tpm2_createprimary", "-C", "n", "-G", "ecc256",
                   "-c", str(tmp_path / f"p{i}.ctx")) for i in range(4)]
    assert codes[:3] == [0, 0, 0] and codes[3] != 0
    out = tmp_path / "fail.json"
    r = run_tpmtop("import", str(pcap), "-o", str(out))
    assert r.returncode == 0, r.stderr
    events = load_capture(out)["events"]
    pats = {p.kind: p for p in detect(events)}
    slots = pats["slots-full"]
    n902 = sum(1 for e in events if e["rc"] == 0x902)
    assert slots.count == n902 >= 1 and slots.rc == 0x902
    assert slots.lost_ns == sum(e["wire_ns"] for e in events if e["rc"] == 0x902)
    rep = pats["repeated-failure"]
    fails = [e for e in events if e["command"] == "TPM2_CC_ReadPublic" and e["rc"] == rep.rc]
    assert rep.command == "TPM2_CC_ReadPublic" and rep.count == len(fails) == 3
    assert "pattern: TPM slots full (TPM_RC_OBJECT_MEMORY 0x902)" in r.stderr
    assert "pattern: ReadPublic failing with 0x18b" in r.stderr


def test_session_churn_in_compare(bench_captures, tmp_path):
    """A program that starts a session for every command is named by `tpmtop compare`; tpmtop's
    own per-command workload is not (that churn is the strategy being measured)."""
    own = bench_captures.copy("per-command", tmp_path)
    cap = load_capture(own)
    starts = sum(1 for e in cap["events"] if e["command"] == "TPM2_CC_StartAuthSession" and e["rc"] == 0)
    assert starts >= 12
    # The same traffic as another program's (what a proxied client would be): origin "user".
    other = tmp_path / "other.json"
    for e in cap["events"]:
        e["origin"], e["engine"], e["mode"], e["op"], e["op_seq"] = "user", None, None, None, None
    cap.pop("ops", None)
    other.write_text(json.dumps(cap))
    r = run_tpmtop("compare", str(own), str(other))
    assert r.returncode == 0, r.stderr
    assert f"failure pattern in B: session re-created many times (StartAuthSession): {starts} times" in r.stdout
    assert "failure pattern in A" not in r.stdout
    j = json.loads(run_tpmtop("compare", str(own), str(other), "--json").stdout)
    assert j["patterns"][str(own)] == []
    assert j["patterns"][str(other)][0]["kind"] == "session-churn"


def test_live_recorder_events_feed_the_detector(tpm):
    """tpmtop's own recorder events (the dashboard's stream) work as they are: a FlushContext
    of a handle that is not loaded, four times, is a repeated failure."""
    from tpmtop.errors import TpmError
    from tpmtop.tpm import commands

    for _ in range(4):
        with pytest.raises(TpmError):
            commands.flush_context(tpm.transport, 0x80FFFFF0)
    d = Detector()
    d.add(tpm.recorder.events())
    (p,) = [p for p in d.patterns() if p.kind == "repeated-failure"]
    assert p.command == "TPM2_CC_FlushContext" and p.rc == 0x1C4 and p.count == 4 and p.lost_ns > 0
    assert p.origins == ["user"]


def test_context_gap_and_session_slots_are_named_with_their_time():
    """Capture event dicts as tpmtop writes them: 0x901 on ContextSave, 0x903 on
    StartAuthSession, and one unrelated failure that is no pattern."""
    def ev(t, cmd, rc, wire):
        return {"t_ns": t, "command": cmd, "rc": rc, "wire_ns": wire, "origin": "kernel"}

    events = [ev(1, "TPM2_CC_ContextSave", 0x901, 1000), ev(2, "TPM2_CC_ContextSave", 0x901, 3000),
              ev(3, "TPM2_CC_StartAuthSession", 0x903, 500), ev(4, "TPM2_CC_Unseal", 0x9A2, 10)]
    pats = {p.kind: p for p in detect(events)}
    gap = pats["context-gap"]
    assert (gap.count, gap.lost_ns, gap.first_t_ns, gap.last_t_ns) == (2, 4000, 1, 2)
    assert "CONTEXT_GAP" in gap.hint and gap.origins == ["kernel"]
    slots = pats["slots-full"]
    assert (slots.rc, slots.count, slots.lost_ns) == (0x903, 1, 500)
    assert set(pats) == {"context-gap", "slots-full"}  # two of the same is not yet a loop
