"""Types and lint, inside `make test`: mypy (strict for tpm/, capture/, sessions/, sources/,
viewmodel/, recorder and stats; default elsewhere) and ruff (E, F, W, B, I, UP), both as
configured in pyproject.toml, with zero findings. Ruff checks every file; the modules
mypy still skips are listed, with the reason, in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.paths import REPO

ROOT = REPO


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    p = _run("ruff", "check", "--no-cache", "tpmtop", "tests", "benchmarks", "scripts")
    assert p.returncode == 0, p.stdout + p.stderr


def test_mypy_finds_nothing():
    # The cache (.mypy_cache, beside pyproject.toml) makes a re-run take a second.
    p = _run("mypy")
    assert p.returncode == 0, p.stdout + p.stderr
