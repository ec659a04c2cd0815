"""Whose handle is it: with `tpmtop --listen P`, a real tpm2-tools client leaves a primary
loaded through the dashboard's proxy. Handles names the client (never tpmtop), Enter says who
created it, F flushes only tpmtop's own (the client's object is still listed by tpm2_getcap
through the same proxy), and f on the client's handle asks first (Escape leaves it)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess

import pytest

from tests.helpers.processes import free_port_pair
from tests.helpers.tui import SIZE, app_for, main_screen, until
from tpmtop.proxy.server import ProxyServer
from tpmtop.tui import messages as m
from tpmtop.tui.screens.confirm import ConfirmScreen
from tpmtop.tui.screens.inspect import InspectScreen
from tpmtop.tui.widgets.handles import HandlesPanel
from tpmtop.viewmodel.rows.handles import HandleOwner

pytestmark = pytest.mark.skipif(shutil.which("tpm2_createprimary") is None, reason="tpm2-tools not installed")


async def _tool(port: int, *argv: str, cwd=None) -> str:
    env = dict(os.environ, TPM2TOOLS_TCTI=f"swtpm:host=127.0.0.1,port={port}", TSS2_LOG="all+NONE")
    proc = await asyncio.create_subprocess_exec(*argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, (argv, err)
    return out.decode()


async def _transient(port: int) -> set[int]:
    """What the TPM lists as transient objects, asked by tpm2_getcap through the same proxy."""
    out = await _tool(port, "tpm2_getcap", "handles-transient")
    return {int(w.strip("- "), 16) for w in out.split() if w.strip("- ").startswith("0x")}


class TestOtherProgramsHandles:
    async def test_a_clients_primary_is_named_kept_by_F_and_asked_about_by_f(self, live, tmp_path):
        # the saved mode keeps a session of tpmtop's own loaded: F has something of ours to flush
        src = live(start_running=True, rate=0, mode="saved")
        port = free_port_pair()
        log: list[str] = []
        src.proxy = ProxyServer(src.conn, port=port, log=log.append).start()
        src.proxy_log = log
        seen: list = []
        try:
            app = app_for(src, tmp_path)
            async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
                screen = main_screen(app)
                await _tool(port, "tpm2_createprimary", "-C", "o", "-G", "ecc", "-c", "p.ctx", cwd=tmp_path)
                held = [(c, h) for c, h in src.proxy.accounts.held_all() if h.handle >> 24 == 0x80]
                assert len(held) == 1, held  # the tool exits with its primary loaded (no resource manager)
                h = held[0][1].handle
                assert h in await _transient(port)
                assert h not in src.recorder.owned_handles()  # a proxied command's handle is not tpmtop's
                key = f"0x{h:08x}"
                panel = screen.query_one(HandlesPanel)
                await until(pilot, lambda: key in panel._rows, timeout=60, what="the client's primary listed")
                row = panel._rows[key]
                assert row.owner is HandleOwner.CLIENT and not row.ours
                assert row.created_by.startswith("tpm2_createprimary (pid "), row.created_by
                cell = str(panel.table._shadow[key][2])  # the "created by" column
                assert "tpmtop" not in cell and cell.startswith("tpm2_createprimary"), cell

                # Enter: the detail names the client
                table = panel.table
                table.focus()
                table.move_cursor(row=table.get_row_index(key))
                await pilot.press("enter")
                await until(pilot, lambda: isinstance(app.screen, InspectScreen), timeout=30, what="inspector")
                text = str(app.screen.query_one("#inspect-text").render())
                assert "tpm2_createprimary (pid" in text and "created by" in text
                assert "created by  tpmtop" not in text
                await pilot.press("escape")
                await until(pilot, lambda: app.screen is screen, what="back on the dashboard")

                # F: tpmtop's own only; the notice says how many others it left
                await until(pilot, lambda: bool(src.recorder.owned_handles()), timeout=60,
                            what="a handle of tpmtop's own (the saved mode's session)")
                await pilot.press("F")
                await until(pilot, lambda: any(isinstance(x, m.HandlesFlushed) for x in seen), timeout=60,
                            what="flushed")
                flushed = next(x for x in seen if isinstance(x, m.HandlesFlushed)).handles
                assert h not in flushed
                assert h in await _transient(port)  # the client's object is still loaded
                await until(pilot, lambda: any("did not create" in n.text and "left" in n.text
                                               for n in app.message_log.items), timeout=30, what="the 'left' notice")

                # f on the client's handle asks; Escape leaves it loaded, y flushes it
                await until(pilot, lambda: key in panel._rows and panel._rows[key].owner is HandleOwner.CLIENT,
                            timeout=60, what="the client's primary still listed")
                table.focus()
                table.move_cursor(row=table.get_row_index(key))
                await pilot.press("f")
                await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout=30, what="confirmation")
                detail = str(app.screen.query_one("#confirm-detail").render())
                assert "tpm2_createprimary" in detail
                await pilot.press("escape")
                await until(pilot, lambda: app.screen is screen, what="cancelled")
                assert h in await _transient(port)
                n_flushed = sum(isinstance(x, m.HandlesFlushed) for x in seen)
                table.focus()
                table.move_cursor(row=table.get_row_index(key))
                await pilot.press("f")
                await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout=30, what="confirmation")
                await pilot.press("y")
                await until(pilot, lambda: sum(isinstance(x, m.HandlesFlushed) for x in seen) > n_flushed,
                            timeout=60, what="flushed after yes")
                assert h not in await _transient(port)
        finally:
            src.proxy.stop()


def test_the_book_names_each_handles_creator_and_keeps_it_when_the_handle_goes():
    """The owner comes from what tpmtop created and what the proxy's clients hold, never from a
    label; a handle neither made is "unknown"; a row that just went away keeps its owner."""
    from tpmtop.tpm.handles import HandleEntry, HandleKind
    from tpmtop.viewmodel.rows.handles import HandleBook, HandleState

    t = [0.0]
    book = HandleBook(clock=lambda: t[0])
    entries = [HandleEntry(0x80000000, HandleKind.TRANSIENT, None, False),
               HandleEntry(0x80000001, HandleKind.TRANSIENT, None, False),
               HandleEntry(0x02000000, HandleKind.LOADED_SESSION, None, False)]
    book.update(entries)
    clients = {0x80000000: ("tpmtop", 4242)}  # a client may call itself tpmtop: still a client
    rows = {r.handle: r for r in book.rows({}, {0x02000000}, 0, clients)}
    assert rows[0x80000000].owner is HandleOwner.CLIENT and rows[0x80000000].created_by == "tpmtop (pid 4242)"
    assert not rows[0x80000000].ours
    assert rows[0x80000001].owner is HandleOwner.UNKNOWN and rows[0x80000001].created_by == "unknown"
    assert rows[0x02000000].owner is HandleOwner.TPMTOP and rows[0x02000000].ours
    t[0] = 1.0
    book.update(entries[1:])
    gone = {r.handle: r for r in book.rows({}, {0x02000000}, 0, {})}[0x80000000]
    assert gone.state is HandleState.GONE and gone.owner is HandleOwner.CLIENT and gone.who == "tpmtop"


def test_a_poll_older_than_the_flush_does_not_bring_the_flushed_row_back():
    """Issue 55 item 5, the race a stress run found: a poll that ran before `f` flushed a handle
    (its list as of an earlier command) arrived after the flush and put the row back; the next
    poll found it gone, and it lingered struck through. Polls carry the recorder's command count
    they ran at; the book keeps the count at the flush."""
    from tpmtop.tpm.handles import HandleEntry, HandleKind
    from tpmtop.viewmodel.rows.handles import HandleBook

    t = [0.0]
    book = HandleBook(clock=lambda: t[0])
    a, b = (HandleEntry(h, HandleKind.TRANSIENT, None, False) for h in (0x80000000, 0x80000001))
    book.update([a, b], seq=10)
    book.forget(0x80000000, seq=14)  # flushed by tpmtop's 14th command
    book.update([a, b], seq=12)  # a poll that ran before the flush, arriving late
    assert [r.handle for r in book.rows({}, set(), 0)] == [0x80000001]
    book.update([b], seq=15)  # the TPM's word after the flush: gone, no struck-through row
    assert [r.handle for r in book.rows({}, set(), 0)] == [0x80000001]
    book.update([a, b], seq=20)  # the number used again by a new object after the flush: shown
    assert [r.handle for r in book.rows({}, set(), 0)] == [0x80000000, 0x80000001]
