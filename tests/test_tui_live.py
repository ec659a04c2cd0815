"""The dashboard driven through Textual's Pilot against a real swtpm (nothing mocked).

Each test asserts on what the TPM and the recorder now hold, not only on widget text.
"""

from __future__ import annotations

import asyncio

from tpmtop.tpm.handles import list_handles
from tpmtop.tui import messages as m
from tpmtop.tui.app import TpmtopApp
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.tui.screens.confirm import ConfirmScreen
from tui_helpers import SIZE, app_for, header_text, main_screen, until
from tui_helpers import _private_config, live  # noqa: F401 - fixtures


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
                await until(pilot, lambda: key in src.accounts() and src.accounts()[key].ops >= 5, what=mode)
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
        # polling never counted as workload
        assert all(e.origin != "workload" or e.engine == "native" for e in src.recorder.events())

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


class TestLatency:
    async def test_selected_row_shows_its_histogram(self, live, tmp_path):
        """The selected row's histogram (built in a worker) lands in the detail box, as many
        bucket lines as the box holds, their counts those of the operations recorded."""
        import re

        src = live(start_running=True, rate=0, mode="none")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: any(a.ops > 50 for a in src.accounts().values()), what="ops")
            await pilot.press("space")  # freeze the counts
            src.barrier()
            hist = main_screen(app).query_one("#histogram")
            main_screen(app).query_one("#latency-table").focus()

            def buckets():
                return [int(n) for n in re.findall(r"^≤\s*[\d,.]+\s+\S*\s+(\d+)\s*$", str(hist.render()), re.M)]

            ops = sum(a.ops for a in src.accounts().values())
            # The box (7 lines here) shows the first buckets; the tail may fall below it.
            await until(pilot, lambda: len(buckets()) >= 3, what="bucket lines in the histogram box")
            counts = buckets()
            assert len(counts) == hist.size.height - 1  # the title, then a bucket per line
            assert all(c > 0 for c in counts) and ops / 2 <= sum(counts) <= ops


class TestHandles:
    async def _primary(self, src) -> int:
        def create(t):
            from tpmtop.sessions.native import NativeEngine

            e = NativeEngine(t)
            e.create_null_primary()
            return e.load_null()  # a transient object tpmtop holds

        return await asyncio.to_thread(src.on_tpm, create)

    async def test_flush_removes_handle_from_tpm_and_table(self, live, tmp_path):
        """f flushes the selected handle: gone from the TPM's list and from the table."""
        src = live(start_running=False)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = main_screen(app)
            screen.book.HIGHLIGHT_S = 0.0
            await until(pilot, lambda: src.identity is not None, what="first poll")
            h = await self._primary(src)
            key = f"0x{h:08x}"
            table = screen.query_one("#handles-table")
            await until(pilot, lambda: key in table._shadow, what="handle in table")
            table.focus()
            table.move_cursor(row=table.get_row_index(key))
            await pilot.press("f")
            await until(pilot, lambda: key not in table._shadow, what="row removed")
            assert h not in {e.handle for e in list_handles(src.conn.transport)}

    async def test_footer_follows_what_can_be_done(self, live, tmp_path):
        """The footer skips rebuilds that change nothing, yet still shows Flush enabled once a
        handle is selected (its enabled state is part of what it compares)."""
        from textual.widgets._footer import FooterKey

        src = live(start_running=False)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = main_screen(app)
            screen.book.HIGHLIGHT_S = 0.0

            def flush_key():
                return next(k for k in screen.query(FooterKey) if k.action == "flush_selected")

            await until(pilot, lambda: src.identity is not None, what="first poll")
            assert flush_key().has_class("-disabled")
            h = await self._primary(src)
            table = screen.query_one("#handles-table")
            await until(pilot, lambda: f"0x{h:08x}" in table._shadow, what="handle in table")
            table.focus()
            table.move_cursor(row=table.get_row_index(f"0x{h:08x}"))
            await until(pilot, lambda: not flush_key().has_class("-disabled"), what="Flush enabled in the footer")

    async def test_flush_of_foreign_handle_asks_first(self, live, tmp_path):
        """A handle tpmtop did not create is flushed only after the operator says yes."""
        src = live(start_running=False)
        seen = []
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
            screen = main_screen(app)
            screen.book.HIGHLIGHT_S = 0.0
            await until(pilot, lambda: src.identity is not None, what="first poll")
            h = await self._primary(src)
            src.recorder.forget_handle(h)  # as if another program had made it
            key = f"0x{h:08x}"
            table = screen.query_one("#handles-table")
            await until(pilot, lambda: key in table._shadow and not screen.book.rows(
                {}, src.recorder.owned_handles(), 0)[0].ours, what="foreign handle listed")
            table.focus()
            table.move_cursor(row=table.get_row_index(key))
            await pilot.press("f")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
            await pilot.press("n")
            await pilot.pause(0.3)
            assert h in {e.handle for e in list_handles(src.conn.transport)}
            await pilot.press("f")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirmation")
            await pilot.press("y")
            await until(pilot, lambda: any(isinstance(x, m.HandlesFlushed) for x in seen), what="flushed")
            assert h not in {e.handle for e in list_handles(src.conn.transport)}


class TestExportReplay:
    async def test_export_writes_a_capture_that_replay_opens(self, live, tmp_path):
        """x writes a timestamped capture atomically; `tpmtop replay` opens it."""
        src = live(start_running=True, rate=0, mode="reuse")
        seen = []
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
            await until(pilot, lambda: any(a.ops >= 5 for a in src.accounts().values()), what="ops")
            await pilot.press("x")
            await until(pilot, lambda: any(isinstance(x, m.CaptureExported) for x in seen), what="export")
        path = next(x.path for x in seen if isinstance(x, m.CaptureExported))
        assert path.parent == tmp_path.resolve() and path.name.startswith("tpmtop-") and path.suffix == ".json"
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left
        cap = load(path)
        assert cap["schema"] == "tpmtop.capture/1"
        run = next(r for r in cap["runs"] if r["mode"] == "reuse")
        assert run["ops"] >= 5 and run["commands_per_op"] == {"TPM2_CC_PCR_Extend": 1.0}
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
        """A killed swtpm turns the header to 'disconnected', keeps the data, and reconnects."""
        src = live(start_running=True, rate=200)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: any(a.ops >= 3 for a in src.accounts().values()), what="ops")
            ops_before = sum(a.ops for a in src.accounts().values())
            src.conn.sim.kill()
            await until(pilot, lambda: "disconnected" in header_text(app), what="disconnected")
            assert sum(a.ops for a in src.accounts().values()) >= ops_before  # data kept
            await until(pilot, lambda: src.connected and "running" in header_text(app), timeout=20,
                        what="reconnected")
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
