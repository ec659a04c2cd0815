"""TPM_RC_PCR_CHANGED (0x128) explained: through `tpmtop proxy` (and `tpmtop run`), client A
(tpm2-tools) starts a policy session, runs PolicyPCR, client B extends a PCR, A's Unseal fails
with 0x128 — and tpmtop names B's extend (process, pid, command, time) in the proxy's stream,
`run`'s summary and the capture (--json).

PCR 15, not 16: swtpm (libtpms) keeps PCRs 16 and 23 out of the PCR update counter
(TPM_PT_PCR_NO_INCREMENT, as the PC Client profile allows), so an extend of PCR 16 between
PolicyPCR and Unseal fails nothing — test_pcr_16_does_not_move_the_counter holds that."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.helpers.processes import TPMTOP, TcpSwtpm
from tests.helpers.proxy import Proxy

SEALED = "sealed-by-test"


@pytest.fixture
def swtpm():
    s = TcpSwtpm()
    yield s
    s.stop()


def _seal_to_pcr16(tool, d) -> None:
    """A sealed object whose policy is PolicyPCR(sha256:15) — set up directly on the swtpm."""
    tool("tpm2_createprimary", "-C", "o", "-c", "prim.ctx", cwd=d)
    tool("tpm2_flushcontext", "-t", cwd=d)  # no resource manager here: each tool's objects stay loaded
    tool("tpm2_pcrread", "-o", "pcr.bin", "sha256:15", cwd=d)
    tool("tpm2_createpolicy", "--policy-pcr", "-l", "sha256:15", "-f", "pcr.bin", "-L", "pol.dig", cwd=d)
    (d / "secret").write_text(SEALED)
    tool("tpm2_create", "-C", "prim.ctx", "-L", "pol.dig", "-i", "secret", "-u", "k.pub", "-r", "k.priv",
         "-a", "fixedtpm|fixedparent", cwd=d)
    tool("tpm2_flushcontext", "-t", cwd=d)
    tool("tpm2_load", "-C", "prim.ctx", "-u", "k.pub", "-r", "k.priv", "-c", "k.ctx", cwd=d)
    tool("tpm2_flushcontext", "-t", cwd=d)


def _direct(tcti):
    def tool(*argv, cwd=None, check=True):
        env = dict(os.environ, TPM2TOOLS_TCTI=tcti, TSS2_LOG="all+NONE")
        r = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=60, cwd=cwd)
        assert not check or r.returncode == 0, f"{argv}: {r.stderr}"
        return r
    return tool


def test_proxy_names_the_extend_that_broke_the_policy_session(swtpm, tmp_path):
    _seal_to_pcr16(_direct(swtpm.tcti), tmp_path)
    proxy = Proxy(swtpm.tcti, "swtpm", tmp_path)
    try:
        proxy.tool("tpm2_startauthsession", "--policy-session", "-S", "s.ctx", cwd=tmp_path)
        proxy.tool("tpm2_policypcr", "-S", "s.ctx", "-l", "sha256:15", cwd=tmp_path)
        # client B, started here so that its pid is known
        env = dict(os.environ, TPM2TOOLS_TCTI=proxy.tcti, TSS2_LOG="all+NONE")
        b = subprocess.Popen(["tpm2_pcrextend", "15:sha256=" + "15" * 32], env=env, cwd=tmp_path)
        assert b.wait(60) == 0
        r = proxy.tool("tpm2_unseal", "-c", "k.ctx", "-p", "session:s.ctx", check=False, cwd=tmp_path)
        assert r.returncode != 0 and "0x128" in r.stderr.lower()
        line = proxy.wait_line("PCR_CHANGED")
        proxy.tool("tpm2_flushcontext", "s.ctx", cwd=tmp_path)
    finally:
        proxy.stop()
    assert re.search(r"Unseal by tpm2_unseal \(pid \d+", line), line
    assert re.search(r"PolicyPCR \(PCR 15\) by tpm2_policypcr \(pid \d+", line), line
    assert re.search(r"extended in between: PCR_Extend of PCR 15 by tpm2_pcrextend \(pid \d+, client \d+\) at "
                     r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line), line
    cap = json.loads(proxy.capture.read_text())
    [broke] = cap["pcr_changed"]
    assert broke["command"] == "Unseal" and broke["policy_pcrs"] == [15]
    [ext] = broke["extends_in_selection"]
    assert ext["pcr"] == 15 and ext["command"] == "PCR_Extend" and ext["by"].startswith("tpm2_pcrextend (pid ")
    assert broke["other_extends"] == []
    assert ext["pid"] == b.pid and f"tpm2_pcrextend (pid {b.pid}," in line


def test_run_summary_and_json_name_an_extend_outside_the_selection(swtpm, tmp_path):
    """B extends PCR 14, not in A's selection: the same counter moves, A fails, and tpmtop
    names the extend among the others."""
    _seal_to_pcr16(_direct(swtpm.tcti), tmp_path)
    script = ("tpm2_startauthsession --policy-session -S s.ctx && tpm2_policypcr -S s.ctx -l sha256:15 && "
              "tpm2_pcrextend 14:sha256=" + "14" * 32 + "; tpm2_unseal -c k.ctx -p session:s.ctx; "
              "tpm2_flushcontext s.ctx")
    out = tmp_path / "run.json"
    env = {k: v for k, v in os.environ.items() if k != "TPM2TOOLS_TCTI"} | {"TSS2_LOG": "all+NONE"}
    r = subprocess.run([*TPMTOP, "run", "-T", swtpm.tcti, "--json", str(out), "--", "sh", "-c", script],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert "Traceback" not in r.stderr
    assert re.search(r"PCR_CHANGED: Unseal by tpm2_unseal \(pid \d+.*other PCRs extended in between \(they move "
                     r"the same update counter\): PCR_Extend of PCR 14 by tpm2_pcrextend \(pid \d+", r.stderr), r.stderr
    cap = json.loads(out.read_text())
    [broke] = cap["pcr_changed"]
    assert broke["extends_in_selection"] == [] and [e["pcr"] for e in broke["other_extends"]] == [14]


def test_pcr_16_does_not_move_the_counter(swtpm, tmp_path):
    """Why the tests above use PCR 15: on swtpm an extend of PCR 16 between PolicyPCR(16) and
    Unseal breaks nothing (and tpmtop reports no PCR_CHANGED)."""
    tool = _direct(swtpm.tcti)
    d = tmp_path
    tool("tpm2_createprimary", "-C", "o", "-c", "prim.ctx", cwd=d)
    tool("tpm2_flushcontext", "-t", cwd=d)
    tool("tpm2_pcrread", "-o", "pcr.bin", "sha256:16", cwd=d)
    tool("tpm2_createpolicy", "--policy-pcr", "-l", "sha256:16", "-f", "pcr.bin", "-L", "pol.dig", cwd=d)
    (d / "secret").write_text(SEALED)
    tool("tpm2_create", "-C", "prim.ctx", "-L", "pol.dig", "-i", "secret", "-u", "k.pub", "-r", "k.priv", cwd=d)
    tool("tpm2_flushcontext", "-t", cwd=d)
    tool("tpm2_load", "-C", "prim.ctx", "-u", "k.pub", "-r", "k.priv", "-c", "k.ctx", cwd=d)
    tool("tpm2_flushcontext", "-t", cwd=d)
    proxy = Proxy(swtpm.tcti, "swtpm", tmp_path)
    try:
        proxy.tool("tpm2_startauthsession", "--policy-session", "-S", "s.ctx", cwd=d)
        proxy.tool("tpm2_policypcr", "-S", "s.ctx", "-l", "sha256:16", cwd=d)
        proxy.tool("tpm2_pcrextend", "16:sha256=" + "16" * 32, cwd=d)
        r = proxy.tool("tpm2_unseal", "-c", "k.ctx", "-p", "session:s.ctx", cwd=d)
    finally:
        proxy.stop()
    assert r.stdout == SEALED
    assert not any("PCR_CHANGED" in line for line in proxy.lines)
