"""The dashboard driven through Textual's Pilot against a real swtpm (nothing mocked).

Each test asserts on what the TPM and the recorder now hold, not only on widget text.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.helpers.paths import TESTS
from tests.helpers.tui import HIST_LINE, SIZE, app_for, header_text, histogram_counts, main_screen, mode_ops, until
from tpmtop.sources.live import burst_size, pacing_json
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.tpm.handles import list_handles
from tpmtop.tui import messages as m
from tpmtop.tui.app import TpmtopApp
from tpmtop.tui.screens.confirm import ConfirmScreen

FIXTURE = TESTS / "tui_fixtures" / "slb9670-extend.json"


class TestWorkload:
    async def test_mode_switch_changes_commands_per_op(self, live, tmp_path):
        """Switching none → per-command → reuse → saved changes the commands per operation on the wire."""
        src = live(start_running=True, rate=0, mode="none")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            expected = {"none": 1, "per-command": 4, "reuse": 1, "saved": 3}
            for i, mode in enumerate(expected):
                if i:
                    await pilot.press("m")
                assert src.mode == mode
                key = ("native", mode, "extend")
                await until(pilot, lambda key=key: key in src.accounts() and src.accounts()[key].ops >= 5, what=mode)
            # pause, so that an operation cannot complete between reading its count and its commands
            await pilot.press("space")
            src.barrier()
            accounts = src.accounts()
            for mode, n in expected.items():
                acc = accounts[("native", mode, "extend")]
                assert sum(acc.commands.values()) / acc.ops == n, mode
            # The Modes panel shows one bar per mode run, with the ratio to `none`.
            await pilot.pause(0.3)
            bars = str(main_screen(app).query_one("#bars").render())
            for mode in expected:
                assert mode in bars
            assert "×1.0" in bars
            # The op p50 time series runs across the switches, each switch marked by its mode's initial.
            assert "op p50 each second" in bars and any(c in bars for c in "▁▂▃▄▅▆▇█")
        # polling never counted as workload
        assert all(e.origin != "workload" or e.engine == "native" for e in src.recorder.events())

    async def test_flush_ours_keeps_the_modes_comparison(self, live, tmp_path):
        """F flushes tpmtop's handles (the kept session leaves the TPM) but keeps every mode's
        measurements: the Modes panel still compares all four, counts continue."""
        src = live(start_running=True, rate=0, mode="none")
        seen = []
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
            for i, mode in enumerate(("none", "per-command", "reuse", "saved")):
                if i:
                    await pilot.press("m")
                key = ("native", mode, "extend")
                await until(pilot, lambda key=key: key in src.accounts() and src.accounts()[key].ops >= 5, what=mode)
            before = {k: a.ops for k, a in src.accounts().items()}
            await pilot.press("F")
            await until(pilot, lambda: any(isinstance(x, m.HandlesFlushed) for x in seen), what="flushed")
            flushed = next(x for x in seen if isinstance(x, m.HandlesFlushed)).handles
            tail = [(e.name, [hex(h) for h in e.handles], e.rc, e.origin) for e in src.recorder.events()[-40:]]
            assert any(h >> 24 == 0x02 for h in flushed), (flushed, tail)  # the saved mode's kept session
            after = src.accounts()
            assert set(after) >= set(before)
            assert all(after[k].ops >= n for k, n in before.items())
            main_screen(app).refresh_all()
            bars = str(main_screen(app).query_one("#bars").render())
            assert all(mode in bars for mode in ("none", "per-command", "reuse", "saved"))

    def test_flush_ours_names_the_session_even_when_its_handle_comes_back_at_once(self, live):
        """F's report of what it flushed is judged inside its own job. The workload's next
        operation, queued right behind it, starts a session that swtpm gives the same handle;
        a reader that looked again only after that job (a loaded machine) once saw the handle
        still "ours" and reported no session flushed (a stress-run failure)."""
        src = live(start_running=True, rate=0, mode="saved")
        for _ in range(3):
            assert src.run_on_owner(src._step_job)
        session = next(h for h in src.recorder.owned_handles() if h >> 24 == 0x02)
        owner, rec = src.conn.owner, src.recorder
        real, reads, again = rec.owned_handles, [], threading.Event()

        def late_reader():  # off the owner thread, a second look comes after the next job ran
            if not owner.on_owner_thread():
                reads.append(1)
                if len(reads) > 1:
                    again.wait(60)
            return real()

        def next_operation(t):
            src._step_job(t)
            again.set()

        rec.owned_handles = late_reader
        gate, started = threading.Event(), threading.Event()
        blocker = owner.submit(lambda: (started.set(), gate.wait(60)))  # the flush job queues behind it
        assert started.wait(60)
        out: list = []
        flusher = threading.Thread(target=lambda: out.append(src.flush_ours()))
        flusher.start()
        try:
            deadline = time.monotonic() + 60
            while owner._q.qsize() < 1:  # the flush job is queued
                assert time.monotonic() < deadline
                time.sleep(0.01)
            follow = owner.submit(next_operation, t=None)
        finally:
            gate.set()
        blocker.result(60)
        follow.result(60)
        flusher.join(60)
        rec.owned_handles = real
        assert out and session in out[0], out
        assert session in rec.owned_handles()  # the next operation's session, same handle: still there

    async def test_pause_stops_workload_commands(self, live, tmp_path):
        """Space pauses the workload: no workload command reaches the TPM while paused."""
        src = live(start_running=True, rate=0)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: any(a.ops > 3 for a in src.accounts().values()), what="ops")
            await pilot.press("space")
            assert not src.running
            src.barrier()  # an operation in flight finishes first
            before = sum(1 for e in src.recorder.events() if e.origin == "workload")
            await pilot.pause(0.8)
            after = sum(1 for e in src.recorder.events() if e.origin == "workload")
            assert after == before
            assert any(e.origin == "poll" for e in src.recorder.events())  # polling goes on
            assert "paused" in header_text(app)
            await pilot.press("space")
            await until(pilot, lambda: sum(1 for e in src.recorder.events() if e.origin == "workload") > after,
                        what="workload resumed")


class TestPacing:
    def test_paced_workload_runs_in_warm_bursts(self):
        """A paced workload runs >= 4 operations back to back per wake-up, at every rate, so
        its p50 is a warm operation's (issue #15: the live ratio at 100/s read x8, bench x23)."""
        assert burst_size(0) == 10  # unpaced: never sleeps; 10 operations per job on the TPM owner
        assert all(burst_size(r) >= 4 for r in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000))
        assert burst_size(100) == 10 and burst_size(1000) == 100  # at most 10 wake-ups a second
        assert pacing_json(100)["burst"] == 10 and pacing_json(100)["burst_every_s"] == 0.1

    async def test_capture_records_each_runs_pacing(self, live, tmp_path):
        """Operations paced at 100/s and then unpaced: the run says it ran under both."""
        src = live(start_running=True, rate=100, mode="none")
        seen = []
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
            await until(pilot, lambda: any(a.ops >= 8 for a in src.accounts().values()), what="paced ops")
            assert "bursts of 10" in header_text(app)
            src.rate = 0
            await until(pilot, lambda: 0 in src.rates_run.get(("native", "none", "extend"), ()), what="unpaced ops")
            await pilot.press("x")
            await until(pilot, lambda: any(isinstance(x, m.CaptureExported) for x in seen), what="export")
        cap = load(next(x.path for x in seen if isinstance(x, m.CaptureExported)))
        run = next(r for r in cap["runs"] if r["mode"] == "none")
        assert [p["rate_ops_per_s"] for p in run["pacing"]] == [100, 0]
        assert run["pacing"][0]["burst"] == 10


