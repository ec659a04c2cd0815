"""`tpmtop proxy`, `tpmtop run`, `tpmtop clients`: real swtpm, real tpm2-tools, real sockets.

The proxy runs as the user runs it (a `python -m tpmtop proxy` process) in front of a private
swtpm on TCP (TcpSwtpm), so each test can also ask the swtpm directly what it now holds.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
from importlib import resources

import jsonschema
import pytest

from tests.helpers.processes import REPO, TPMTOP, run_tpmtop
from tests.helpers.proxy import GET_RANDOM_8, TIMEOUT, _ask, _tpm_handles

pytestmark = pytest.mark.skipif(shutil.which("tpm2_getrandom") is None, reason="tpm2-tools not installed")

def _events_by_client(cap: dict) -> dict[str, list[str]]:
    names = {c["id"]: c["name"] for c in cap["clients"]}
    out: dict[str, list[str]] = {}
    for e in cap["events"]:
        if "client" in e:
            assert e["origin"] == "proxy"
            out.setdefault(names[e["client"]], []).append(e["command"])
    return out


@pytest.mark.parametrize("protocol", ["swtpm", "mssim"])
def test_tpm2_tools_through_the_proxy(proxy_factory, tcp_swtpm, tmp_path, protocol):
    """getrandom, createprimary, startauthsession + flushcontext, pcrread (PCR 16 only) go
    through, and the capture names each tool and its command codes."""
    p = proxy_factory(protocol)
    r = p.tool("tpm2_getrandom", "--hex", "8")
    assert len(r.stdout.strip()) == 16
    p.tool("tpm2_createprimary", "-C", "o", "-c", "primary.ctx", cwd=tmp_path)
    p.tool("tpm2_startauthsession", "--hmac-session", "-S", "session.ctx", cwd=tmp_path)
    p.tool("tpm2_flushcontext", "session.ctx", cwd=tmp_path)
    r = p.tool("tpm2_pcrread", "sha256:16")
    assert "16: 0x" in r.stdout
    # tpm2_createprimary leaves its primary loaded (no resource manager behind a simulator):
    # the proxy reports it when the tool has gone, and the TPM holds it indeed.
    line = p.wait_line("tpm2_createprimary", "LEAK", "0x80000000")
    assert "CreatePrimary" in line
    assert 0x80000000 in _tpm_handles(p)
    p.tool("tpm2_flushcontext", "-t")  # clean up through the proxy as well
    assert 0x80000000 not in _tpm_handles(p)
    status, out, cap = p.stop()
    assert status == 130
    assert cap["minor"] >= 1
    seen = _events_by_client(cap)
    assert "TPM2_CC_GetRandom" in seen["tpm2_getrandom"]
    assert {"TPM2_CC_StartAuthSession", "TPM2_CC_CreatePrimary", "TPM2_CC_ContextSave"} \
        <= set(seen["tpm2_createprimary"])
    assert "TPM2_CC_StartAuthSession" in seen["tpm2_startauthsession"]
    assert {"TPM2_CC_ContextLoad", "TPM2_CC_FlushContext"} <= set(seen["tpm2_flushcontext"])
    assert "TPM2_CC_PCR_Read" in seen["tpm2_pcrread"]
    clients = {c["name"]: c for c in cap["clients"]}
    assert clients["tpm2_getrandom"]["pid"] and clients["tpm2_getrandom"]["uid"] == os.getuid()
    assert clients["tpm2_getrandom"]["cmdline"].startswith("tpm2_getrandom --hex 8")
    assert [h["handle"] for h in clients["tpm2_createprimary"]["leaked"]] == ["0x80000000"]
    sess = clients["tpm2_startauthsession"]["sessions"]
    assert sess and sess[0]["type"] == "hmac"
    assert "tpm2_pcrread" in out  # the summary table on stdout


@pytest.mark.parametrize(("flag", "handle", "stype", "label"), [
    ((), "0x03000000", "trial", "trial session"),  # tpm2-tools' default: TPM_SE_TRIAL
    (("--policy-session",), "0x03000000", "policy", "policy session"),
    (("--hmac-session",), "0x02000000", "hmac", "HMAC session"),
])
def test_leak_report_names_the_saved_session(proxy_factory, tcp_swtpm, tmp_path, flag, handle, stype, label):
    """tpm2_startauthsession starts a session, ContextSaves it to a file and exits: the session
    stays in the TPM (saved, taking a session slot) until someone loads and flushes it. It is
    named by the sessionType its StartAuthSession sent: a trial session, in the policy
    sessions' handle range, is not called a policy session."""
    p = proxy_factory()
    p.tool("tpm2_startauthsession", *flag, "-S", "s.ctx", cwd=tmp_path)
    line = p.wait_line("tpm2_startauthsession", "left")
    assert "LEAK" in line and f"{handle} {label} (StartAuthSession, saved)" in line
    assert "saved-session" in _tpm_handles(p).values()  # the TPM lists it among saved sessions
    p.tool("tpm2_flushcontext", "s.ctx", cwd=tmp_path)
    p.wait_line("tpm2_flushcontext", "left nothing loaded")
    assert "saved-session" not in _tpm_handles(p).values()
    status, _, cap = p.stop()
    assert status == 130
    sas = next(c for c in cap["clients"] if c["name"] == "tpm2_startauthsession")
    assert sas["leaked"] == [{"handle": handle, "kind": label, "session_type": stype,
                              "created_by": "StartAuthSession", "state": "saved"}]
    assert [s["type"] for s in sas["sessions"]] == [stype]
    jsonschema.validate(cap, json.loads((resources.files("tpmtop") / "schema" / "capture-1.json").read_text()))


