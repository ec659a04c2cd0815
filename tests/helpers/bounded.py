"""Running tpmtop on a hostile input and measuring what it cost: exit status, its stderr and
its peak RSS (resource.getrusage(RUSAGE_CHILDREN) in a small parent of its own, so no other
child of the test process counts). Issue 50: every reader bounded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.paths import REPO

PEAK_RSS_MB = 200  # issue 50's bound on a reader given a hostile file

_PARENT = r"""
import json, resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True, text=True, errors="replace", timeout=300)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"rc": p.returncode, "out": p.stdout, "err": p.stderr, "peak_mb": peak}))
"""


@dataclass(frozen=True)
class Measured:
    rc: int
    out: str
    err: str
    peak_mb: float

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


def run_measured(*args: str) -> Measured:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("TPM2TOOLS_TCTI", None)
    p = subprocess.run([sys.executable, "-c", _PARENT, sys.executable, "-m", "tpmtop", *args],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    d = json.loads(p.stdout)
    return Measured(d["rc"], d["out"], d["err"], d["peak_mb"])


def assert_refused(m: Measured, *says: str) -> None:
    """Exit status 2, one short line on stderr that says ``says``, nothing on stdout, peak
    RSS under the bound."""
    assert m.rc == 2, (m.rc, m.err[-500:])
    assert len(m.err_lines) == 1, m.err[-1000:]
    assert len(m.err_lines[0]) < 300, m.err_lines[0][:400]
    for s in says:
        assert s in m.err_lines[0], m.err_lines[0]
    assert m.peak_mb < PEAK_RSS_MB, m.peak_mb


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst
