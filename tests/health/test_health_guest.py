"""`tpmtop health` inside a kernel-vm guest (real kernel, qemu's TIS TPM backed by swtpm), on
the running system rather than a saved tree. Runs only there:

    scripts/kernel-vm.sh --kernel 6.1 -- python -m pytest -q tests/health/test_health_guest.py
    KERNEL_VM_APPEND=tpm_tis.interrupts=0 scripts/kernel-vm.sh --kernel 6.1 -- \
        python -m pytest -q tests/health/test_health_guest.py
    KERNEL_VM_APPEND="acpi=off tpm_tis.force=1 tpm_tis.interrupts=1" scripts/kernel-vm.sh …  # the fallback
"""

from __future__ import annotations

import json
import os

import pytest

from tests.health.conftest import check_schema
from tests.helpers.processes import run_tpmtop

pytestmark = pytest.mark.skipif(os.environ.get("KERNEL_VM") != "1", reason="runs inside scripts/kernel-vm.sh's guest")


def test_health_judges_the_guest_it_runs_on():
    with open("/proc/cmdline") as f:
        words = f.read().split()
    # qemu's TIS declares no IRQ: polling either way, said differently (and so judged differently);
    # with acpi=off tpm_tis.force=1 the driver's own device probes for one, none fires, and the
    # driver falls back (a problem: exit status 1)
    if "tpm_tis.interrupts=0" in words:
        want = {"polling-off-cmdline"}
    elif "tpm_tis.force=1" in words:
        want = {"polling-fallback"}
    else:
        want = {"polling-off-default", "polling-no-irq"}
    r = run_tpmtop("health", "--json", "--ima-sample", "0")
    doc = check_schema(json.loads(r.stdout))
    v = {x["kind"]: x for x in doc["verdicts"]}
    assert v["interrupts"]["data"]["mode"] in want, v["interrupts"]
    assert r.returncode == (1 if want == {"polling-fallback"} else 0), r.stdout
    assert doc["tpm"]["tcti"] == "device:/dev/tpmrm0" and v["lockout"]["data"]["counter"] == 0
    assert v["device"]["level"] == "ok"
    assert ("tpm_tis.force=1" if "acpi=off" in words else "ACPI TPM2") in v["device"]["text"]
    assert v["hwrng"]["data"]["current"] == "tpm-rng-0" and "tpm-rng-0" in v["hwrng"]["text"]
