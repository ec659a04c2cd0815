"""`tpmtop profile show` as a user runs it (issue 12, item 1).

Its positional argument used to share the top-level --profile's name, so the guard that
refuses a stray --profile refused every `profile show`; the bad-argument cases passed for
that wrong reason. These run it successfully, by name and from a file.
"""

from __future__ import annotations

import json
from importlib import resources

from tests.helpers.processes import run_tpmtop


def _row(stdout: str, command: str) -> list[str]:
    return next(line.split() for line in stdout.splitlines() if line.split()[:1] == [command])


def test_show_builtin_prints_its_figures():
    r = run_tpmtop("profile", "show", "slb9670")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert r.stdout.startswith("# profile slb9670")
    # the published figures, as the built-in file holds them
    assert _row(r.stdout, "ContextLoad")[:3] == ["ContextLoad", "any", "36,977"]
    assert "published" in _row(r.stdout, "ContextLoad")


def test_show_file_prints_that_file(tmp_path):
    raw = json.loads(resources.files("tpmtop.profiles").joinpath("slb9670.json").read_text("utf-8"))
    raw["name"] = "mychip"
    raw["commands"]["ContextLoad"]["any"]["median_us"] = 12345
    f = tmp_path / "mychip.json"
    f.write_text(json.dumps(raw))
    r = run_tpmtop("profile", "show", str(f))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# profile mychip")
    assert _row(r.stdout, "ContextLoad")[:3] == ["ContextLoad", "any", "12,345"]


def test_every_profile_action_takes_debug():
    r = run_tpmtop("profile", "show", "slb9670", "--debug")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# profile slb9670")
    r = run_tpmtop("profile", "--debug", "show", "slb9670")
    assert r.returncode == 0, r.stderr
    for action in ("record", "from-capture", "from-trace"):
        r = run_tpmtop("profile", action, "--help")
        assert r.returncode == 0 and "--debug" in r.stdout, (action, r.stdout)


def test_top_level_profile_still_refused_for_profile_show():
    r = run_tpmtop("--profile", "slb9670", "profile", "show", "slb9670")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--profile" in r.stderr
    assert r.stdout == ""
