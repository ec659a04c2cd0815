"""A guest's TPM through tpmtop: swtpm's control protocol served to qemu, in front of a private swtpm.

qemu's ``-tpmdev emulator,chardev=…`` connects to a Unix socket and speaks swtpm's control
protocol there (swtpm's ``include/swtpm/tpm_ioctl.h``; every message big-endian, a 4-byte
command code then the request structure's ``req`` part, answered with its ``resp`` part).
Its first message is CMD_SET_DATAFD with one end of a socket pair attached (SCM_RIGHTS): the
guest's TPM commands then travel on that descriptor. :class:`GuestTpm` serves that socket:

- the data descriptor is kept here: each command the guest sends is read whole, sent to the
  private swtpm through tpmtop's :class:`~tpmtop.tpm.transport.InstrumentedTransport` (so a
  chip profile's shaper holds the response until the chip's figure has passed since the send,
  exactly as ``bench --profile`` does), timed at tpmtop's end of the wire, recorded, and the
  response written back. The guest waits for the shaped answer: its boot really is as slow as
  on that chip, as far as the TPM goes;
- the control commands qemu needs for a TPM 2.0 (init, stop, shutdown, locality, the
  established bit, buffer size, cancel) are forwarded to swtpm's own control channel and its
  answers returned unchanged: swtpm's ``--ctrl`` semantics are the reference, not a copy;
- GET_CAPABILITY is answered here with exactly the commands this relay can carry; the state
  blob commands (migration) are not offered, so qemu blocks migration of the lab's guests.

Layer: lab (above tpm, kernel; no Textual).
"""

from __future__ import annotations

import enum
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tpmtop.errors import TpmtopError

if TYPE_CHECKING:
    from tpmtop.tpm.commands import Transacts


class Ctrl(enum.IntEnum):
    """swtpm's control channel commands (tpm_ioctl.h, "Commands used by the non-CUSE TPMs")."""

    GET_CAPABILITY = 0x01
    INIT = 0x02
    SHUTDOWN = 0x03
    GET_TPMESTABLISHED = 0x04
    SET_LOCALITY = 0x05
    HASH_START = 0x06
    HASH_DATA = 0x07
    HASH_END = 0x08
    CANCEL_TPM_CMD = 0x09
    STORE_VOLATILE = 0x0A
    RESET_TPMESTABLISHED = 0x0B
    GET_STATEBLOB = 0x0C
    SET_STATEBLOB = 0x0D
    STOP = 0x0E
    GET_CONFIG = 0x0F
    SET_DATAFD = 0x10
    SET_BUFFERSIZE = 0x11
    GET_INFO = 0x12
    LOCK_STORAGE = 0x13


# Forwarded to swtpm: (request bytes after the code, response bytes). The sizes are those of
# the ``req``/``resp`` structures qemu sends and reads (ptm_init, ptm_loc, ptm_reset_est are
# unions padded to 4 bytes; ptm_est's resp is 8; ptm_setbuffersize's resp 16).
FORWARDED: dict[Ctrl, tuple[int, int]] = {
    Ctrl.INIT: (4, 4),
    Ctrl.SHUTDOWN: (0, 4),
    Ctrl.GET_TPMESTABLISHED: (0, 8),
    Ctrl.SET_LOCALITY: (4, 4),
    Ctrl.CANCEL_TPM_CMD: (0, 4),
    Ctrl.STORE_VOLATILE: (0, 4),
    Ctrl.RESET_TPMESTABLISHED: (4, 4),
    Ctrl.STOP: (0, 4),
    Ctrl.GET_CONFIG: (0, 8),
    Ctrl.SET_BUFFERSIZE: (4, 16),
}

# PTM_CAP_* bits: what GET_CAPABILITY offers (the forwarded commands and SET_DATAFD).
CAP_BITS = {
    Ctrl.INIT: 1 << 0,
    Ctrl.SHUTDOWN: 1 << 1,
    Ctrl.GET_TPMESTABLISHED: 1 << 2,
    Ctrl.SET_LOCALITY: 1 << 3,
    Ctrl.CANCEL_TPM_CMD: 1 << 5,
    Ctrl.STORE_VOLATILE: 1 << 6,
    Ctrl.RESET_TPMESTABLISHED: 1 << 7,
    Ctrl.STOP: 1 << 10,
    Ctrl.GET_CONFIG: 1 << 11,
    Ctrl.SET_DATAFD: 1 << 12,
    Ctrl.SET_BUFFERSIZE: 1 << 13,
}
CAPABILITIES = sum(CAP_BITS.values())

TPM_FAIL = 0x09  # a TPM 1.2 style result qemu prints as "operation failed"
MAX_COMMAND = 65536


@dataclass(slots=True)
class Wire:
    """One TPM command the guest sent and its answer, at tpmtop's end of the wire."""

    t_unix_ns: int  # wall clock at the send to swtpm
    t_mono_ns: int  # time.perf_counter_ns() at the send (the clock the host's markers use)
    wire_ns: int  # send to answer, including the profile's hold
    command: bytes
    response: bytes | None
    error: str | None = None
    inits: int = 0  # CMD_INITs seen before it (0: qemu's device probe, before the machine ran)


@dataclass
class ControlLog:
    """The control commands qemu sent, in order: (perf_counter_ns, command, swtpm's result)."""

    entries: list[tuple[int, str, int | None]] = field(default_factory=list)

    def count(self, cmd: Ctrl) -> int:
        return sum(1 for _, name, _ in self.entries if name == cmd.name)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


