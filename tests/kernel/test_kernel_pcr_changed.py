"""In the kernel VM (scripts/kernel-vm.sh, ima_policy=tcb): a policy session's PolicyPCR on
PCR 10, then a file read as root (IMA measures it: the kernel extends PCR 10), then Unseal
fails with TPM_RC_PCR_CHANGED (0x128) — and `tpmtop kernel` names the kernel's extend that
came between, in its pattern line and from its capture. Skips where tracing is impossible."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.helpers.kernel_live import require_live
from tpmtop.capture import load_capture
from tpmtop.patterns import detect

pytestmark = pytest.mark.usefixtures("_live")
TCTI = "device:/dev/tpmrm0"


@pytest.fixture
def _live():
    require_live()


def _tool(*argv: str, cwd, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, TPM2TOOLS_TCTI=TCTI, TSS2_LOG="all+NONE")
    r = subprocess.run(list(argv), env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert not check or r.returncode == 0, f"{argv}: {r.stderr}"
    return r


def test_the_kernels_ima_extend_is_named_behind_a_0x128(tracers, tmp_path):
    d = tmp_path
    (d / "secret").write_text("sealed-in-the-vm")
    # every tool runs once before the policy is computed: IMA measures a binary once, so the
    # later runs extend nothing of their own
    _tool("tpm2_createprimary", "-C", "o", "-c", "prim.ctx", cwd=d)
    _tool("tpm2_pcrread", "-o", "pcr.bin", "sha256:10", cwd=d)
    _tool("tpm2_createpolicy", "--policy-pcr", "-l", "sha256:10", "-f", "pcr.bin", "-L", "pol.dig", cwd=d)
    _tool("tpm2_create", "-C", "prim.ctx", "-L", "pol.dig", "-i", "secret", "-u", "k.pub", "-r", "k.priv", cwd=d)
    _tool("tpm2_load", "-C", "prim.ctx", "-u", "k.pub", "-r", "k.priv", "-c", "k.ctx", cwd=d)
    _tool("tpm2_startauthsession", "--policy-session", "-S", "warm.ctx", cwd=d)
    _tool("tpm2_policypcr", "-S", "warm.ctx", "-l", "sha256:10", cwd=d, check=False)
    _tool("tpm2_flushcontext", "warm.ctx", cwd=d, check=False)
    _tool("tpm2_unseal", "-c", "k.ctx", "-p", "session:warm.ctx", cwd=d, check=False)

    out = d / "k.json"
    t = tracers("--json", str(out), "--quiet")
    t.wait_armed()
    _tool("tpm2_startauthsession", "--policy-session", "-S", "s.ctx", cwd=d)
    _tool("tpm2_policypcr", "-S", "s.ctx", "-l", "sha256:10", cwd=d)
    # a file no one has read yet, read by root: IMA measures it, the kernel extends PCR 10
    with open(os.path.join(os.path.dirname(__file__), "..", "fixtures", "pcrs", "README.md"), "rb") as f:
        f.read()
    r = _tool("tpm2_unseal", "-c", "k.ctx", "-p", "session:s.ctx", cwd=d, check=False)
    _tool("tpm2_flushcontext", "s.ctx", cwd=d, check=False)
    assert r.returncode != 0 and "0x128" in r.stderr.lower(), r.stderr
    assert t.stop(signal.SIGINT) == 130, t.why()

    [pat] = [p for p in detect(load_capture(out)["events"]) if p.kind == "pcr-changed"]
    print(pat.hint)  # shown with -rA: what tpmtop said
    assert "Unseal by tpm2_unseal-" in pat.hint, pat.hint
    assert "extended in between: PCR_Extend of a PCR (not traced; IMA extends PCR 10) by " in pat.hint, pat.hint
    assert "policy session broken by a PCR extend" in t.stderr() and "PCR_Extend of a PCR" in t.stderr(), t.stderr()