class TestStream:
    async def test_frozen_stream_reaches_back_through_the_ring_and_filters(self, live, tmp_path):
        """s freezes the stream on every event the recorder keeps (not the last 2,000 rows);
        scrolled back, a filter still shows its matches; 'errors' keeps failed commands only."""
        src = live(start_running=True, rate=0, mode="per-command")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: src.recorder.total > 3000, what="3,000 commands")
            await pilot.press("space")
            src.barrier()  # an operation in flight finishes first
            screen = main_screen(app)
            view = screen.query_one("#stream-view")
            kept = len(src.recorder.events())  # polls go on: the ring only grows after this
            await pilot.press("s")
            assert len(view.rows) >= kept > 2000
            view.focus()
            await pilot.press("home")
            assert view.back == len(view.rows) - 1  # the oldest command kept is reachable
            first = view.rows[0]
            assert first.command in {"CreatePrimary", "GetCapability", "StartAuthSession", "Load", "FlushContext",
                                     "ContextSave", "ContextLoad", "PCR_Extend"} or first.origin == "mark"
            await pilot.press("slash")
            await pilot.press(*"Flush", "enter")
            rows = view.rows[0:len(view.rows)]
            assert rows and all(r.command == "FlushContext" or r.origin == "mark" for r in rows)
            assert "no commands yet" not in str(view.render())
            # FlushContext's target (a parameter, not a handle-area handle) is on its line.
            assert all(len(r.handles) == 8 for r in rows if r.origin != "mark")
            await pilot.press("pageup")  # a page is what is visible, less one line
            back = view.back
            await pilot.press("pageup")
            assert view.back - back in (view.size.height - 2, 0) or view.back == len(view.rows) - 1
            await pilot.press("slash")
            await pilot.press(*"errors", "enter")
            assert all(not r.ok or r.origin == "mark" for r in view.rows[0:len(view.rows)])