class GuestTpm:
    """Serve ``ctrl_path`` to one qemu; relay its TPM commands through ``transport``.

    ``swtpm_ctrl``: the private swtpm's control socket (connected). ``transport``: an
    InstrumentedTransport on the swtpm's data channel, with the profile's shaper (or none).
    ``log``: one line per problem (a relay never raises into qemu's face: it answers
    TPM_FAIL or closes, and says why)."""

    def __init__(
        self, ctrl_path: str, swtpm_ctrl: socket.socket, transport: Transacts,
        log: Callable[[str], None] = lambda s: None
    ):
        self.ctrl_path = ctrl_path
        self.swtpm_ctrl = swtpm_ctrl
        self.transport = transport
        self.log = log
        self.wire: list[Wire] = []
        self.control = ControlLog()
        self.inits = 0
        self._listener: socket.socket | None = None
        self._conn: socket.socket | None = None
        self._data: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> GuestTpm:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)  # the socket is the guest's TPM: closed to other users
        try:
            s.bind(self.ctrl_path)
        except OSError as e:
            s.close()
            raise TpmtopError(f"cannot listen on {self.ctrl_path}: {e.strerror}") from None
        finally:
            os.umask(old)
        s.listen(1)
        self._listener = s
        self._spawn(self._serve_control, "lab-tpm-ctrl")
        return self

    def _spawn(self, fn: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=fn, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for s in (self._listener, self._conn, self._data):
            if s is not None:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        self._listener = self._conn = self._data = None
        for t in self._threads:
            t.join(timeout=5)
        try:
            os.unlink(self.ctrl_path)
        except OSError:
            pass

    # -- control channel --------------------------------------------------------------------
    def _serve_control(self) -> None:
        try:
            assert self._listener is not None  # start() made it
            conn, _ = self._listener.accept()
        except OSError:
            return  # stopped before qemu came
        self._conn = conn
        try:
            while not self._stop.is_set():
                code, fds = self._read_code(conn)
                self._handle(conn, code, fds)
        except (EOFError, OSError):
            pass  # qemu closed the channel (it exited), a command out of step, or stop()
        finally:
            try:
                conn.shutdown(socket.SHUT_RDWR)  # qemu sees the channel end (stop() closes it)
            except OSError:
                pass

    def _read_code(self, conn: socket.socket) -> tuple[int, list[int]]:
        buf, fds = b"", []
        while len(buf) < 4:
            msg, got, _, _ = socket.recv_fds(conn, 4 - len(buf), 4)
            if not msg:
                for fd in got:
                    os.close(fd)
                raise EOFError
            buf += msg
            fds += got
        return struct.unpack(">I", buf)[0], fds

    def _handle(self, conn: socket.socket, code: int, fds: list[int]) -> None:
        now = time.perf_counter_ns()
        try:
            cmd = Ctrl(code)
        except ValueError:
            cmd = None
        if cmd is Ctrl.SET_DATAFD:
            if len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                self.log(f"CMD_SET_DATAFD came with {len(fds)} descriptors, not 1")
                conn.sendall(struct.pack(">I", TPM_FAIL))
                return
            self._take_data(socket.socket(fileno=fds[0]))
            self.control.entries.append((now, cmd.name, 0))
            conn.sendall(struct.pack(">I", 0))
            return
        for fd in fds:
            os.close(fd)
        if cmd is Ctrl.GET_CAPABILITY:
            self.control.entries.append((now, cmd.name, None))
            conn.sendall(struct.pack(">Q", CAPABILITIES))
            return
        sizes = FORWARDED.get(cmd) if cmd is not None else None
        if sizes is None:
            # Not offered, so its request's length is not known: the stream cannot stay in
            # step. Said once, and the channel closed (qemu reports the TPM as failed).
            self.log(f"qemu sent control command 0x{code:02x}, which this relay does not offer: closing")
            raise EOFError
        assert cmd is not None  # FORWARDED has only known commands
        req_len, rsp_len = sizes
        payload = _recv_exact(conn, req_len) if req_len else b""
        with self._lock:
            self.swtpm_ctrl.sendall(struct.pack(">I", code) + payload)
            rsp = _recv_exact(self.swtpm_ctrl, rsp_len)
        result = struct.unpack(">I", rsp[:4])[0]
        if cmd is Ctrl.INIT and result == 0:
            self.inits += 1
        self.control.entries.append((now, cmd.name, result))
        conn.sendall(rsp)

    # -- data channel -----------------------------------------------------------------------
    def _take_data(self, sock: socket.socket) -> None:
        old = self._data
        self._data = sock
        if old is not None:
            old.close()  # a second SET_DATAFD replaces the first (qemu sends one)
        self._spawn(lambda: self._serve_data(sock), "lab-tpm-data")

    def _serve_data(self, sock: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                hdr = _recv_exact(sock, 10)
                size = int.from_bytes(hdr[2:6], "big")
                if size < 10 or size > MAX_COMMAND:
                    self.log(f"the guest sent a TPM command of impossible size {size}: closing its data channel")
                    return
                cmd = hdr + (_recv_exact(sock, size - 10) if size > 10 else b"")
                sock.sendall(self._relay(cmd))
        except (EOFError, OSError):
            pass

    def _relay(self, cmd: bytes) -> bytes:
        t_unix = time.time_ns()
        t0 = time.perf_counter_ns()
        try:
            rsp: bytes | None = self.transport.transact(cmd)
            err = None
        except Exception as e:  # the TPM is gone: the guest gets TPM_RC_FAILURE, the lab a line
            rsp, err = None, str(e)
        wire_ns = time.perf_counter_ns() - t0
        self.wire.append(Wire(t_unix, t0, wire_ns, cmd, rsp, err, self.inits))
        if rsp is None:
            self.log(f"swtpm did not answer the guest: {err}")
            return bytes.fromhex("8001000000 0a00000101".replace(" ", ""))  # TPM_RC_FAILURE
        return rsp
