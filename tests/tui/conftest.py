"""The dashboard room: Pilot tests of the Textual app on real swtpm processes, replays and
traces, the snapshot tests (their SVGs in __snapshots__/<test file>/, next to the test file)
and the terminal tests in a real pty. Helpers (SIZE, app_for, until, main_screen,
header_text) are in tests/helpers/tui.py."""

from __future__ import annotations

import pytest

from tpmtop.connect import open_tpm
from tpmtop.sources.live import LiveSource


@pytest.fixture(autouse=True)
def _private_config(tmp_path, monkeypatch):
    """Every dashboard test: a config directory of its own (themes, remembered settings) and
    no animations, whatever the user running the tests has."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")


@pytest.fixture
def live(tmp_path):
    """A LiveSource on a fresh private swtpm; closed (handles flushed, swtpm stopped) after."""
    made = []

    def make(profile: str | None = None, **kw):
        conn = open_tpm(sim=True)
        if profile is not None:  # a chip's latencies, as `tpmtop --sim --profile NAME` applies them
            from tpmtop.profiles import load_profile
            from tpmtop.profiles.apply import apply_profile

            apply_profile(conn, load_profile(profile))
        kw.setdefault("poll_interval", 0.3)
        src = LiveSource(conn, **kw)
        made.append(src)
        return src

    yield make
    for src in made:
        src.close()
