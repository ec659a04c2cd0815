"""The layers hold, and the headless core never imports Textual or Rich.

Two checks. ``lint-imports`` (import-linter, contracts in pyproject.toml) reads every import
statement, including those inside functions: tpm -> sessions/recorder -> capture/bench ->
boot/export/profiles -> sources -> tui -> cli, and no Textual/Rich below the TUI. And at run
time, in fresh interpreters (Harlequin's import-hygiene test): importing every core module
loads neither, and neither does building the CLI's parser — ``tpmtop handles`` over SSH must
not pay for a TUI it does not show.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import REPO


def test_layers_contract_holds():
    """`lint-imports` keeps every contract in pyproject.toml."""
    lint = Path(sys.executable).with_name("lint-imports")
    assert lint.exists(), "import-linter is not installed in this venv: run `make bootstrap` (test extras)"
    r = subprocess.run([str(lint), "--no-cache"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


CHECK_ALL = """
import importlib, pkgutil, sys
import tpmtop
mods = [m.name for m in pkgutil.walk_packages(tpmtop.__path__, 'tpmtop.')
        if not m.name.startswith('tpmtop.tui') and m.name not in ('tpmtop.__main__',)]
for name in mods:
    importlib.import_module(name)
    bad = sorted(m for m in ('textual', 'rich') if m in sys.modules)
    if bad:
        print(name, ','.join(bad))
        break
print('checked', len(mods))
"""


def test_no_core_module_loads_a_tui_at_run_time():
    """Every module outside tpmtop.tui, imported one after another: no textual, no rich."""
    r = subprocess.run([sys.executable, "-c", CHECK_ALL], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-1].startswith("checked") and int(lines[-1].split()[1]) > 40, r.stdout
    assert len(lines) == 1, f"imported a TUI: {lines[0]}"


def test_building_the_whole_parser_imports_no_tui():
    """Every subcommand's parser, the dashboard's options included, built at once."""
    code = ("import sys; from tpmtop.cli import build_parser; "
            "build_parser(eager=True).parse_args(['handles', '--sim']); "
            "print(','.join(m for m in ('textual', 'rich') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def test_version_and_help_import_no_subcommand():
    """`tpmtop --version` and `tpmtop --help` over SSH load no subcommand's module and no TPM
    stack; `tpmtop handles --help` loads its own module only."""
    code = ("import sys, contextlib, io\n"
            "from tpmtop.cli import main\n"
            "for argv in (['--version'], ['--help'], ['handles', '--help']):\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        try:\n"
            "            main(argv)\n"
            "        except SystemExit:\n"
            "            pass\n"
            "    print(argv[0], sorted(m for m in sys.modules if m.startswith(('tpmtop.cli.', 'tpm2_pytss', "
            "'tpmtop.profiles.loader', 'textual'))))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    top = "'tpmtop.cli.dashboard_args'"  # the top-level parser's own options (argparse only)
    assert r.stdout.splitlines() == ["--version []", f"--help [{top}]",
                                     f"handles ['tpmtop.cli.common', {top}, 'tpmtop.cli.tpm_commands']"], r.stdout


def test_info_and_handles_import_no_tpm2_pytss_and_no_hdrh():
    """`tpmtop info --sim` and `tpmtop handles --sim` over SSH: GetCapability is marshalled and
    read by tpmtop itself, the transport is no PyTCTI, so tpm2-pytss (and the cryptography it
    pulls in) is never imported — and both still print what the TPM holds. Both record a few
    exchanges but read no histogram: hdrh (with the ctypes, base64 and zlib it loads) is imported
    only when a histogram first holds a value, so neither command pays for it at start-up; nor
    for ctypes by keeping the private swtpm on its caller's CPU (tpmtop.tpm.placement), which
    starts after more commands than either sends. (One interpreter for both checks: each
    command starts a swtpm.)"""
    code = ("import sys, contextlib, io\n"
            "from tpmtop.cli import main\n"
            "for argv in (['info', '--sim'], ['handles', '--sim']):\n"
            "    out = io.StringIO()\n"
            "    with contextlib.redirect_stdout(out):\n"
            "        rc = main(argv)\n"
            "    print(argv[0], rc, sorted({m.split('.')[0] for m in sys.modules if m.startswith(('tpm2_pytss', "
            "'cryptography'))}), repr(out.getvalue().splitlines()[-1]))\n"
            "    print(argv[0], rc, sorted(m for m in sys.modules if m.startswith(('hdrh', 'pyhdrh', 'ctypes'))))\n"
            "from tpmtop.stats import LatencyHistogram\n"
            "h = LatencyHistogram()\n"
            "h.record(30_000)\n"
            "print('recorded', h.count, 'hdrh' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0::2][:2] == [
        "info 0 [] 'TPM2_PT_MAX_COMMAND_SIZE      4096'",
        "handles 0 [] 'no transient objects, sessions or persistent objects loaded'"], r.stdout
    assert lines[1::2][:2] + lines[4:] == ["info 0 []", "handles 0 []", "recorded 1 True"], r.stdout


def test_histogram_layout_is_hdrhs():
    """tpmtop.stats works out HdrHistogram's bucket layout without importing hdrh; it must be
    the layout hdrh builds for the same range (a batch records each value at its slot's floor)."""
    from hdrh.histogram import HdrHistogram

    from tpmtop import stats

    h = HdrHistogram(stats.LOWEST_NS, stats.HIGHEST_NS, stats.SIGNIFICANT_DIGITS)
    assert (stats._UNIT_BITS, stats._SUB_BITS) == (h.unit_magnitude, h.sub_bucket_half_count_magnitude + 1)
    for ns in (1_000, 1_023, 2_047, 2_048, 30_123, 999_999, 123_456_789, 59_999_999_999):
        assert stats._bucket_floor(ns) == h.get_lowest_equivalent_value(ns)


def test_version_and_help_import_nothing_heavy():
    """Issue 55 item 8: to list the modes in its help the CLI imported tpmtop.sessions.modes,
    and with it dataclasses, inspect and ast: half the CLI's import, `--help` ×2.2 `python -c
    pass`. The names alone (tpmtop.sessions.names) are an enum. A fresh interpreter each, so
    that nothing the test runner loaded counts."""
    heavy = ("dataclasses", "inspect", "ast", "tpmtop.sessions.modes")
    for argv in (["--version"], ["--help"]):
        code = ("import sys, contextlib, io\n"
                "from tpmtop.cli import main\n"
                "with contextlib.redirect_stdout(io.StringIO()):\n"
                "    try:\n"
                f"        main({argv!r})\n"
                "    except SystemExit:\n"
                "        pass\n"
                f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "[]", (argv, r.stdout)