class TestHeadline:
    async def test_ratio_to_none_shows_with_no_key_pressed(self, live, tmp_path):
        """As `make run` starts (tpmtop --sim: per-command at the default rate) and with no key
        pressed, Modes at 120×40 shows per-command's ratio to `none` with its bars: the baseline
        is measured by itself, interleaved with per-command's operations on the same TPM, and
        is labelled. The ratio shown is the two runs' op p50s, as the accounts hold them."""
        import re

        src = live(poll_interval=None)  # the defaults: no mode, rate or engine given
        assert (src.mode, src.engine, src.op, src.running) == ("per-command", "native", "extend", True)
        app = app_for(src, tmp_path)

        def bars() -> str:
            return str(main_screen(app).query_one("#bars").render())

        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: re.search(r"per-command ×[\d.,]+ vs none", bars()), timeout=120,
                        what="the ratio in Modes")
            src.set_running(False)  # hold the numbers still while they are compared
            await pilot.pause(0.1)
            src.barrier()
            main_screen(app).refresh_all()
            await pilot.pause(0.3)
            text = bars()
            accounts = src.accounts()
            none, pc = accounts[("native", "none", "extend")], accounts[("native", "per-command", "extend")]
            ratio = pc.op_hist.summary()["p50"] / none.op_hist.summary()["p50"]
            shown = float(re.search(r"per-command ×([\d.,]+) vs none", text).group(1).replace(",", ""))
            assert shown == float(f"{ratio:.1f}") if ratio < 100 else round(ratio), (shown, ratio)
            # drawn at 120×40: a bar on each mode's line, the baseline marked and explained
            lines = text.splitlines()
            assert any(line.lstrip(" ▶").startswith("none*") and "█" in line for line in lines), text
            assert any("per-command" in line and "█" in line and "▶" in line for line in lines), text
            assert "none*: interleaved with per-command's" in text  # what none* is, on one line
        # nobody pressed m: per-command ran all along, and the baseline's operations are `none`
        # ones on the wire (PCR_Extend alone, password session), stamped as the baseline
        assert src.mode == "per-command"
        assert none.ops >= 1 and src.baseline_ops[("native", "extend")] == none.ops
        assert sum(pc.commands.values()) / pc.ops == 4  # the interleaving left per-command's own intact
        assert sum(none.commands.values()) / none.ops == 1
        base = [e for e in src.recorder.events() if e.origin == "baseline"]
        assert base and all(e.name == "TPM2_CC_PCR_Extend" and e.mode == "none" for e in base)
        assert all(h == 0x40000009 for e in base for h, _ in e.sessions)
        # an export says so, and its replay marks the baseline as the dashboard did
        cap = src.capture()
        run = next(r for r in cap["runs"] if r["mode"] == "none")
        assert any(p.get("interleaved_ops") == none.ops for p in run["pacing"]), run["pacing"]
        assert ReplaySource(cap, "capture").baseline_ops == {("native", "extend"): none.ops}


