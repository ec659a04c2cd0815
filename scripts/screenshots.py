#!/usr/bin/env python3
"""Make the README's screenshots from the real app: live on a private swtpm, and in replay.

    .venv/bin/python scripts/screenshots.py            # or: make screenshots

Writes screenshots/*.svg. The live ones run the real workload (native engine, each session
mode for a few seconds) so their numbers are this machine's; the replay ones use the
committed capture tests/tui_fixtures/slb9670-extend.json (the slb9670 chip profile).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
OUT = REPO / "screenshots"
CAPTURE = REPO / "tests" / "tui_fixtures" / "slb9670-extend.json"


async def live_shots() -> None:
    from tpmtop.connect import open_tpm
    from tpmtop.tui.app import TpmtopApp
    from tpmtop.sources.live import LiveSource
    from tpmtop.tui.screens.main import MainScreen

    src = LiveSource(open_tpm(sim=True), start_running=True, rate=200, mode="none", poll_interval=0.5)
    try:
        app = TpmtopApp(src, theme="dark", remember=False)
        async with app.run_test(size=(140, 44)) as pilot:
            for mode in ("none", "per-command", "reuse", "saved"):
                await pilot.press(*([] if mode == "none" else ["m"]))
                await pilot.pause(2.5)
            await pilot.press("m", "m")  # back to per-command: the costly one, on screen
            await pilot.pause(3.0)
            main = next(s for s in app.screen_stack if isinstance(s, MainScreen))
            table = main.query_one("#latency-table")
            table.focus()
            # The selected row's histogram is built in a worker that competes with the
            # workload for the GIL: give it time to land before the shot.
            await pilot.pause(2.0)
            app.save_screenshot("live-sim.svg", path=str(OUT))
            await pilot.resize_terminal(80, 24)
            await pilot.pause(0.5)
            app.save_screenshot("live-80x24-handles.svg", path=str(OUT))
            await pilot.press("3")
            await pilot.pause(0.5)
            app.save_screenshot("live-80x24-latency.svg", path=str(OUT))
    finally:
        src.close()


async def replay_shots() -> None:
    from tpmtop.tui.app import TpmtopApp
    from tpmtop.sources.replay import ReplaySource, load

    for theme in ("dark", "light", "high-contrast", "colour-blind-safe"):
        app = TpmtopApp(ReplaySource(load(CAPTURE), CAPTURE), theme=theme, remember=False)
        async with app.run_test(size=(140, 44)) as pilot:
            await pilot.press("m")  # per-command: the 6.10 sequence
            await pilot.pause(0.3)
            app.save_screenshot(f"replay-slb9670-{theme}.svg", path=str(OUT))
            if theme == "dark":
                await pilot.press("question_mark")
                await pilot.pause(0.3)
                app.save_screenshot("help.svg", path=str(OUT))


def main() -> int:
    os.environ["TEXTUAL_ANIMATIONS"] = "none"
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="tpmtop-shots-")  # never touch the user's choice
    OUT.mkdir(exist_ok=True)
    t0 = time.monotonic()
    asyncio.run(replay_shots())
    asyncio.run(live_shots())
    for p in sorted(OUT.glob("*.svg")):
        print(f"{p.relative_to(REPO)}  {p.stat().st_size // 1024} KiB")
    print(f"done in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
