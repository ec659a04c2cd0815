"""What a user installs: the wheel, its themes and data, the man pages and the shell completions.

The man pages and completions are built by ``make man completions`` (tpmtop/cli/distfiles.py,
from the CLI's parser) and checked as a reader and a shell would use them: ``man`` renders each
page without a warning, and each completion script passes its shell's syntax check and completes
a real command line (bash's completion function with COMP_WORDS set, fish's ``complete -C``).

The wheel is built from a copy of the tree as ``python -m build`` builds it (sdist, then the wheel
from the sdist; without build isolation, so no download: the build requirements are test extras),
must build without a warning, and is installed with ``--no-deps`` into a new venv that sees the
test venv's site-packages through a .pth file for its dependencies (that they satisfy the wheel's
metadata is checked with ``pip check``). Nothing of the repository is on that venv's path: what
runs there is the wheel.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers.paths import REPO
from tpmtop import __version__
from tpmtop.cli import SUBCOMMANDS, build_parser

THEMES = {"dark", "light", "high-contrast", "colour-blind-safe"}
BASH = "bash-completion/completions/tpmtop"
ZSH = "zsh/site-functions/_tpmtop"
FISH = "fish/vendor_completions.d/tpmtop.fish"


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
    kw.setdefault("timeout", 300)
    return subprocess.run(argv, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def share(tmp_path_factory) -> Path:
    """``make man completions`` into a temporary share/ (bootstrap left out: this venv is set up)."""
    out = tmp_path_factory.mktemp("distfiles") / "share"
    r = _run(["make", "-s", "-o", "bootstrap", "man", "completions", f"PY={sys.executable}", f"SHARE_DIR={out}"],
             cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


# -- man pages ------------------------------------------------------------------------------

def _man(page: Path) -> tuple[str, str]:
    """The page as man shows it (no hyphenation, spaces collapsed), and roff's warnings."""
    r = _run(["man", "--warnings", "--nh", "--nj", "-l", str(page)], env={**os.environ, "MANWIDTH": "100"})
    assert r.returncode == 0, r.stderr
    return " ".join(r.stdout.split()), r.stderr


def test_a_man_page_for_tpmtop_and_one_per_subcommand(share):
    pages = {p.name for p in (share / "man/man1").iterdir()}
    assert pages == {"tpmtop.1"} | {f"tpmtop-{name}.1" for name in SUBCOMMANDS}


def test_man_pages_render_without_warnings_and_name_every_option(share):
    """Each page says what it is and lists every option its parser has, so an option another
    change adds to a subcommand is in the next build's page."""
    text, warnings = _man(share / "man/man1/tpmtop.1")
    assert warnings == ""
    assert "tpmtop - see what a TPM 2.0 is doing" in text
    for name in SUBCOMMANDS:
        assert f"tpmtop-{name}(1)" in text  # COMMANDS and SEE ALSO
    for opt in ("--sim", "--theme", "--list-themes", "--passive"):
        assert opt in text
    for name, sp in _subparsers(build_parser(eager=True)).items():
        text, warnings = _man(share / f"man/man1/tpmtop-{name}.1")
        assert warnings == "", name
        assert f"tpmtop-{name} - {SUBCOMMANDS[name][1][:30]}" in " ".join(text.split()), name
        assert f"tpmtop {name}" in text  # the synopsis
        roff = (share / f"man/man1/tpmtop-{name}.1").read_text()
        for action in sp._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue  # -h is every page's; a hidden option is hidden here too
            for opt in action.option_strings:
                assert opt.replace("-", "\\-") in roff, f"tpmtop-{name}.1 lacks {opt}"


# -- completions ----------------------------------------------------------------------------

