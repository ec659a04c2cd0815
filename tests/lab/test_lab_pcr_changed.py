"""The PCR_CHANGED kernel test (tests/kernel/test_kernel_pcr_changed.py) on the lab's HMAC
kernels: a policy session's PolicyPCR on PCR 10, then IMA measures a file (the kernel extends
PCR 10, in an HMAC session), then Unseal fails with TPM_RC_PCR_CHANGED (0x128) — and `tpmtop
kernel` names the kernel's extend that came between, past the kernel's session set-up. One
scripts/kernel-vm.sh run boots each kernel in turn (under a minute each under TCG); the inner
pytest must pass, not skip (TPMTOP_KERNEL_LIVE=required there).

6.12-hmac keeps its session over extends (a user-space write to /dev/tpmrm0 ends it, so the
extend after one starts a new one); 6.12-percmd sets one up for every extend.

Heavy: only with TPMTOP_LAB=1 (`make test-lab`, as root), and only where `make lab-kernels` built
the kernels; it skips, saying so, elsewhere."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.lab import built, lab_marks
from tests.helpers.paths import REPO
from tpmtop.capture import load_capture

KERNELS = ("6.12-hmac", "6.12-percmd")
INNER = "tests/kernel/test_kernel_pcr_changed.py"

pytestmark = lab_marks("scripts/kernel-vm.sh needs root (qemu's 9p export of /)")


@pytest.fixture(scope="module")
def guests():
    """{kernel: (its verdict line, the inner pytest's output, the capture `tpmtop kernel` wrote)}."""
    names = [k for k in KERNELS if built(k)]
    if not names:
        pytest.skip(f"no lab HMAC kernel is built: make lab-kernels (scripts/lab-kernels.sh {KERNELS[0]})")
    py = os.environ.get("KERNEL_VM_PYTHON") or sys.executable
    # the inner pytest's tmp_path in the run's results folder (the guest's writable 9p export),
    # so the capture is read here; the run folders are kept for that, and removed after
    inner = (f"exec {shlex.quote(py)} -m pytest -q -p no:cacheprovider -o addopts=-rA "
             f'--basetemp "$KERNEL_VM_RESULTS/pytest" {INNER}')
    p = subprocess.run([str(REPO / "scripts" / "kernel-vm.sh"), "--keep", "--", "sh", "-c", inner], cwd=REPO,
                       env=dict(os.environ, KERNEL_VM_PYTHON=py, KERNELS=" ".join(names)),
                       capture_output=True, text=True, timeout=3600 * len(names))
    runs = re.findall(r"^kernel-vm: kept (\S+) \(", p.stderr, re.M)
    try:
        verdicts = re.findall(r"^kernel-vm: (\S+): exit status (\d+) \((\d+)s\)$", p.stdout, re.M)
        assert len(verdicts) == len(runs) == len(names), p.stdout[-6000:] + p.stderr[-3000:]
        got = {}
        for name, run, (release, status, secs) in zip(names, runs, verdicts, strict=True):
            output = (Path(run) / "results" / "output.log").read_text(errors="replace")
            caps = sorted((Path(run) / "results" / "pytest").glob("*/k.json"))
            got[name] = (release, int(status), int(secs), output, load_capture(caps[0]) if caps else None)
        return got
    finally:
        for run in runs:
            shutil.rmtree(run, ignore_errors=True)


@pytest.mark.parametrize("name", KERNELS)
def test_the_kernels_ima_extend_in_its_hmac_session_is_named_behind_a_0x128(guests, name):
    if name not in guests:
        pytest.skip(f"kernel {name} is not built: make lab-kernels (scripts/lab-kernels.sh {name})")
    release, status, secs, output, capture = guests[name]
    print(f"{name}: {release}, guest {secs} s")  # with -rA
    assert release.endswith(name.split("-", 1)[1]), release  # the lab's kernel booted, not Debian's
    closing = re.compile(r"\b(passed|failed|skipped|errors?|no tests ran)\b.* in [0-9.]+s")
    summary = [ln for ln in output.splitlines() if closing.search(ln)]
    assert status == 0 and summary and re.search(r"\b1 passed\b", summary[-1]), output[-6000:]
    assert not re.search(r"\b(failed|skipped|errors?|deselected)\b", summary[-1]), summary[-1]
    # what tpmtop said (the inner test prints its hint): the kernel's extend, behind the 0x128
    assert "failed with 0x128 (TPM_RC_PCR_CHANGED)" in output, output[-6000:]
    assert "extended in between: PCR_Extend of a PCR (not traced; IMA extends PCR 10) by " in output, output[-6000:]
    assert "PCR extend (IMA / kernel)" in output, output[-6000:]
    # and the kernel's extend ran in an HMAC session: the kernel's own commands (not a
    # /dev/tpmrm0 client's, not the resource manager's) include its StartAuthSession
    assert capture is not None, f"no capture of `tpmtop kernel` in the guest's results: {output[-3000:]}"
    own = capture.get("kernel_trace", {}).get("kernel_commands", {})
    assert any("PCR_Extend" in cc for cc in own) and any("StartAuthSession" in cc for cc in own), sorted(own)