class TestBootProjection:
    async def test_p_projects_n_extends_with_this_sittings_costs(self, live, tmp_path):
        """After none and per-command ran, Modes projects the boot cost of N extends per mode and
        p shows the arithmetic (tpmtop boot's model) with this sitting's per-command p50s;
        typing another N recomputes it."""
        from tpmtop.tui.screens.projection import ProjectionScreen

        src = live(start_running=True, rate=0, mode="none")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: ("native", "none", "extend") in src.accounts(), what="none ops")
            await pilot.press("m")
            await until(pilot, lambda: mode_ops(src, "per-command") >= 5, what="per-command ops")
            await until(pilot, lambda: "boot, 1,000 extends" in str(main_screen(app).query_one("#bars").render()),
                        what="projection in Modes")
            src.set_running(False)  # the same p50s for the Modes line and the p screen
            await pilot.pause(0.1)
            src.barrier()
            main_screen(app).refresh_all()
            await pilot.pause(0.3)
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, ProjectionScreen), what="projection screen")
            text = str(app.screen.query_one("#projection-text").render())
            assert "1,000 PCR extends" in text and "1,000 × (" in text  # saved, not run: N × (L + Eh)
            # per-command ran: N × the op p50 that Modes shows above its projection (one set of
            # numbers), the same estimate in both places
            p50 = src.runs()[[r.mode for r in src.runs()].index("per-command")].op_us["p50"]
            line = next(x for x in text.splitlines() if x.startswith("per-command"))
            assert "N × (op p50 measured here for this mode)" in line
            estimate = line.split()[2:4]  # "about", "1.1 s"
            assert f"1,000 × {p50:,}".split(".")[0] in text  # its arithmetic: N × that p50

            def modes() -> str:
                return " ".join(str(main_screen(app).query_one("#bars").render()).split())

            # closed without a new N: the Modes line (redrawn once the dialog is closed - a loaded
            # machine's last stats worker may land after the p press) gives the same estimate
            # from the same p50s
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is main_screen(app), what="the dashboard again")
            await until(pilot, lambda: f"per-command {' '.join(estimate)}" in modes(),
                        what=f"the Modes line's per-command {' '.join(estimate)} (p's figure)")
            # another N typed and Enter: p recomputes, and closing it carries that N to Modes
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, ProjectionScreen), what="projection screen again")
            app.screen.query_one("#projection-n").value = "250"
            await pilot.press("enter")
            text = str(app.screen.query_one("#projection-text").render())
            assert "250 PCR extends" in text
            line = next(x for x in text.splitlines() if x.startswith("per-command"))
            estimate = line.split()[2:4]
            await pilot.press("escape")
            await until(pilot, lambda: "boot, 250 extends" in modes()
                        and f"per-command {' '.join(estimate)}" in modes(),
                        what=f"250 extends and per-command {' '.join(estimate)} in Modes")


class TestSort:
    async def test_sort_latency_by_p99_keeps_the_operation_on_top(self, live, tmp_path):
        """> sorts the focused table by its next column, biggest first; the operation's rows stay
        on top; after the last column the panel's own order comes back."""
        from tpmtop.tui.widgets.table import sort_value

        src = live(start_running=True, rate=0, mode="per-command")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            table = main_screen(app).query_one("#latency-table")
            await until(pilot, lambda: sum(1 for k in table._shadow if k.startswith("cc:")) >= 4, what="rows")
            await pilot.press("space")
            table.focus()
            while table.sort_column != "p99":
                await pilot.press("greater_than_sign")
            await pilot.pause(0.3)
            keys = [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(table.row_count)]
            assert keys[:3] == ["op:total", "op:wire", "op:host"]
            ci = table.shown_columns.index("p99")
            p99 = [sort_value(table._shadow[k][ci])[1] for k in keys[3:]]
            assert p99 == sorted(p99, reverse=True) and len(p99) >= 4
            for _ in range(len(table.shown_columns)):
                if table.sort_column is None:
                    break
                await pilot.press("greater_than_sign")
            assert table.sort_column is None


class TestTableFilter:
    async def test_slash_on_latency_keeps_matching_rows_and_the_operation(self, live, tmp_path):
        """/ on a focused table filters its rows (the operation's rows stay); empty shows all."""
        src = live(start_running=True, rate=0, mode="per-command")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            table = main_screen(app).query_one("#latency-table")
            await until(pilot, lambda: sum(1 for k in table._shadow if k.startswith("cc:")) >= 4, what="rows")
            await pilot.press("space")
            table.focus()
            await pilot.press("slash")
            await pilot.press(*"Flush", "enter")
            await until(pilot, lambda: [k for k in table._shadow if k.startswith("cc:")] == ["cc:357"],
                        what="FlushContext only")
            assert {"op:total", "op:wire", "op:host"} <= set(table._shadow)
            await until(pilot, lambda: "filter 'Flush'" in str(main_screen(app).query_one("#latency").border_subtitle),
                        what="the filter named under the panel")
            await pilot.press("slash")
            app.screen.query_one("#table-filter").value = ""
            await pilot.press("enter")
            await until(pilot, lambda: sum(1 for k in table._shadow if k.startswith("cc:")) >= 4, what="all again")