def _bash_complete(share: Path, *words: str) -> list[str]:
    """Source the completion script and call its function as bash does for ``tpmtop <words>``."""
    quoted = " ".join(shlex.quote(w) for w in words)
    script = (f"source {share / BASH}\n"
              f"COMP_WORDS=(tpmtop {quoted})\n"
              f"COMP_CWORD={len(words)}\n"
              "_shtab_tpmtop\n"
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    r = _run(["bash", "--norc", "--noprofile", "-c", script], cwd=REPO)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_bash_completion_parses_and_completes(share):
    assert _run(["bash", "-n", str(share / BASH)]).returncode == 0
    assert _bash_complete(share, "be") == ["bench"]
    assert set(_bash_complete(share, "")) == set(SUBCOMMANDS)
    assert _bash_complete(share, "bench", "--mo") == ["--modes"]
    assert _bash_complete(share, "--mode", "") == ["none", "per-command", "reuse", "saved"]
    assert _bash_complete(share, "profile", "") == ["record", "from-capture", "from-trace", "list", "show"]
    # a capture argument completes file names (here, from the repository's root)
    assert "tests" in _bash_complete(share, "replay", "tes")


# zsh completes only inside its line editor: an interactive zsh on a pseudo-terminal (zpty)
# with the completion system loaded from the generated file types the words and a TAB, and the
# line it shows afterwards is read until it holds the completion (or the time-out fails it).
ZSH_SESSION = r"""
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "fpath=({dir} \$fpath); autoload -Uz compinit; compinit -u -D; PROMPT='> '"
zpty -w z $'tpmtop be\t'
zpty -r z out '*tpmtop bench*'
zpty -w z $'\C-u'
zpty -w z $'tpmtop bench --mo\t'
zpty -r z out '*tpmtop bench --modes*'
print completed
zpty -d z
"""


def test_zsh_completion_parses_and_completes(share):
    r = _run(["zsh", "-n", str(share / ZSH)])
    assert r.returncode == 0, r.stderr
    assert (share / ZSH).read_text().startswith("#compdef tpmtop")
    r = _run(["zsh", "-f", "-c", ZSH_SESSION.format(dir=share / ZSH.rsplit("/", 1)[0])], timeout=120)
    assert (r.returncode, r.stdout.splitlines()[-1:]) == (0, ["completed"]), r.stdout[-2000:] + r.stderr


def test_fish_completion_parses_and_completes(share):
    r = _run(["fish", "--no-config", "-n", str(share / FISH)])
    assert r.returncode == 0, r.stderr

    def complete(line: str) -> list[str]:
        r = _run(["fish", "--no-config", "-c", f"source {share / FISH}; complete -C '{line}'"])
        assert r.returncode == 0, r.stderr
        return [row.split("\t")[0] for row in r.stdout.splitlines()]

    assert complete("tpmtop be") == ["bench"]
    assert complete("tpmtop bench --mo") == ["--modes"]
    assert complete("tpmtop --mode ") == ["none", "per-command", "reuse", "saved"]


# -- the wheel ------------------------------------------------------------------------------

def _copy_tree(dest: Path) -> None:
    """The files a clone has (tracked, and new ones not ignored), symbolic links kept."""
    r = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO)
    assert r.returncode == 0, r.stderr
    for rel in filter(None, r.stdout.split("\0")):
        src = REPO / rel
        if not src.is_symlink() and not src.exists():
            continue  # deleted in the work tree, not yet in git
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            (dest / rel).symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dest / rel)


def _install_wheel(tmp: Path) -> Path:
    """A new venv with the wheel installed in it; returns the venv."""
    src, dist, venv = tmp / "src", tmp / "dist", tmp / "venv"
    _copy_tree(src)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # its notes are not ours
    r = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)], env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    noise = [line for line in (r.stdout + r.stderr).splitlines()
             if "warning" in line.lower() or "deprecat" in line.lower()]
    assert noise == [], "python -m build is not quiet:\n" + "\n".join(noise)
    wheels = list(dist.glob("tpmtop-*.whl"))
    assert [w.name for w in wheels] == [f"tpmtop-{__version__}-py3-none-any.whl"]

    r = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert r.returncode == 0, r.stderr
    vpy = venv / "bin/python"
    purelib = Path(_run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    # The dependencies: this venv's site-packages, after the new venv's own (where the wheel goes).
    (purelib / "tpmtop-test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    r = _run([sys.executable, "-m", "pip", "--python", str(vpy), "install", "--no-deps", "--no-index", "-q",
              str(wheels[0])])
    assert r.returncode == 0, r.stdout + r.stderr
    return venv


