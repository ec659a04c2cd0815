"""The headless core never imports Textual or Rich (Harlequin's import-hygiene test).

Each module is imported in a fresh interpreter: ``tpmtop handles`` over SSH must not pay for
a TUI it does not show, and the core must stay usable without one.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HEADLESS = [
    "tpmtop.cli",
    "tpmtop.cli.tpm_commands",
    "tpmtop.cli.dashboard_args",
    "tpmtop.recorder",
    "tpmtop.stats",
    "tpmtop.tpm.connection",
    "tpmtop.tpm.handles",
    "tpmtop.tpm.identity",
    "tpmtop.sessions.workload",
    "tpmtop.bench",
    "tpmtop.capture",
    "tpmtop.sources.live",
    "tpmtop.sources.model",
    "tpmtop.sources.replay",
    "tpmtop.sources.passive",
    "tpmtop.tui.actions",
    "tpmtop.tpm.decode",
    "tpmtop.patterns",
    "tpmtop.importers.pcap",
    "tpmtop.exporters.pcapng",
    "tpmtop.kernel.probes",
    "tpmtop.kernel.trace_pipe",
    "tpmtop.kernel.live",
    "tpmtop.cli.decode",
    "tpmtop.cli.kernel",
    "tpmtop.cli.import_pcap",
]

CHECK = ("import importlib, sys; importlib.import_module({mod!r}); "
         "bad = sorted(m for m in ('textual', 'rich') if m in sys.modules); print(','.join(bad))")


@pytest.mark.parametrize("mod", HEADLESS)
def test_headless_module_imports_no_tui(mod):
    """Importing {mod} alone loads neither textual nor rich."""
    r = subprocess.run([sys.executable, "-c", CHECK.format(mod=mod)], capture_output=True, text=True, timeout=60)
    if r.returncode and "ModuleNotFoundError" in r.stderr and mod in r.stderr:
        pytest.skip(f"{mod} is not in this tree")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"{mod} imported {r.stdout.strip()}"


def test_building_the_whole_parser_imports_no_tui():
    """`tpmtop handles` builds every subcommand's parser, the dashboard's options included."""
    code = ("import sys; from tpmtop.cli import build_parser; build_parser().parse_args(['handles', '--sim']); "
            "print(','.join(m for m in ('textual', 'rich') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""