class TestLatency:
    async def test_selected_row_shows_its_whole_histogram(self, live, tmp_path):
        """The selected row's histogram (built in a worker) lands in the detail box: every
        bucket from the lowest populated to the highest, empty ones drawn empty, at the finest
        resolution that fits the box — its counts are all the operations recorded, and no line
        is wider than the box (a line laid out for another width wrapped its count)."""
        import re

        from rich.cells import cell_len

        from tpmtop.viewmodel.rows.histogram import FINE_PER_DECADE, fit, fmt_axis

        src = live(start_running=True, rate=0, mode="none")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: any(a.ops > 50 for a in src.accounts().values()), what="ops")
            await pilot.press("space")  # freeze the counts
            src.barrier()
            hist = main_screen(app).query_one("#histogram")
            main_screen(app).query_one("#latency-table").focus()
            acc = src.accounts()[("native", "none", "extend")]

            def expected() -> list[int]:
                fitted = fit(acc.op_hist.buckets(FINE_PER_DECADE), FINE_PER_DECADE, hist.content_size.height - 1)
                return [b.count for b in fitted.buckets]

            # Condition, not timing: the worker's histogram lands (it is rebuilt every 2 s).
            await until(pilot, lambda: histogram_counts(str(hist.render())) == expected(),
                        what="the run's whole histogram in the box")
            text = str(hist.render())
            assert sum(histogram_counts(text)) == acc.ops
            fitted = fit(acc.op_hist.buckets(FINE_PER_DECADE), FINE_PER_DECADE, hist.content_size.height - 1)
            top = acc.op_hist.summary()["max"]  # the slowest sample, in the axis' one unit
            assert f"max {fmt_axis(top / fitted.scale)} {fitted.unit}" in text.splitlines()[0]
            assert all(cell_len(line) <= hist.content_size.width for line in text.splitlines())
            assert {m.group(2) for m in re.finditer(HIST_LINE, text, re.M)} == {fitted.unit}, text
            for key in ("down", "down", "m"):  # another row, another run: never a line wider than the box
                await pilot.press(key)
                for _ in range(5):
                    width = hist.content_size.width
                    assert all(cell_len(line) <= width for line in str(hist.render()).splitlines())
                    await pilot.pause(0.05)


def list_handles_locked(src):
    # As one job on the TPM's owner: the transport has no lock of its own, and a GetCapability sent
    # from the test's thread while a poll ran hung the swtpm on the interleaved bytes (stress run).
    return src.run_on_owner(list_handles)