def _in_venv(venv: Path, *argv: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(tmp), XDG_CONFIG_HOME=str(tmp / "config"), PATH=f"{venv / 'bin'}:{env['PATH']}")
    return _run(list(argv), cwd=tmp, env=env)


def test_the_wheel_in_a_fresh_venv(tmp_path, share):
    """One test, so that the wheel is built once whichever pytest-xdist worker runs it."""
    venv = _install_wheel(tmp_path / "wheel")
    home = tmp_path / "home"
    home.mkdir()
    _runs_with_its_themes_and_data(venv, home)
    _carries_every_file_of_the_package(venv)
    _installs_the_man_pages_and_completions(venv, share)


def _runs_with_its_themes_and_data(installed: Path, tmp_path: Path) -> None:
    where = _in_venv(installed, "python", "-c", "import tpmtop; print(tpmtop.__file__)", tmp=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(installed), where.stdout + where.stderr

    r = _in_venv(installed, "tpmtop", "--version", tmp=tmp_path)
    assert (r.returncode, r.stdout) == (0, f"tpmtop {__version__}\n"), r.stderr
    r = _in_venv(installed, "tpmtop", "--help", tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: tpmtop") and all(name in r.stdout for name in SUBCOMMANDS)

    r = _in_venv(installed, "tpmtop", "--list-themes", tmp=tmp_path)
    assert (r.returncode, r.stderr) == (0, "")
    assert {line.split()[0] for line in r.stdout.splitlines()} == THEMES
    assert r.stdout.splitlines()[0].split() == ["dark", "(default)"]

    # the package data is used: a built-in profile checked against its schema, a capture read
    r = _in_venv(installed, "tpmtop", "profile", "show", "slb9670", tmp=tmp_path)
    assert r.returncode == 0 and "PCR_Extend" in r.stdout, r.stderr
    sample = str(REPO / "tests/captures/sample-1.0.json")
    r = _in_venv(installed, "tpmtop", "compare", sample, sample, tmp=tmp_path)
    assert r.returncode == 0 and "within noise" in r.stdout, r.stderr

    r = _run([sys.executable, "-m", "pip", "--python", str(installed / "bin/python"), "check"])
    assert r.returncode == 0, r.stdout + r.stderr


def _carries_every_file_of_the_package(installed: Path) -> None:
    """Every data file under tpmtop/ in the repository (the themes through their link) is
    installed: a new kind of data file needs its glob in pyproject.toml's package-data."""
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(installed), "platbase": str(installed)}))
    tracked = _run(["git", "ls-files", "tpmtop"], cwd=REPO).stdout.split()
    wanted = set()
    for rel in tracked:
        path = REPO / rel
        if path.is_symlink() and path.is_dir():
            wanted |= {f"{rel}/{p.name}" for p in path.iterdir()}
        elif path.exists():
            wanted.add(rel)
    missing = sorted(rel for rel in wanted if not (purelib / rel).is_file())
    assert missing == [], "not in the wheel"
    assert {p.stem for p in (purelib / "tpmtop/themes").glob("*.toml")} == THEMES


def _installs_the_man_pages_and_completions(installed: Path, share: Path) -> None:
    """Under the venv's share/, as make builds them."""
    built = sorted(p.relative_to(share) for p in share.rglob("*") if p.is_file())
    assert built
    for rel in built:
        got = installed / "share" / rel
        assert got.is_file(), f"not installed: share/{rel}"
        if rel.suffix != ".1":  # the pages carry the day they were made
            assert got.read_text() == (share / rel).read_text(), rel
