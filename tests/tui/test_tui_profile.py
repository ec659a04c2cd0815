"""``--profile``/``--seed`` on the dashboard: the header says a profile is applied (live and in
replay), and the option is refused where it cannot mean anything — one line, exit status 2."""

from __future__ import annotations

import pytest

from tests.helpers.paths import TESTS
from tests.helpers.tui import SIZE, app_for, header_text, main_screen, until
from tpmtop.cli import main
from tpmtop.connect import open_tpm
from tpmtop.profiles import load_profile
from tpmtop.profiles.apply import apply_profile, describe
from tpmtop.sources.live import LiveSource
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.tui.app import TpmtopApp

REPLAY_FIXTURE = TESTS / "tui_fixtures" / "slb9670-extend.json"


async def test_header_names_the_applied_profile(tmp_path):
    """A live --sim dashboard with slb9670 applied says 'profile slb9670' next to 'simulated'."""
    conn = open_tpm(sim=True)
    profile = load_profile("slb9670")
    apply_profile(conn, profile, seed=7)
    src = LiveSource(conn, start_running=False, poll_interval=0.3, profile_note=describe(profile, 7))
    try:
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: src.identity is not None, what="first poll")
            await pilot.pause(0.1)
            text = header_text(app)
            assert "simulated profile slb9670" in text, text
            assert "seed 7" in str(main_screen(app).query_one("#header").tooltip)
        assert src.tpm_json()["profile"] == "slb9670"  # and so does an export
    finally:
        src.close()


async def test_replay_header_names_the_capture_profile():
    """Replay shows the profile the capture was taken with (its tpm.profile)."""
    app = TpmtopApp(ReplaySource(load(REPLAY_FIXTURE), REPLAY_FIXTURE), theme="dark", remember=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)
        assert "profile slb9670" in header_text(app)


@pytest.mark.parametrize("argv, needle", [
    (["--profile", "slb9670"], "add --sim"),
    (["--passive", "--profile", "slb9670"], "--passive"),
    (["--sim", "--seed", "3"], "--seed goes with --profile"),
    (["--profile", "slb9670", "replay", str(REPLAY_FIXTURE)], "replay shows a capture's own timings"),
    (["--sim", "--profile", "no-such-chip"], "no profile 'no-such-chip'"),
])
def test_refused_with_one_line_and_status_2(argv, needle, capsys, monkeypatch):
    """Refused before any TPM is opened or any screen drawn."""
    monkeypatch.delenv("TPM2TOOLS_TCTI", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err