class TestHandles:
    async def _primary(self, src) -> int:
        def create(t):
            from tpmtop.sessions.native import NativeEngine

            e = NativeEngine(t)
            e.create_null_primary()
            return e.load_null()  # a transient object tpmtop holds

        return await asyncio.to_thread(src.run_on_owner, create)

    async def test_flush_removes_handle_from_tpm_and_table(self, live, tmp_path):
        """f flushes the selected handle: gone from the TPM's list and from the table."""
        src = live(start_running=False)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = main_screen(app)
            screen.dash.book.HIGHLIGHT_S = 0.0
            await until(pilot, lambda: src.identity is not None, what="first poll")
            h = await self._primary(src)
            key = f"0x{h:08x}"
            table = screen.query_one("#handles-table")
            await until(pilot, lambda: key in table._shadow, what="handle in table")
            table.focus()
            table.move_cursor(row=table.get_row_index(key))
            await pilot.press("f")
            await until(pilot, lambda: key not in table._shadow, what="row removed")
            assert h not in {e.handle for e in list_handles_locked(src)}

    async def test_footer_follows_what_can_be_done(self, live, tmp_path):
        """The key bar skips redraws that change nothing, yet still shows Flush enabled once a
        handle is selected (its enabled state is part of what it compares): dim before, not after."""
        from tpmtop.tui.widgets.footer import KeyBar

        src = live(start_running=False)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = main_screen(app)
            screen.dash.book.HIGHLIGHT_S = 0.0
            bar = screen.query_one(KeyBar)

            def flush_drawn_dim() -> bool | None:
                """Whether " f Flush " is drawn dim on the bar's line (None: not drawn)."""
                text = bar.render()
                at = text.plain.find(" f Flush ")
                if at < 0:
                    return None
                return any(span.start <= at < span.end and "dim" in str(span.style) for span in text.spans)

            await until(pilot, lambda: src.identity is not None, what="first poll")
            await until(pilot, lambda: flush_drawn_dim() is True, what="Flush drawn dim with nothing selected")
            h = await self._primary(src)
            table = screen.query_one("#handles-table")
            await until(pilot, lambda: f"0x{h:08x}" in table._shadow, what="handle in table")
            table.focus()
            table.move_cursor(row=table.get_row_index(f"0x{h:08x}"))
            await until(pilot, lambda: flush_drawn_dim() is False, what="Flush enabled in the footer")

    async def test_key_bar_keeps_help_and_quit_when_narrow_and_presses_a_clicked_key(self, live, tmp_path):
        """Below 120 columns only the essential keys are drawn (Theme goes, Help and Quit stay);
        at 120 all are; the mouse on "m Mode" shows m's help, a click switches the mode as the key does."""
        from tpmtop.tui.widgets.footer import KeyBar

        src = live(start_running=False)
        app = app_for(src, tmp_path)
        async with app.run_test(size=(100, 30)) as pilot:
            screen = main_screen(app)
            bar = screen.query_one(KeyBar)
            await until(pilot, lambda: " q Quit " in bar.render().plain, what="Quit on the bar at 100 columns")
            line = bar.render().plain
            assert " ? Help " in line and " m Mode " in line and " t Theme " not in line, line
            await pilot.resize_terminal(120, 40)
            await until(pilot, lambda: " t Theme " in bar.render().plain, what="Theme on the bar at 120 columns")
            mode = src.mode
            x = bar.render().plain.index(" m Mode ") + 2
            await pilot.hover(KeyBar, offset=(x, 0))
            assert bar.tooltip and "HMAC session mode" in str(bar.tooltip), bar.tooltip  # m's help text
            await pilot.click(KeyBar, offset=(x, 0))
            await until(pilot, lambda: src.mode != mode, what="the clicked m switched the mode")

    async def test_refused_keys_say_why(self, live, tmp_path):
        """f with nothing selected, and space in replay, explain themselves instead of doing
        nothing silently (issue #15 item 9)."""
        src = live(start_running=False)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: src.identity is not None, what="first poll")
            await pilot.press("f")
            await until(pilot, lambda: any("select a handle" in n.text for n in app.message_log.items),
                        what="f explained")
            await pilot.press("T")  # the TCTI for tpm2-tools: a private swtpm cannot be shared, says how to
            await until(pilot, lambda: any("socket pair" in n.text and "-T swtpm:" in n.text
                                           for n in app.message_log.items), what="TCTI explained")
        cap = load(FIXTURE)
        rapp = TpmtopApp(ReplaySource(cap, FIXTURE), theme="dark", remember=False)
        async with rapp.run_test(size=SIZE) as pilot:
            await pilot.press("space")
            await until(pilot, lambda: any("saved capture" in n.text for n in rapp.message_log.items),
                        what="space in replay explained")

    async def test_enter_on_a_handle_shows_what_the_tpm_says(self, live, tmp_path):
        """Enter on an object: its ReadPublic (type, name, attributes); on a kept session: its
        type and the salt/bind StartAuthSession put on the wire. Read-only: the TPM's handles
        are the same after."""
        from tpmtop.tui.screens.inspect import InspectScreen

        src = live(start_running=False, mode="reuse")
        seen = []
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
            screen = main_screen(app)
            screen.dash.book.HIGHLIGHT_S = 0.0
            await until(pilot, lambda: src.identity is not None, what="first poll")
            h = await self._primary(src)
            await pilot.press("space")  # reuse: a kept session appears
            await until(pilot, lambda: mode_ops(src, "reuse") >= 2, what="reuse ops")
            await pilot.press("space")
            table = screen.query_one("#handles-table")
            await until(pilot, lambda: f"0x{h:08x}" in table._shadow and any(
                k.startswith("0x02") for k in table._shadow), what="object and session listed")
            before = {e.handle for e in await asyncio.to_thread(lambda: list_handles_locked(src))}
            table.focus()
            table.move_cursor(row=table.get_row_index(f"0x{h:08x}"))
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, InspectScreen), what="inspector")
            text = str(app.screen.query_one("#inspect-text").render())
            assert "ECC" in text or "RSA" in text
            assert "name" in text and "fixedtpm" in text
            await pilot.press("escape")
            sess = next(k for k in table._shadow if k.startswith("0x02"))
            table.move_cursor(row=table.get_row_index(sess))
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, InspectScreen), what="session inspector")
            text = str(app.screen.query_one("#inspect-text").render())
            assert "HMAC" in text and "salted with" in text and "bound to" in text
            await pilot.press("escape")
            after = {e.handle for e in await asyncio.to_thread(lambda: list_handles_locked(src))}
            assert before == after

    async def test_flush_of_foreign_handle_asks_first(self, live, tmp_path):
        """A handle tpmtop did not create is flushed only after the operator says yes."""
        src = live(start_running=False)
        seen = []
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
            screen = main_screen(app)
            screen.dash.book.HIGHLIGHT_S = 0.0
            await until(pilot, lambda: src.identity is not None, what="first poll")
            h = await self._primary(src)
            src.recorder.forget_handle(h)  # as if another program had made it
            key = f"0x{h:08x}"
            table = screen.query_one("#handles-table")
            await until(pilot, lambda: key in table._shadow and not screen.dash.book.rows(
                {}, src.recorder.owned_handles(), 0)[0].ours, what="foreign handle listed")
            table.focus()
            table.move_cursor(row=table.get_row_index(key))
            await pilot.press("f")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
            await pilot.press("n")
            await pilot.pause(0.3)
            assert h in {e.handle for e in list_handles_locked(src)}
            await pilot.press("f")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
            await pilot.press("y")
            await until(pilot, lambda: any(isinstance(x, m.HandlesFlushed) for x in seen), what="flushed")
            assert h not in {e.handle for e in list_handles_locked(src)}


