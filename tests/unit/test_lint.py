"""Types and lint, inside `make test`: mypy --strict over the whole package and ruff (E, F, W,
B, I, UP, SIM, RUF, PERF, PTH, RET, with the rules it leaves out named and explained in
pyproject.toml), both as configured there, with zero findings."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.paths import REPO

ROOT = REPO
RUFF = ("ruff", "check", "--no-cache", "tpmtop", "tests", "benchmarks", "scripts", "setup.py")
MYPY = ("mypy",)
LINT_IMPORTS = ("lint-imports", "--no-cache")  # run by tests/unit/test_import_hygiene.py


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    p = _run(*RUFF)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_configuration_is_strict_and_wide():
    """What the two checks above enforce cannot quietly narrow: mypy is strict for the whole
    package (no module opted out), and ruff selects the wider rule families."""
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mypy = cfg["tool"]["mypy"]
    assert mypy["strict"] is True and mypy["files"] == ["tpmtop"]
    for o in mypy.get("overrides", []):  # only libraries without types may be relaxed
        assert all(not m.startswith("tpmtop") for m in o["module"]), o
        assert set(o) <= {"module", "ignore_missing_imports"}, o
    assert {"SIM", "RUF", "PERF", "PTH", "RET"} <= set(cfg["tool"]["ruff"]["lint"]["select"])


def test_mypy_finds_nothing():
    # The cache (.mypy_cache, beside pyproject.toml) makes a re-run take a second.
    p = _run(*MYPY)
    assert p.returncode == 0, p.stdout + p.stderr


def test_pre_commit_runs_what_make_test_runs():
    """.pre-commit-config.yaml's hooks are these checks, word for word, with the venv's tools."""
    import yaml

    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}
    assert {k: h["entry"].split() for k, h in hooks.items()} == {
        "ruff": [".venv/bin/python", "-m", *RUFF],
        "mypy": [".venv/bin/python", "-m", *MYPY],
        "lint-imports": [".venv/bin/" + LINT_IMPORTS[0], *LINT_IMPORTS[1:]],
    }
    assert all(h["pass_filenames"] is False for h in hooks.values())  # whole tree, as here
