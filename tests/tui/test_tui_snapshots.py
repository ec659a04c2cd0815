"""Snapshot tests of replay screens (deterministic: a fixed capture, no TPM, no timers).

Regenerate after an intended change with ``pytest tests/tui/test_tui_snapshots.py --snapshot-update``
and look at the report before committing.
"""

from __future__ import annotations

import pytest

from tests.helpers.paths import TESTS
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.tui.app import TpmtopApp

FIXTURE = TESTS / "tui_fixtures" / "slb9670-extend.json"


@pytest.fixture(autouse=True)
def _determinism(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")
    monkeypatch.delenv("NO_COLOR", raising=False)


def replay_app(theme: str = "dark") -> TpmtopApp:
    return TpmtopApp(ReplaySource(load(FIXTURE), FIXTURE), theme=theme, remember=False)


class TestReplayLayout:
    @pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)], ids=["80x24", "120x40", "200x50"])
    def test_size(self, snap_compare, size):
        """The first screen at the sizes terminals open at: every essential key (space m f x ?
        q) in the footer, no table behind a horizontal scrollbar, one line per mode."""
        assert snap_compare(replay_app(), terminal_size=size)

    @pytest.mark.parametrize("size", [(120, 40), (200, 50)], ids=["120x40", "200x50"])
    def test_per_command_run(self, snap_compare, size):
        """m: the per-command run, its histogram beside the sparkline without wrapping."""
        assert snap_compare(replay_app(), terminal_size=size, press=["m", "3", "down"])

    def test_compact_80x24_tabs(self, snap_compare):
        """At 80×24 panels become tabs; key 4 shows the mode comparison."""
        assert snap_compare(replay_app(), terminal_size=(80, 24), press=["4"])

    def test_compact_latency_tab(self, snap_compare):
        """At 80×24, key 3 shows the latency table with its histogram."""
        assert snap_compare(replay_app(), terminal_size=(80, 24), press=["3"])


class TestReplayActions:
    def test_mode_key_selects_another_run(self, snap_compare):
        """m shows the next mode's run of the capture (per-command: 4 commands per extend)."""
        assert snap_compare(replay_app(), terminal_size=(120, 40), press=["m"])

    def test_help_screen(self, snap_compare):
        """? lists every key from the same table as the footer and the palette."""
        assert snap_compare(replay_app(), terminal_size=(120, 40), press=["question_mark"])


class TestThemes:
    @pytest.mark.parametrize("theme", ["light", "high-contrast", "colour-blind-safe"])
    def test_theme(self, snap_compare, theme):
        """Each shipped theme on the same replay screen."""
        assert snap_compare(replay_app(theme), terminal_size=(120, 40))
