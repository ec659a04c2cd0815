"""The kernel room: `tpmtop kernel` on recorded traces (every kernel format tpmtop reads) and
live on this machine's kernel (skipped, with the reason, where tracing cannot run: no root,
no tracefs, no TPM; scripts/kernel-vm.sh runs them on real kernels in a VM)."""

from __future__ import annotations

import pytest

from tests.helpers.kernel_live import Tracer
from tpmtop.kernel import probes


@pytest.fixture
def tracers(tmp_path):
    """Start Tracers; whatever is left running is killed, and a group it left is removed."""
    started: list[Tracer] = []

    def start(*args: str, name: str = "tpmtop") -> Tracer:
        t = Tracer(tmp_path, *args, name=name)
        started.append(t)
        return t

    try:
        yield start
    finally:
        for t in started:
            t.kill()
        if started:
            try:
                probes.clean_stale(probes.find_tracefs())
            except probes.KernelTraceError:
                pass
