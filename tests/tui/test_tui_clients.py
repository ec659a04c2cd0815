"""The Clients panel with `tpmtop --listen P`: a real tpm2-tools process goes through the
dashboard's proxy while the workload runs; the panel and the recorder name it."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess

import pytest

from tests.helpers.processes import free_port_pair
from tests.helpers.tui import SIZE, app_for, main_screen, until
from tpmtop.proxy.server import ProxyServer
from tpmtop.tui.widgets.clients import ClientsPanel

pytestmark = pytest.mark.skipif(shutil.which("tpm2_getrandom") is None, reason="tpm2-tools not installed")


class TestClientsPanel:
    async def test_listen_shows_a_tool_beside_the_workload(self, live, tmp_path):
        """A tpm2_getrandom through the dashboard's proxy appears as a client; its commands are
        labelled with it in the recorder, never as workload; highlighting it shows its latencies."""
        src = live(start_running=True, rate=50)
        port = free_port_pair()
        log: list[str] = []
        src.proxy = ProxyServer(src.conn, port=port, log=log.append).start()
        src.proxy_log = log
        try:
            app = app_for(src, tmp_path)
            async with app.run_test(size=SIZE) as pilot:
                env = dict(os.environ, TPM2TOOLS_TCTI=f"swtpm:host=127.0.0.1,port={port}", TSS2_LOG="all+NONE")
                proc = await asyncio.create_subprocess_exec("tpm2_getrandom", "--hex", "8", env=env,
                                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                _out, err = await asyncio.wait_for(proc.communicate(), 60)
                assert proc.returncode == 0, err
                panel = main_screen(app).query_one(ClientsPanel)
                await until(pilot, lambda: any(c[1].startswith("tpm2_getrandom") for c in panel._cells.values()),
                            timeout=30, what="the tool in the Clients panel")
                assert panel.display
                assert any(c[1] == "tpmtop workload" for c in panel._cells.values())
                key = next(k for k, c in panel._cells.items() if c[1].startswith("tpm2_getrandom"))
                table = panel.query_one("#clients-table")
                table.move_cursor(row=table.get_row_index(key))
                await until(pilot, lambda: "GetRandom" in str(panel.query_one("#clients-detail").render()),
                            timeout=30, what="its per-command latencies")
                # T hands this TPM to other tools: the proxy's TCTI string, the one the tool used
                await pilot.press("T")
                await until(pilot, lambda: any(f"-T swtpm:host=127.0.0.1,port={port}" in n.text
                                               for n in app.message_log.items), timeout=30, what="the TCTI notice")
            evs = [e for e in src.recorder.events() if e.client is not None]
            assert "TPM2_CC_GetRandom" in {e.name for e in evs}
            assert all(e.engine is None and e.origin == "proxy" for e in evs)  # never the workload's labels
        finally:
            src.proxy.stop()

    async def test_proxy_notices_follow_the_line_kind_not_its_text(self, live, tmp_path):
        """A client that leaves a session behind raises a notice (its line's kind is LEAK); a
        line that only *says* LEAK or failed (a client may name itself so) raises none."""
        from tpmtop.proxy.lines import LineKind, ProxyLine

        src = live(start_running=True, rate=50)
        port = free_port_pair()
        log: list[str] = []
        src.proxy = ProxyServer(src.conn, port=port, log=log.append).start()
        src.proxy_log = log
        decoy = "client 99 LEAK-failed-connection closed (pid 1) connected"
        try:
            app = app_for(src, tmp_path)
            async with app.run_test(size=SIZE) as pilot:
                log.append(ProxyLine(decoy, LineKind.INFO))
                env = dict(os.environ, TPM2TOOLS_TCTI=f"swtpm:host=127.0.0.1,port={port}", TSS2_LOG="all+NONE")
                proc = await asyncio.create_subprocess_exec(
                    "tpm2_startauthsession", "--policy-session", "-S", str(tmp_path / "s.ctx"), env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                _, err = await asyncio.wait_for(proc.communicate(), 60)
                assert proc.returncode == 0, err
                await until(pilot, lambda: any("LEAK: left" in n.text for n in app.message_log.items),
                            timeout=60, what="the leak notice")
                assert not any(decoy in n.text for n in app.message_log.items)
            leaks = [line for line in log if "LEAK: left" in line]
            assert leaks and all(line.kind is LineKind.LEAK for line in leaks)
        finally:
            src.proxy.stop()
