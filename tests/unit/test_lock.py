"""The suite runs on the versions constraints.txt pins (the bootstrap installs from it; `make
upgrade` refreshes it), and every dependency pyproject.toml names is pinned there."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata

from packaging.requirements import Requirement

from tests.helpers.paths import REPO


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, eq, version = line.partition("==")
            assert eq, f"constraints.txt: {line!r} is not pinned with =="
            pins[_norm(name)] = version.strip()
    return pins


def test_every_installed_package_the_lock_pins_is_at_its_pinned_version():
    pins = _pins()
    installed = {_norm(d.metadata["Name"]): d.version for d in metadata.distributions()}
    off = {n: (v, installed[n]) for n, v in pins.items() if n in installed and installed[n] != v}
    assert not off, f"installed at other versions than constraints.txt pins (pinned, installed): {off}"
    # the suite's own tools are among them: a lock that pinned nothing would pass the check above
    assert {"pytest", "textual", "mypy", "ruff"} <= pins.keys() & installed.keys()


def test_every_dependency_pyproject_names_is_pinned():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    pins = _pins()
    for text in wanted:
        req = Requirement(text)
        assert _norm(req.name) in pins, f"{req.name} (pyproject.toml) is not in constraints.txt: run `make upgrade`"
        assert req.specifier.contains(pins[_norm(req.name)]), \
            f"constraints.txt pins {req.name}=={pins[_norm(req.name)]}, outside pyproject.toml's {req.specifier}"
