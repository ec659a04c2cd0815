"""tpmtop lab's relay of swtpm's control protocol, spoken to as qemu's tpm-emulator backend
speaks it (qemu's backends/tpm/tpm_emulator.c: SET_DATAFD with the data socket attached,
GET_CAPABILITY, STOP + SET_BUFFERSIZE, INIT, SET_LOCALITY, then TPM commands on the data
socket), in front of a real swtpm. Light: no VM, part of `make test`. The VM boots are in
test_lab_boot.py (`make test-lab`)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import tempfile

import pytest

from tpmtop.lab.guest import workload_script
from tpmtop.lab.guest_tpm import CAPABILITIES, Ctrl, GuestTpm
from tpmtop.profiles.loader import load_profile
from tpmtop.tpm.sim import Swtpm
from tpmtop.tpm.transport import InstrumentedTransport

STARTUP_CLEAR = bytes.fromhex("80010000000c000001440000")
GET_RANDOM_16 = bytes.fromhex("80010000000c0000017b0010")
PTM_CAP_QEMU_TPM2 = (1 | 2 | 4 | 8 | (1 << 7) | (1 << 12) | (1 << 10) | (1 << 13))  # tpm_emulator_check_caps


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "the relay closed the connection"
        buf += chunk
    return buf


def _tpm(sock: socket.socket, cmd: bytes) -> bytes:
    sock.sendall(cmd)
    hdr = _recv(sock, 10)
    return hdr + _recv(sock, int.from_bytes(hdr[2:6], "big") - 10)


@pytest.fixture
def relay():
    sw = Swtpm(startup=False).start()
    d = tempfile.mkdtemp(prefix="tpmtop-lab-test-")
    transport = InstrumentedTransport(sw.backend(timeout=30))
    transport.shaper = load_profile("slb9670").shaper(seed=1)
    problems: list[str] = []
    g = GuestTpm(os.path.join(d, "ctrl"), sw.ctrl, transport, log=problems.append).start()
    ctrl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ctrl.connect(g.ctrl_path)
    ctrl.settimeout(30)
    ours, theirs = socket.socketpair()
    ours.settimeout(30)
    try:
        yield g, ctrl, ours, theirs, problems, sw
    finally:
        ctrl.close()
        ours.close()
        theirs.close()
        g.stop()
        sw.stop()
        os.rmdir(d)


def _ctrl(ctrl: socket.socket, cmd: Ctrl, payload: bytes, rsp_len: int) -> bytes:
    ctrl.sendall(struct.pack(">I", cmd) + payload)
    return _recv(ctrl, rsp_len)


def _qemu_start(ctrl, theirs) -> None:
    socket.send_fds(ctrl, [struct.pack(">I", Ctrl.SET_DATAFD)], [theirs.fileno()])
    assert _recv(ctrl, 4) == b"\0\0\0\0"
    theirs.close()


def test_the_relay_offers_what_qemu_requires_and_carries_the_guests_commands_shaped(relay):
    g, ctrl, data, theirs, problems, _ = relay
    _qemu_start(ctrl, theirs)
    caps = struct.unpack(">Q", _ctrl(ctrl, Ctrl.GET_CAPABILITY, b"", 8))[0]
    assert caps == CAPABILITIES and caps & PTM_CAP_QEMU_TPM2 == PTM_CAP_QEMU_TPM2
    assert caps & (1 << 8) == 0  # no GET_STATEBLOB: qemu blocks migration instead of failing it
    assert _ctrl(ctrl, Ctrl.STOP, b"", 4) == b"\0\0\0\0"
    rsp = _ctrl(ctrl, Ctrl.SET_BUFFERSIZE, struct.pack(">I", 4096), 16)
    result, size, lo, hi = struct.unpack(">IIII", rsp)
    assert result == 0 and lo <= size <= hi and size == 4096  # swtpm's own answer, passed through
    assert _ctrl(ctrl, Ctrl.INIT, struct.pack(">I", 0), 4) == b"\0\0\0\0"
    assert _ctrl(ctrl, Ctrl.SET_LOCALITY, struct.pack(">I", 0), 4) == b"\0\0\0\0"
    est = _ctrl(ctrl, Ctrl.GET_TPMESTABLISHED, b"", 8)
    assert est[:4] == b"\0\0\0\0"
    # the platform starts the TPM up (swtpm was started without startup-clear)
    assert _tpm(data, STARTUP_CLEAR)[6:10] == b"\0\0\0\0"
    rsp = _tpm(data, GET_RANDOM_16)
    assert rsp[6:10] == b"\0\0\0\0" and int.from_bytes(rsp[10:12], "big") == 16
    got = [(w.command[6:10].hex(), w.inits) for w in g.wire]
    assert got == [("00000144", 1), ("0000017b", 1)]
    # the profile held GetRandom (no session) for the SLB9670's 3,195 µs, measured from the send
    assert g.wire[1].wire_ns >= 3_195_000
    assert [name for _, name, _ in g.control.entries] == [
        "SET_DATAFD", "GET_CAPABILITY", "STOP", "SET_BUFFERSIZE", "INIT", "SET_LOCALITY", "GET_TPMESTABLISHED"]
    assert problems == []


def test_init_resets_the_tpm_as_a_platform_reset_does(relay):
    g, ctrl, data, theirs, _, _ = relay
    _qemu_start(ctrl, theirs)
    assert _ctrl(ctrl, Ctrl.INIT, struct.pack(">I", 0), 4) == b"\0\0\0\0"
    assert _tpm(data, STARTUP_CLEAR)[6:10] == b"\0\0\0\0"
    assert _tpm(data, STARTUP_CLEAR)[6:10] == b"\0\0\x01\x00"  # TPM_RC_INITIALIZE: already started
    assert _ctrl(ctrl, Ctrl.INIT, struct.pack(">I", 0), 4) == b"\0\0\0\0"
    assert _tpm(data, STARTUP_CLEAR)[6:10] == b"\0\0\0\0"  # after the reset it takes Startup again
    assert [w.inits for w in g.wire] == [1, 1, 2]


def test_a_control_command_the_relay_does_not_offer_closes_the_channel_and_says_so(relay):
    _g, ctrl, _, theirs, problems, _ = relay
    _qemu_start(ctrl, theirs)
    ctrl.sendall(struct.pack(">I", Ctrl.GET_STATEBLOB) + bytes(12))
    assert ctrl.recv(16) == b""
    assert problems and "0x0c" in problems[0] and "does not offer" in problems[0]


def test_shutdown_is_swtpms_and_ends_it(relay):
    _, ctrl, _, theirs, _, sw = relay
    _qemu_start(ctrl, theirs)
    assert _ctrl(ctrl, Ctrl.SHUTDOWN, b"", 4) == b"\0\0\0\0"
    sw.proc.wait(timeout=30)  # swtpm's --ctrl semantics: CMD_SHUTDOWN ends the process


def test_the_guest_workload_is_valid_shell():
    subprocess.run(["sh", "-n", "-c", workload_script(7)], check=True)


def test_lab_usage_errors_are_one_line_and_exit_2(tmp_path):
    for args in (["--boots", "0"], ["--files", "x"]):
        p = subprocess.run([sys.executable, "-m", "tpmtop", "lab", *args], capture_output=True, text=True)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    if os.geteuid() == 0:
        p = subprocess.run([sys.executable, "-m", "tpmtop", "lab", "--kernels", "no-such", "--out", str(tmp_path)],
                           capture_output=True, text=True)
        if "is not installed" not in p.stderr:
            assert p.returncode == 2 and "unknown kernel 'no-such'" in p.stderr, p.stderr
            assert len(p.stderr.strip().splitlines()) == 1