def test_two_clients_at_once(proxy_factory):
    """Two tools hammering the proxy in parallel: every call succeeds and is attributed."""
    p = proxy_factory("mssim")
    errors = []

    def loop(argv, n):
        for _ in range(n):
            r = p.tool(*argv, check=False)
            if r.returncode:
                errors.append(r.stderr)

    ts = [threading.Thread(target=loop, args=(["tpm2_getrandom", "--hex", "16"], 8)),
          threading.Thread(target=loop, args=(["tpm2_pcrread", "sha256:16,23"], 8))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(TIMEOUT * 4)
    assert not errors
    _status, _, cap = p.stop()
    seen = _events_by_client(cap)
    assert seen["tpm2_getrandom"].count("TPM2_CC_GetRandom") == 8
    assert seen["tpm2_pcrread"].count("TPM2_CC_PCR_Read") == 8
    assert len([c for c in cap["clients"] if c["name"] in ("tpm2_getrandom", "tpm2_pcrread")]) == 16


_HALF_A_COMMAND = r"""
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(bytes.fromhex("80010000000c0000"))  # 8 of GetRandom's 12 bytes
print("sent", flush=True)
time.sleep(600)
"""


def test_client_killed_mid_command(proxy_factory):
    p = proxy_factory()
    victim = subprocess.Popen([sys.executable, "-c", _HALF_A_COMMAND, str(p.port)], stdout=subprocess.PIPE, text=True)
    try:
        assert victim.stdout.readline().strip() == "sent"
        p.wait_line(f"pid {victim.pid}", "connected")
        victim.kill()
        victim.wait()
        line = p.wait_line("disconnected mid-command")
        assert f"pid {victim.pid}" in line and "8 of 12 bytes" in line  # the size field was in: GetRandom is 12
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    r = p.tool("tpm2_getrandom", "--hex", "8")  # the backend stream is still in step
    assert len(r.stdout.strip()) == 16
    status, _, cap = p.stop()
    assert status == 130
    assert [e["command"] for e in cap["events"] if "client" in e].count("TPM2_CC_GetRandom") == 1
    assert len([ln for ln in p.lines if "disconnected mid-command" in ln]) == 1


@pytest.mark.parametrize("protocol,frame,says", [
    ("swtpm", bytes.fromhex("8001ffffffff0000017b0008"), "size field 4294967295"),
    ("swtpm", bytes.fromhex("80010000000300000144"), "size field 3"),
    ("mssim", struct.pack(">I", 0x41414141), "unknown request"),
    ("mssim", struct.pack(">IBI", 8, 0, 12) + bytes.fromhex("80010000000d0000017b0008"), "carries a TPM header of 13"),
])
def test_garbled_frame_costs_only_that_connection(proxy_factory, protocol, frame, says):
    p = proxy_factory(protocol)
    # a well-behaved client holds its connection open across the bad one
    good = socket.create_connection(("127.0.0.1", p.port), timeout=TIMEOUT)
    bad = socket.create_connection(("127.0.0.1", p.port), timeout=TIMEOUT)
    try:
        bad.sendall(frame)
        try:
            assert bad.recv(64) == b""  # closed by the proxy, nothing sent back
        except ConnectionResetError:
            pass  # closed with our unread bytes still queued: the kernel says so with a reset
        p.wait_line(says, "connection closed")
        msg = GET_RANDOM_8 if protocol == "swtpm" else struct.pack(">IBI", 8, 0, 12) + GET_RANDOM_8
        good.sendall(msg)
        want = 20 if protocol == "swtpm" else 4 + 20 + 4
        got = b""
        while len(got) < want:
            chunk = good.recv(want - len(got))
            assert chunk
            got += chunk
        rsp = got if protocol == "swtpm" else got[4:-4]
        assert rsp[6:10] == b"\0\0\0\0" and len(rsp) == 20
    finally:
        good.close()
        bad.close()
    p.tool("tpm2_getrandom", "--hex", "4")
    status, _, _cap = p.stop()
    assert status == 130


@pytest.mark.parametrize("protocol", ["swtpm", "mssim"])
def test_control_and_platform_requests_never_reach_the_tpm(proxy_factory, tcp_swtpm, tmp_path, protocol):
    """A reset (swtpm CMD_INIT) or power-off (mssim) from one client would wipe every client's
    objects: the proxy answers it and the TPM keeps its state."""
    p = proxy_factory(protocol)
    p.tool("tpm2_createprimary", "-C", "o", "-c", "primary.ctx", cwd=tmp_path)
    assert 0x80000000 in _tpm_handles(p)
    if protocol == "swtpm":
        assert _ask(p.port + 1, struct.pack(">II", 0x02, 1), 4) == b"\0\0\0\0"  # CMD_INIT, delete volatile
        assert _ask(p.port + 1, struct.pack(">IB", 0x05, 3), 4) == b"\0\0\0\0"  # CMD_SET_LOCALITY 3
        assert _ask(p.port + 1, struct.pack(">IB", 0x05, 9), 4) == struct.pack(">I", 0x3D)  # TPM_BAD_LOCALITY
        assert _ask(p.port + 1, struct.pack(">I", 0x0C) + bytes(12), 4) == struct.pack(">I", 10)  # state blob: no
    else:
        for signal_code in (2, 1, 11, 17):  # POWER_OFF, POWER_ON, NV_ON, RESET
            assert _ask(p.port + 1, struct.pack(">I", signal_code), 4) == b"\0\0\0\0"
    assert 0x80000000 in _tpm_handles(p)  # not reset
    p.tool("tpm2_flushcontext", "-t")
    status, _, cap = p.stop()
    assert status == 130
    assert not any(e["command"] == "TPM2_CC_Startup" for e in cap["events"])


def test_run_lists_getrandom_and_keeps_exit_status(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TPM2TOOLS_TCTI"}
    r = subprocess.run(TPMTOP + ["run", "--sim", "--json", str(tmp_path / "run.json"), "--", "tpm2_getrandom", "8"],
                       capture_output=True, timeout=120, cwd=REPO, env=env)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout) == 8  # CMD's stdout: the 8 random bytes, untouched
    r.stderr = r.stderr.decode()
    rows = [ln.split() for ln in r.stderr.splitlines()]
    getrandom = next(row for row in rows if row and row[0] == "GetRandom")
    assert getrandom[1] == "1" and getrandom[2] == "0"
    assert "left nothing loaded" in r.stderr
    cap = json.loads((tmp_path / "run.json").read_text())
    assert cap["command"]["exit_status"] == 0
    client = next(c for c in cap["clients"] if c["name"] == "tpm2_getrandom")
    assert client["per_command"]["GetRandom"]["count"] == 1
    r = run_tpmtop("run", "--sim", "--", "sh", "-c", "tpm2_getrandom 4 >/dev/null && exit 3", timeout=120)
    assert r.returncode == 3, r.stderr
    assert "GetRandom" in r.stderr


def test_run_reports_sessions_and_leaks(tmp_path):
    r = run_tpmtop("run", "--sim", "--", "tpm2_createprimary", "-C", "o", "-c", str(tmp_path / "p.ctx"), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "CreatePrimary" in r.stderr
    assert "session 0x02000000: hmac" in r.stderr
    assert "LEAK: tpm2_createprimary" in r.stderr and "0x80000000 transient object" in r.stderr


def test_run_without_a_command_is_usage():
    r = run_tpmtop("run", "--sim")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "nothing to run" in r.stderr


def test_clients_lists_holders_of_the_device(tmp_path):
    r = run_tpmtop("clients", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert set(info) >= {"devices", "holders", "abrmd"}
    assert isinstance(info["abrmd"]["running"], bool)
    r = run_tpmtop("clients")
    assert r.returncode == 0 and "tpm2-abrmd:" in r.stdout
