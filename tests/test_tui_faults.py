"""The dashboard's half of issue 8: faults broken on purpose on a real swtpm, driven with Pilot.

A reset TPM, object slots leaked by another client, a slow chip, and --read-only.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tpmtop.errors import UsageError
from tpmtop.sessions.native import NativeEngine
from tpmtop.tpm.handles import list_handles
from tpmtop.tui import messages as m
from tpmtop.tui.actions import ACTIONS, palette_entries
from tpmtop.sources.model import summary_of
from tpmtop.tui.screens.confirm import ConfirmScreen
from tui_helpers import SIZE, app_for, header_text, main_screen, until
from tui_helpers import _private_config, live  # noqa: F401 - fixtures


def _ops(src) -> int:
    return sum(a.ops for a in src.accounts().values())


def _notices(app) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]


async def _leak_objects(src, n: int) -> list[int]:
    """Load ``n`` transient objects as *another client* would and leave them loaded.

    The private swtpm is on a socket pair: a second connection to it is impossible. This is
    the same state the TPM would be in, though: without a resource manager transient handles
    belong to the TPM, not to a connection, so objects loaded on this socket take the same
    slots another process's would. They run as a job on the TPM's owner thread (never
    interleaved with the workload's commands) labelled with their own origin, and
    ``forget_handle`` drops tpmtop's ownership record, so the dashboard sees them exactly as it
    sees another program's."""
    def make(t):
        e = NativeEngine(t)
        e.create_null_primary()
        return [e.load_null() for _ in range(n)]

    def leak():
        hs = src.on_tpm(make, origin="other")
        for h in hs:
            src.recorder.forget_handle(h)
        return hs

    return await asyncio.to_thread(leak)


async def test_tpm_reset_is_noticed_marked_and_periods_kept_apart(live, tmp_path):
    """A power-cycled TPM: notified, marked in the stream and header, a new period; work goes on."""
    src = live(start_running=True, rate=0, mode="per-command")
    app = app_for(src, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = main_screen(app)
        await until(pilot, lambda: _ops(src) >= 10, what="ops before the reset")

        def reset():
            # On the TPM's owner thread: the reset's TPM2_Startup shares the data socket with the workload.
            src.on_tpm(lambda _t: src.conn.sim.reset())

        await asyncio.to_thread(reset)
        await until(pilot, lambda: src.boundaries, what="reset noticed")
        before = sum(a.ops for p in src.periods for a in p.values())
        assert before >= 10
        await until(pilot, lambda: _ops(src) >= 5, what="workload after the reset")
        # The current period counts on its own: the earlier one no longer grows.
        assert sum(a.ops for p in src.periods for a in p.values()) == before
        await until(pilot, lambda: any("new TPM period" in n and "reset" in n for n in _notices(app)),
                    what="notification")
        assert "TPM period 2" in header_text(app)
        stream = screen.query_one("#stream-view")
        assert any(r.origin == "mark" and "TPM reset" in r.command for r in stream.rows)
        await until(pilot, lambda: "this TPM period only" in str(screen.query_one("#latency").border_subtitle),
                    what="latency panel on the current period")
        assert "1 earlier period kept apart" in str(screen.query_one("#modes").border_subtitle)
        assert src.workload_error is None and src.running
        cap = src.capture()  # an export keeps the periods apart too
        assert {r["period"] for r in cap["runs"]} == {0, 1}
        await pilot.press("space")

        def listed():
            # a job between operations: the workload holds nothing then (per-command)
            return src.on_tpm(list_handles)

        assert await asyncio.to_thread(listed) == []  # the re-established sessions leaked nothing


async def test_object_slots_exhausted_pauses_and_flushing_in_handles_resumes(live, tmp_path):
    """3 objects leaked by another client: the workload pauses with 0x902 explained, pointing at
    the Handles panel; flushing them there (each confirmed: not tpmtop's) lets it run again."""
    src = live(start_running=False, mode="per-command")
    seen = []
    app = app_for(src, tmp_path)
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        screen = main_screen(app)
        screen.book.HIGHLIGHT_S = 0.0
        await until(pilot, lambda: src.identity is not None, what="first poll")
        leaked = await _leak_objects(src, 3)  # a swtpm has 3 transient object slots
        await pilot.press("space")
        await until(pilot, lambda: not src.running and src.pause_reason, what="workload paused itself")
        assert "0x902" in src.workload_error and "Handles panel" in src.workload_error
        assert "object slots full" in header_text(app)
        await until(pilot, lambda: any("Handles panel" in n for n in _notices(app)), what="notification")
        table = screen.query_one("#handles-table")
        for h in leaked:
            key = f"0x{h:08x}"
            await until(pilot, lambda: key in table._shadow, what=f"{key} listed")
            table.focus()
            table.move_cursor(row=table.get_row_index(key))
            await pilot.press("f")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
            await pilot.press("y")
            await until(pilot, lambda: any(isinstance(x, m.HandlesFlushed) and h in x.handles for x in seen),
                        what=f"{key} flushed")
        await pilot.press("space")
        await until(pilot, lambda: _ops(src) >= 3, what="workload running again")
        assert src.running and src.workload_error is None and "object slots" not in header_text(app)


async def test_slow_tpm_keys_stay_prompt_and_quit_is_prompt(live, tmp_path, monkeypatch):
    """slb9670 (a per-command extend takes ~150 ms, the workload holds the TPM nearly always):
    pause/resume reach the screen in under 100 ms — the issue's key-to-screen target, and less
    than one operation, so a key handler that waited for the TPM could not pass — and quitting
    takes under 1 s (one operation in flight, ≤ ~190 ms in this profile, then the flushes).

    Measured as benchmarks/ui_load.py does: from the key event posted to the app (as the
    terminal driver posts it) to the first screen update handed to the driver after the key's
    effect. Not around ``pilot.press``: Pilot waits for the app to go idle, which is its own
    cost (~85 ms here), not the user's."""
    from textual import events
    from textual.app import App

    stamps: list[float] = []
    display = App._display

    def stamped(self, screen, renderable):
        if renderable is not None:
            stamps.append(time.perf_counter())
        return display(self, screen, renderable)

    monkeypatch.setattr(App, "_display", stamped)
    src = live(start_running=True, rate=0, mode="per-command", profile="slb9670")
    app = app_for(src, tmp_path)
    times = []
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: _ops(src) >= 2, what="two slow operations")
        assert summary_of(src.accounts()[("native", "per-command", "extend")].op_hist)["p50"] > 100_000  # µs
        for _ in range(4):
            before = src.running
            k0 = time.perf_counter()
            app.post_message(events.Key("space", " "))
            while src.running == before and time.perf_counter() - k0 < 5:
                await asyncio.sleep(0.001)
            effect = time.perf_counter()
            while not (stamps and stamps[-1] > effect) and time.perf_counter() - k0 < 5:
                await asyncio.sleep(0.001)
            times.append(stamps[-1] - k0)
            await pilot.pause(0.2)
        t0 = time.perf_counter()
        await pilot.press("q")
    src.close()
    quit_s = time.perf_counter() - t0
    assert max(times) < 0.100, f"key to screen {[round(t * 1000) for t in times]} ms"
    assert quit_s < 1.0, f"quit took {quit_s:.2f} s"


async def test_read_only_refuses_every_state_changing_action(live, tmp_path):
    """--read-only: every key and palette entry that would change TPM state is refused (flush,
    flush all, workload start, mode/engine/op switch, rate); export still works (a file, not TPM state)."""
    src = live(read_only=True, start_running=True)
    seen = []
    app = app_for(src, tmp_path)
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        screen = main_screen(app)
        screen.book.HIGHLIGHT_S = 0.0
        await until(pilot, lambda: src.identity is not None, what="first poll")
        [h] = await _leak_objects(src, 1)  # something to be tempted to flush
        table = screen.query_one("#handles-table")
        key = f"0x{h:08x}"
        await until(pilot, lambda: key in table._shadow, what="handle listed")
        table.focus()
        table.move_cursor(row=table.get_row_index(key))
        changing = {a.action.split("(")[0] for a in ACTIONS if a.changes_tpm} | {"rate"}
        changing |= {"next_mode", "next_engine", "next_op", "set_mode", "set_engine", "set_op"}
        for name in changing:
            assert not screen.check_action(name, ()), name
        mark = src.recorder.total
        for key_ in ("f", "F", "space", "m", "e", "o", "plus", "minus"):
            await pilot.press(key_)
        for _, _, action in palette_entries():  # what the palette would run
            if action.split("(")[0] in changing:
                await screen.run_action(action)
        await pilot.pause(0.5)
        assert not isinstance(app.screen, ConfirmScreen)
        assert not src.running and (src.engine, src.mode, src.op) == ("native", "per-command", "extend")
        new = [e for e in src.recorder.events() if e.seq > mark]
        assert {e.origin for e in new} <= {"poll"}, {e.origin for e in new}  # polls only: they read
        assert h in {e.handle for e in list_handles(src.conn.transport)}
        # The source refuses too, whoever calls it.
        with pytest.raises(UsageError):
            src.flush(h)
        with pytest.raises(UsageError):
            src.flush_ours()
        src.set_running(True)
        assert not src.running
        await pilot.press("x")  # export writes a file, it changes nothing in the TPM
        await until(pilot, lambda: any(isinstance(x, m.CaptureExported) for x in seen), what="export")
