#!/usr/bin/env python3
"""How the dashboard holds up under the fastest workload a swtpm allows (not part of the tests).

    .venv/bin/python benchmarks/ui_load.py [--seconds 10] [--mode none] [--json]

Runs the real app (headless Textual driver, 140×44) on a private swtpm with the workload
unpaced (``rate 0``) and reports:

- **events/s ingested**: TPM commands the recorder took in per second while the dashboard
  refreshed from it, and how many of them the refresh loop read (it must keep up: it reads
  the recorder's state, never one message per event);
- **refresh cost**: p50/max of one refresh tick (UI thread);
- **key → screen**: for each key, the worst time from the key event reaching the app (posted
  as the terminal driver posts it) until the first screen update drawn with the key's effect
  in the app's state (a compositor update handed to ``App._display``; the headless driver
  then skips only the terminal write). Target ≤ 100 ms;
- **CPU while paused**: the process's CPU time (all threads, psutil) over a window with the
  workload paused and polling on. Target ≤ 5 % of one core.
- **live ratio**: the Modes panel's per-command/none p50 ratio (what the user reads: per-command
  runs, `none` is the baseline interleaved in bursts), measured in this run at the dashboard's
  default pacing and at max rate (unpaced). Paced operations
  must not pay the host's wake-up (issue #15 item 1): the two must agree within 20 %.
  The last line reads ``live ratio at default pacing / max rate: x<A> / x<B>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine import describe  # noqa: E402 - benchmarks/machine.py

from tpmtop.sessions.modes import MODES  # noqa: E402 - after the path above


async def live_ratio(src, pilot, rate: float, seconds: float) -> tuple[float | None, dict]:
    """per-command p50 / none p50 as the Modes panel computes it, at ``rate``: per-command
    runs and `none` is the baseline the workload interleaves by itself (what a user who
    pressed no key reads), both over the same ``2 × seconds``."""
    from tpmtop.sessions.modes import MODES
    from tpmtop.sources.rows.modes import comparison
    from tpmtop.sources.runs import runs_from_accounts

    src.rate = rate
    src.choose(mode="per-command")
    src.reset_stats()
    await pilot.pause(2 * seconds)
    rows = {r.mode: r for r in comparison(runs_from_accounts(src.accounts()), src.op, MODES) if r.engine == src.engine}
    pc = rows.get("per-command")
    detail = {m: {"p50_us": round(r.p50_us, 1), "ops": r.ops} for m, r in rows.items()}
    return (pc.ratio if pc is not None and pc.ratio else None), detail


async def live_ratios(src, pilot, default_rate: float, seconds: float, rounds: int) -> dict:
    """The ratio at the default pacing and at max rate, in interleaved rounds: this VM's load
    swings by 3x within seconds (other tenants), so one long phase of each would compare two
    different machines. Each round measures both; the medians are reported."""
    out: dict = {"default": [], "max": [], "detail": {}}
    for _ in range(rounds):
        for name, rate in (("default", default_rate), ("max", 0.0)):
            ratio, detail = await live_ratio(src, pilot, rate, seconds)
            if ratio is not None:
                out[name].append(ratio)
            out["detail"][name] = detail
    return out


async def run(seconds: float, mode: str, presses: int, rate: float = 0.0, ratio_seconds: float = 1.5,
              ratio_rounds: int = 5, profile: str | None = None) -> dict:
    import psutil

    from tpmtop.connect import open_tpm
    from tpmtop.sources.live import DEFAULT_RATE, LiveSource
    from tpmtop.tui.app import TpmtopApp
    from tpmtop.tui.screens.main import MainScreen

    ticks: list[float] = []
    orig_tick = MainScreen.tick

    def timed_tick(self):
        t0 = time.perf_counter()
        orig_tick(self)
        ticks.append(time.perf_counter() - t0)

    MainScreen.tick = timed_tick
    conn = open_tpm(sim=True)
    if profile:  # a slow chip: keys must still act at once (the Pilot test checks that they act)
        from tpmtop.profiles import load_profile
        from tpmtop.profiles.apply import apply_profile

        apply_profile(conn, load_profile(profile))
    src = LiveSource(conn, start_running=True, rate=rate, mode=mode)
    proc = psutil.Process()
    out: dict = {"machine": describe(), "mode": mode, "engine": "native", "op": "extend", "rate": rate,
                 "profile": profile}
    try:
        app = TpmtopApp(src, theme="dark", remember=False)
        async with app.run_test(size=(140, 44)) as pilot:
            main = next(s for s in app.screen_stack if isinstance(s, MainScreen))
            await pilot.pause(1.0)  # warm up
            r = await live_ratios(src, pilot, DEFAULT_RATE, ratio_seconds, ratio_rounds)
            out["ratios_default"] = [round(x, 1) for x in r["default"]]
            out["ratios_max"] = [round(x, 1) for x in r["max"]]
            out["ratio_default"] = round(statistics.median(r["default"]), 1) if r["default"] else None
            out["ratio_max"] = round(statistics.median(r["max"]), 1) if r["max"] else None
            out["ratio_default_detail"], out["ratio_max_detail"] = r["detail"]["default"], r["detail"]["max"]
            out["default_rate"] = DEFAULT_RATE
            src.rate = rate
            src.choose(mode=mode)
            src.reset_stats()
            await pilot.pause(1.0)
            rec = src.recorder
            n0, t0 = rec.total, time.perf_counter()
            seen0 = main.dash._seen_seq
            await pilot.pause(seconds)
            n1, t1 = rec.total, time.perf_counter()
            out["events_per_s"] = round((n1 - n0) / (t1 - t0))
            out["events_read_by_ui_per_s"] = round((main.dash._seen_seq - seen0) / (t1 - t0))
            out["ops_per_s"] = round(main.dash.ops_rate.add(sum(a.ops for a in src.accounts().values())))
            out["refresh_ms_p50"] = round(statistics.median(ticks) * 1000, 2)
            out["refresh_ms_max"] = round(max(ticks) * 1000, 2)
            out["refreshes_per_s"] = round(len(ticks) / (seconds + 1.0), 1)

            # key -> screen, under load
            from textual import events
            from textual.app import App

            # Each screen update is stamped with the key's state *as it was drawn*. Waiting
            # instead for "an update after the effect was seen" misses a frame drawn in the same
            # millisecond as the effect and then counts the next refresh (up to 200 ms later).
            stamps: list[tuple[float, object]] = []
            probe = [lambda: None]
            orig_display = App._display

            def display(self, screen, renderable):
                if renderable is not None:
                    stamps.append((time.perf_counter(), probe[0]()))
                return orig_display(self, screen, renderable)

            App._display = display
            stream = main.query_one("#stream")
            effects = {
                "m": lambda: src.mode, "e": lambda: src.engine, "space": lambda: src.running,
                "s": lambda: stream.frozen, "t": lambda: app.theme,
                "3": lambda: main.query_one("#latency-table").has_focus,
            }
            chars = {"space": " "}
            worst: dict[str, float] = {}
            try:
                for key, state in effects.items():
                    times = []
                    for _ in range(presses):
                        if key == "3" and state():
                            main.query_one("#handles-table").focus()
                            await pilot.pause(0.1)
                        before = state()
                        probe[0] = state
                        n = len(stamps)
                        k0 = time.perf_counter()
                        app.post_message(events.Key(key, chars.get(key, key)))
                        shown = None
                        while shown is None and time.perf_counter() - k0 < 10:
                            shown = next((t for t, v in stamps[n:] if v != before), None)
                            await asyncio.sleep(0.001)
                        times.append((shown or time.perf_counter()) - k0)
                        await pilot.pause(0.15)
                    worst[key] = round(max(times) * 1000, 1)
            finally:
                App._display = orig_display
            out["key_to_screen_ms_worst"] = worst
            if not src.running:
                await pilot.press("space")
                await pilot.pause(0.5)
            if src.running:
                await pilot.press("space")
            # CPU while paused (polling every second goes on)
            await pilot.pause(1.5)
            c0 = proc.cpu_times()
            w0 = time.perf_counter()
            await pilot.pause(seconds)
            c1 = proc.cpu_times()
            w1 = time.perf_counter()
            cpu = (c1.user - c0.user + c1.system - c0.system) / (w1 - w0)
            out["cpu_paused_pct_of_one_core"] = round(cpu * 100, 2)
            out["poll_interval_s"] = src.poll_interval
    finally:
        MainScreen.tick = orig_tick
        src.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--mode", default="none", choices=MODES)
    ap.add_argument("--presses", type=int, default=5, help="presses per key")
    ap.add_argument("--rate", type=float, default=0.0, help="workload ops/s (default 0: unpaced, the worst case)")
    ap.add_argument("--ratio-seconds", type=float, default=1.5, help="per mode and round, for the live ratio")
    ap.add_argument("--ratio-rounds", type=int, default=5, help="interleaved rounds of default pacing / max rate")
    ap.add_argument("--profile", metavar="NAME", help="a chip latency profile on the simulator (e.g. slb9670)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ["TEXTUAL_ANIMATIONS"] = "none"
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="tpmtop-bench-")
    r = asyncio.run(run(args.seconds, args.mode, args.presses, args.rate, args.ratio_seconds, args.ratio_rounds,
                        args.profile))
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"machine: {r['machine']}")
    pace = "unpaced" if not r["rate"] else f"{r['rate']:g} ops/s"
    print(f"workload: native/{r['mode']}/extend, {pace}; dashboard 140x44, headless driver")
    print(f"events/s ingested (recorder)        {r['events_per_s']:>8,}")
    print(f"events/s read by the refresh loop   {r['events_read_by_ui_per_s']:>8,}")
    print(f"operations/s                        {r['ops_per_s']:>8,}")
    print(f"refresh tick p50 / max              {r['refresh_ms_p50']} / {r['refresh_ms_max']} ms "
          f"({r['refreshes_per_s']}/s)")
    worst = r["key_to_screen_ms_worst"]
    print("key -> screen, worst of", args.presses, ":", "  ".join(f"{k} {v} ms" for k, v in worst.items()),
          f"  (overall {max(worst.values())} ms; target <= 100)")
    print(f"CPU while paused                    {r['cpu_paused_pct_of_one_core']} % of one core "
          f"(poll every {r['poll_interval_s']:g} s; target <= 5 %)")
    for what, key in (("default pacing", "ratio_default"), ("max rate", "ratio_max")):
        d = r[key + "_detail"]
        rounds = " ".join(f"x{x}" for x in r["ratios_" + key.split("_")[1]])
        print(f"live ratio at {what:<15} per round: {rounds}; last round " +
              "  ".join(f"{m} p50 {v['p50_us']} µs ({v['ops']} ops)" for m, v in d.items()))
    a, b = r["ratio_default"], r["ratio_max"]
    verdict = "within 20 %" if a and b and abs(a - b) / b <= 0.2 else "NOT within 20 %"
    print(f"(default pacing {r['default_rate']:g} ops/s in bursts; {verdict})")
    print(f"live ratio at default pacing / max rate: x{a} / x{b}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
