"""The refresh interval is a setting (tpmtop.settings.Settings.refresh_s): the dashboard starts
on it, and an interval given to the app beats it (as [ and ] change it live)."""

from __future__ import annotations

import pytest

from tests.helpers.paths import TESTS
from tests.helpers.tui import app_for, main_screen
from tpmtop import settings
from tpmtop.settings import Settings
from tpmtop.sources.replay import ReplaySource, load

FIXTURE = TESTS / "tui_fixtures" / "slb9670-extend.json"


@pytest.fixture
def refresh_setting():
    def use(value: float) -> None:
        settings.use(Settings(refresh_s=value))

    yield use
    settings.use(None)


async def test_the_dashboard_starts_on_the_refresh_setting(refresh_setting, tmp_path):
    assert Settings().refresh_s == 0.2
    refresh_setting(1.0)
    app = app_for(ReplaySource(load(FIXTURE), FIXTURE), tmp_path)
    async with app.run_test(size=(120, 40)):
        assert main_screen(app).refresh_s == 1.0
    app = app_for(ReplaySource(load(FIXTURE), FIXTURE), tmp_path, refresh_s=0.5)
    async with app.run_test(size=(120, 40)):
        assert main_screen(app).refresh_s == 0.5


def test_a_bad_refresh_setting_is_one_line(tmp_path):
    from tpmtop.errors import UsageError

    with pytest.raises(UsageError, match="refresh_s"):
        settings.load(env={"XDG_CONFIG_HOME": str(tmp_path)}, flags=["refresh_s=0"])
