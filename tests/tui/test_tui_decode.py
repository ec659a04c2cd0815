"""Dashboard: Enter on a command-stream row opens the decode screen; failure patterns are
alerts with count and time lost. Real swtpm traffic (a live dashboard, and a capture
recorded from tpm2-tools with tpm2-tss's pcap: TCTI), nothing mocked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from textual.widgets import Static

from tests.helpers.tui import SIZE, app_for, main_screen, until
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.tui.screens.decode import DecodeScreen
from tpmtop.tui.widgets.stream import StreamPanel, StreamView


def _body(app) -> str:
    return str(app.screen.query_one("#decode-body", Static).render())


async def test_enter_on_a_live_stream_row_decodes_it(live, tmp_path):
    src = live()
    app = app_for(src, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = main_screen(app)
        await until(pilot, lambda: len(screen.query_one(StreamPanel).buffer) > 5, 60, "stream rows")
        panel = screen.query_one(StreamPanel)
        panel.toggle()  # frozen, so the selected row stays put
        view = screen.query_one(StreamView)
        view.focus()
        await pilot.pause()
        row = view.selected()
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DecodeScreen), 30, "decode screen")
        text = _body(app)
        seq = int(row.key)
        ev = next(e for e in src.recorder.events() if e.seq == seq)
        assert f"(0x{ev.cc:08x})" in text and "decoded fully" in text
        assert f"rc 0x{ev.rc:03x}" in text
        assert ev.command[:16].hex(" ") in text.replace("\n", " ")  # the hex view
        await pilot.press("x")
        assert "00000000  80 0" not in _body(app)  # the hex view (xxd lines) is gone
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, DecodeScreen), 30, "back to the dashboard")


@pytest.mark.skipif(not any(Path("/usr/lib").glob("*/libtss2-tcti-pcap.so*")), reason="no tpm2-tss pcap TCTI")
async def test_replay_of_a_failing_tool_alerts_and_decodes(tcp_swtpm, tmp_path):
    """Primaries until the swtpm's slots run out (0x902), replayed from the pcap file: an
    alert names the pattern with its count, and the failing command decodes with its rc."""
    pcap = tmp_path / "slots.pcap"
    env = dict(os.environ, TCTI_PCAP_FILE=str(pcap))
    env.pop("TPM2TOOLS_TCTI", None)
    for i in range(4):
        subprocess.run(["tpm2_createprimary", "-T", f"pcap:swtpm:host=127.0.0.1,port={tcp_swtpm.port}",
                        "-C", "n", "-G", "ecc256", "-c", str(tmp_path / f"p{i}.ctx")],
                       capture_output=True, env=env, timeout=120)
    cap = load(str(pcap))
    n902 = sum(1 for e in cap["events"] if e["rc"] == 0x902)
    assert n902 >= 1
    seen = []
    app = app_for(ReplaySource(cap, str(pcap)), tmp_path)
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        screen = main_screen(app)
        await until(pilot, lambda: screen.query_one(StreamPanel).buffer, 30, "replayed stream")
        await until(pilot, lambda: any(n.title == "failure pattern" for n in app.message_log.items), 30, "an alert")
        alerts = [n for n in app.message_log.items if n.title == "failure pattern"]
        assert any(f"TPM slots full (TPM_RC_OBJECT_MEMORY 0x902): {n902} times" in a.text
                   and " ms lost" in a.text and "tpmtop handles" in a.text for a in alerts)
        view = screen.query_one(StreamView)
        panel = screen.query_one(StreamPanel)
        panel.toggle()
        # scroll back to the last failing command
        rows = view.rows
        last_fail = max(i for i, r in enumerate(rows) if r.rc.startswith("0x902"))
        view.back = len(rows) - 1 - last_fail
        view.focus()
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DecodeScreen), 30, "decode screen")
        text = _body(app)
        assert "TPM2_CC_CreatePrimary (0x00000131)" in text
        assert "rc 0x902 tpm:warn(2.0): out of memory for object contexts" in text
        assert "TPM_RH.NULL" in text  # the hierarchy handle, by name


async def test_enter_on_a_parameter_encrypted_command_shows_its_plaintext(live, tmp_path):
    """Per-command mode, native engine, CreatePrimary with a decrypt session: Enter shows the
    ciphertext note and the plaintext, which is the inSensitive tpmtop sent."""
    from tpmtop.sessions import native

    src = live(engine="native", mode="per-command", op="create_primary")
    app = app_for(src, tmp_path)

    def encrypted_rows(view):
        return [i for i, r in enumerate(view.rows) if r.key.isdigit() and any(
            e.seq == int(r.key) and e.cc == 0x131 and e.sessions and e.sessions[0][0] >> 24 == 0x02
            for e in src.recorder.events())]

    async with app.run_test(size=SIZE) as pilot:
        screen = main_screen(app)
        view = screen.query_one(StreamView)
        await until(pilot, lambda: encrypted_rows(view), 60, "an encrypted CreatePrimary in the stream")
        screen.query_one(StreamPanel).toggle()  # frozen, so the selected row stays put
        await pilot.pause()
        i = encrypted_rows(view)[-1]
        view.back = len(view.rows) - 1 - i
        view.focus()
        await pilot.pause()
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DecodeScreen), 30, "decode screen")
        text = _body(app)
        sent = native._create_primary_params()
        assert "inSensitive" in text and "encrypted by session 0x02000000, CFB" in text
        assert f"plaintext (tpmtop holds this session's key): {sent[2:6].hex()}" in text
        assert "TPMS_SENSITIVE_CREATE" in text and "decoded fully" in text