class TestExportReplay:
    async def test_export_writes_a_capture_that_replay_opens(self, live, tmp_path):
        """x writes a timestamped capture atomically; `tpmtop replay` opens it."""
        src = live(start_running=True, rate=0, mode="reuse")
        seen = []
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
            # reuse's own operations: the interleaved `none` baseline (in bursts of 8) reached 5
            # first in a CI-like run, and the reuse run then held 2
            await until(pilot, lambda: mode_ops(src, "reuse") >= 5, what="reuse ops")
            await pilot.press("x")
            await until(pilot, lambda: any(isinstance(x, m.CaptureExported) for x in seen), what="export")
        path = next(x.path for x in seen if isinstance(x, m.CaptureExported))
        assert path.parent == tmp_path.resolve() and path.name.startswith("tpmtop-") and path.suffix == ".json"
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left
        cap = load(path)
        assert cap["schema"] == "tpmtop.capture/1"
        run = next(r for r in cap["runs"] if r["mode"] == "reuse")
        assert run["ops"] >= 5 and run["commands_per_op"] == {"TPM2_CC_PCR_Extend": 1.0}
        # The capture says what pacing its operations ran under (here: unpaced).
        assert cap["pacing"]["rate_ops_per_s"] == 0 and run["pacing"] == [pacing_json(0)]
        rsrc = ReplaySource(cap, path)
        rapp = TpmtopApp(rsrc, theme="dark", remember=False)
        async with rapp.run_test(size=SIZE) as pilot:
            await pilot.pause(0.1)
            table = main_screen(rapp).query_one("#latency-table")
            assert "op:total" in table._shadow
            assert any(k.startswith("cc:") for k in table._shadow)
            assert "replay" in header_text(rapp)


