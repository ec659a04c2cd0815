"""The dashboard without a terminal (issue #15 item 8): `tpmtop --sim </dev/null >file` must
not start Textual, write escape codes into the file and spin; it says so, exit 2."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers.processes import REPO, TPMTOP


@pytest.mark.parametrize("argv", [["--sim"], ["--passive"], ["replay", "tests/captures/sample-1.0.json"]],
                         ids=["sim", "passive", "replay"])
def test_no_terminal_exits_2_with_one_line(argv, tmp_path):
    out = tmp_path / "out"
    with open(out, "w") as f:
        env = {k: v for k, v in os.environ.items() if k != "TPM2TOOLS_TCTI"}
        r = subprocess.run(TPMTOP + argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.PIPE,
                           text=True, env=env, cwd=REPO, timeout=60)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and "needs a terminal" in lines[0] and "bench --json" in lines[0]
    assert out.read_bytes() == b""  # no escape codes written into the file
