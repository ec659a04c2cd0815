"""What the lab's heavy tests (tests/lab/, under `make test-lab`) share: when they run at all,
and whether `make lab-kernels` built a kernel."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.helpers.paths import REPO


def lab_marks(root_reason: str) -> list[pytest.MarkDecorator]:
    """Skip unless TPMTOP_LAB=1, as root (``root_reason``: what needs it) and with qemu."""
    return [
        pytest.mark.skipif(os.environ.get("TPMTOP_LAB") != "1",
                           reason="boots kernels under qemu for minutes: `make test-lab` runs it (TPMTOP_LAB=1)"),
        pytest.mark.skipif(os.geteuid() != 0, reason=root_reason),
        pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu-system-x86 is not installed"),
    ]


def built(name: str) -> bool:
    """The lab kernel ``name`` is in the cache (scripts/lab-kernels.sh --print)."""
    p = subprocess.run([str(REPO / "scripts" / "lab-kernels.sh"), "--print", name], capture_output=True, text=True)
    return p.returncode == 0 and bool(p.stdout.strip())
