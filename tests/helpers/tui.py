"""Helpers and fixtures shared by the dashboard's Pilot tests (real swtpm, nothing mocked)."""

from __future__ import annotations

import time

import pytest

from tpmtop.connect import open_tpm
from tpmtop.sources.live import LiveSource
from tpmtop.tui.app import TpmtopApp
from tpmtop.tui.screens.main import MainScreen

SIZE = (120, 40)


@pytest.fixture(autouse=True)
def _private_config(tmp_path, monkeypatch):
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


def app_for(src, tmp_path, **kw) -> TpmtopApp:
    return TpmtopApp(src, theme="dark", remember=False, export_dir=str(tmp_path), **kw)


async def until(pilot, cond, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def main_screen(app) -> MainScreen:
    return next(s for s in app.screen_stack if isinstance(s, MainScreen))


def header_text(app) -> str:
    return str(main_screen(app).query_one("#header").render())
