#!/usr/bin/env python3
"""Make the screenshots of README.md and docs/ from the real app: live on a private swtpm, and in replay.

    .venv/bin/python scripts/screenshots.py            # or: make screenshots

Writes screenshots/*.svg. The live ones run the real workload from the default settings (as
`make run` starts it) at 120×40, 80×24 and 200×50 with no key pressed, once Modes shows
per-command's ratio to the baseline, so their numbers are this machine's; the replay ones use the
committed capture tests/tui_fixtures/slb9670-extend.json (the slb9670 chip profile); the
kernel one, tpmtop --kernel on the 6.12 kept-session trace of tests/fixtures/kernel.
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


SIZES = ((120, 40), (80, 24), (200, 50))  # what most terminals open at, the smallest, a wide one


async def live_shots() -> None:
    """The dashboard as `make run` opens it (tpmtop --sim, default rate, mode and engine) with
    no key pressed: per-command runs, and Modes shows its ratio to the `none` baseline the
    workload measures by itself. Taken once that ratio is on screen."""
    from tpmtop.connect import open_tpm
    from tpmtop.sources.live import LiveSource
    from tpmtop.tui.app import TpmtopApp
    from tpmtop.tui.screens.main import MainScreen

    src = LiveSource(open_tpm(sim=True))  # the defaults: no argument here
    try:
        app = TpmtopApp(src, theme="dark", remember=False)
        async with app.run_test(size=SIZES[0]) as pilot:
            main = next(s for s in app.screen_stack if isinstance(s, MainScreen))
            deadline = time.monotonic() + 120
            while "vs none" not in str(main.query_one("#bars").render()) or " ×" not in str(
                    main.query_one("#bars").render()):
                if time.monotonic() > deadline:
                    raise SystemExit("screenshots: the ratio to none never showed")
                await pilot.pause(0.2)
            await pilot.pause(6.0)  # a few seconds of the per-second series and more samples
            main.query_one("#latency-table").focus()
            # The selected row's histogram is built in a worker that competes with the
            # workload for the GIL: give it time to land before the shot.
            await pilot.pause(2.5)
            for w, h in SIZES:
                await pilot.resize_terminal(w, h)
                await pilot.pause(1.5)
                app.save_screenshot(f"live-{w}x{h}.svg", path=str(OUT))
            await pilot.resize_terminal(80, 24)
            await pilot.press("4")
            await pilot.pause(1.0)
            app.save_screenshot("live-80x24-modes.svg", path=str(OUT))
    finally:
        src.close()


async def replay_shots() -> None:
    from tpmtop.sources.replay import ReplaySource, load
    from tpmtop.tui.app import TpmtopApp

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


async def kernel_shots() -> None:
    """`tpmtop --kernel` on the 6.12 kept-session trace (tests/fixtures/kernel), read from the
    fixture itself as the kernel's trace_pipe would be (by its path in the repository, so the
    header names that file, not a temporary one); the Latency table focused, so the extend's
    histogram shows the kept-session extends apart from those that set a session up."""
    from tpmtop.kernel.tap import KernelTap
    from tpmtop.sources.kernel import KernelSource
    from tpmtop.tui.app import TpmtopApp
    from tpmtop.tui.screens.main import MainScreen

    trace = Path("tests") / "fixtures" / "kernel" / "trace-6.12-kept-session-ops.txt"
    here = os.getcwd()
    os.chdir(REPO)
    tap = KernelTap(trace_path=str(trace), poll_s=0.05).start()
    try:
        app = TpmtopApp(KernelSource(tap), theme="dark", remember=False)
        async with app.run_test(size=SIZES[0]) as pilot:
            deadline = time.monotonic() + 60
            while len(tap.commands) < 14:
                if time.monotonic() > deadline:
                    raise SystemExit("screenshots: the kernel trace was not read")
                await pilot.pause(0.1)
            await pilot.pause(1.5)
            next(s for s in app.screen_stack if isinstance(s, MainScreen)).query_one("#latency-table").focus()
            await pilot.pause(1.0)
            app.save_screenshot("kernel-120x40.svg", path=str(OUT))
    finally:
        tap.close()
        os.chdir(here)


def main() -> int:
    os.environ["TEXTUAL_ANIMATIONS"] = "none"
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="tpmtop-shots-")  # never touch the user's choice
    OUT.mkdir(exist_ok=True)
    for old in ("live-sim.svg", "live-80x24-handles.svg", "live-80x24-latency.svg"):
        (OUT / old).unlink(missing_ok=True)  # replaced by live-WxH.svg
    t0 = time.monotonic()
    asyncio.run(replay_shots())
    asyncio.run(kernel_shots())
    asyncio.run(live_shots())
    for p in sorted(OUT.glob("*.svg")):
        print(f"{p.relative_to(REPO)}  {p.stat().st_size // 1024} KiB")
    print(f"done in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