class TestResilience:
    async def test_killed_swtpm_shows_disconnected_then_recovers(self, live, tmp_path):
        """A killed swtpm is reported (Disconnected), the data is kept, and the dashboard
        reconnects and runs again. On the messages, not on the header's transient text: the
        disconnected state may last less than one screen refresh on a loaded machine."""
        src = live(start_running=True, rate=200)
        seen = []
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
            await until(pilot, lambda: any(a.ops >= 3 for a in src.accounts().values()), what="ops")
            ops_before = sum(a.ops for a in src.accounts().values())
            src.conn.sim.kill()
            await until(pilot, lambda: any(isinstance(x, m.Disconnected) for x in seen), what="disconnected")

            def kept() -> int:  # the reconnection may already have moved them to an earlier period
                return sum(a.ops for a in src.accounts().values()) + sum(a.ops for p in src.periods for a in p.values())

            assert kept() >= ops_before  # data kept
            await until(pilot, lambda: any(isinstance(x, m.Reconnected) for x in seen), what="reconnected")
            await until(pilot, lambda: src.connected and "running" in header_text(app), what="running again")
            await until(pilot, lambda: sum(a.ops for a in src.accounts().values()) > 2, what="workload again")
            # The restarted swtpm is a new TPM life (new null seed): what came before is kept as
            # an earlier period, not mixed into the new one.
            assert src.boundaries and sum(a.ops for p in src.periods for a in p.values()) >= ops_before
            assert app.is_running

    async def test_read_only_disables_tpm_changing_actions(self, live, tmp_path):
        """--read-only: the workload never runs and flush/pause are disabled."""
        src = live(read_only=True, start_running=True)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: src.identity is not None, what="first poll")
            screen = main_screen(app)
            for action in ("toggle_workload", "flush_ours", "rate", "next_mode"):
                assert not screen.check_action(action, ()), action
            await pilot.press("space")
            await pilot.pause(0.3)
            assert not src.running
            assert not any(e.origin == "workload" for e in src.recorder.events())
            assert "read-only" in header_text(app)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_p_opens_at_its_top(live, tmp_path, size):
    """Issue 55 item 6: at 80×24 the `p` dialog opened scrolled to its bottom (its input took
    the focus and was scrolled into view), past N and the costs it is priced with."""
    from tpmtop.tui.screens.projection import ProjectionScreen

    src = live(start_running=True, rate=0, mode="per-command")
    app = app_for(src, tmp_path)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: mode_ops(src, "per-command") >= 5, what="per-command ops")
        src.set_running(False)
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, ProjectionScreen), what="projection screen")
        box = app.screen.query_one("#projection-box")
        await until(pilot, lambda: box.max_scroll_y > 0 or size == (120, 40), what="the dialog laid out")
        await pilot.pause(0.2)
        assert box.scroll_y == 0, (box.scroll_y, box.max_scroll_y)
        assert app.screen.focused is app.screen.query_one("#projection-n")  # N can still be typed at once


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_s_freezes_the_stream_where_it_is_seen(live, tmp_path, size):
    """Issue 55 item 6: at 80×24 one panel shows at a time, and `s` froze the stream behind
    the panel on show: the stream is shown first. At 120×40 it is on screen already."""
    from tpmtop.tui.widgets.stream import StreamPanel

    src = live(start_running=True, rate=0, mode="none")
    app = app_for(src, tmp_path)
    async with app.run_test(size=size) as pilot:
        screen = main_screen(app)
        await until(pilot, lambda: src.accounts().get(("native", "none", "extend")) is not None, what="none ops")
        await pilot.press("3")  # Latency
        await until(pilot, lambda: not screen.compact or screen.active_panel == "latency", what="latency shown")
        await pilot.press("s")
        stream = screen.query_one(StreamPanel)
        await until(pilot, lambda: stream.frozen, what="stream frozen")
        assert stream.display and stream.region.height > 0  # where it can be seen
        if screen.compact:
            assert screen.active_panel == "stream"


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_latency_table_and_its_histogram_count_the_same_samples(live, tmp_path, size):
    """Issue 55 item 5: while the workload ran, the Latency table's count and the histogram
    under it disagreed (473 against 492; max 3,613 µs against a 6.29 ms bucket): the table was
    one refresh's, the histogram read the live samples later. Both read one frame's snapshot
    now: whenever the histogram shows the row's current frame, its buckets add up to the
    table's count, and its top bucket holds the table's max."""
    src = live(start_running=True, rate=0, mode="reuse")
    app = app_for(src, tmp_path)
    async with app.run_test(size=size) as pilot:
        screen = main_screen(app)
        panel = screen.query_one("#latency")
        await pilot.press("3")
        await until(pilot, lambda: "op:total" in panel.table._shadow, what="the operation's row")
        panel.table.focus()
        panel.table.move_cursor(row=panel.table.get_row_index("op:total"))
        checked = 0
        for _ in range(400):
            row = panel._rows.get("op:total")
            if row is not None and panel._hist_drawn is row.buckets and panel.table.selected_key == "op:total":
                hist = screen.query_one("#latency").query_one("HistogramView")
                buckets, _, _ = hist._data
                table_count = int(str(panel.table._shadow["op:total"][1]).replace(",", ""))
                assert sum(c for _, c in buckets) == table_count == row.summary["count"]
                assert max(ub for ub, c in buckets if c) >= row.summary["max"]
                checked += 1
                if checked >= 3:
                    break
            await pilot.pause(0.05)
        assert checked >= 3, "the histogram never showed the table's frame"
        assert src.running
