"""`p` names a chip (issue 56): typing a built-in chip's name prices the projection with that
chip's profile (TPM time, so the replay's op p50s are dropped: one basis); a number is still N."""

from __future__ import annotations

from tests.helpers.paths import SLB_CAPTURE
from tests.helpers.tui import SIZE, app_for, until
from tpmtop.sources.replay import ReplaySource, load


def _text(app) -> str:
    return " ".join(str(app.screen.query_one("#projection-text").render()).split())


async def test_p_prices_with_a_named_chip(tmp_path):
    from tpmtop.tui.screens.projection import ProjectionScreen

    app = app_for(ReplaySource(load(SLB_CAPTURE), str(SLB_CAPTURE)), tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, ProjectionScreen), what="the projection")
        assert "chip profile" not in _text(app)
        box = app.screen.query_one("#projection-n")
        box.value = "npct750"
        await pilot.press("enter")
        await until(pilot, lambda: "chip profile npct750" in _text(app), what="priced with the npct750")
        text = _text(app)
        assert "E0 PCR_Extend 3,154.0 µs" in text and "S StartAuthSession 69,372.0 µs" in text
        # 1,000 × (18,336 + 69,372 + 1,584 + 12,078) µs: the chip's TPM time, not the replay's op p50s
        assert "101,370 µs" in text
        box.value = "not-a-chip"  # neither a number nor a chip: nothing changes
        await pilot.press("enter")
        assert "chip profile npct750" in _text(app)
