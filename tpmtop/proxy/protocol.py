"""Server side of the two simulator protocols that tpm2-tss's TCTIs speak.

Both implemented from the real sources: tpm2-tss ``src/tss2-tcti/tcti-swtpm.c`` and
``tcti-mssim.c``, swtpm ``src/swtpm/ctrlchannel.c`` / ``include/swtpm/tpm_ioctl.h``.

swtpm (``swtpm:host=…,port=P``)
  Data channel, port P: raw TPM command bytes in, raw response out. The TCTI opens a new
  TCP connection for every command (connect, send, read the 10-byte header, read the rest,
  close) and, at init, connects once and closes without sending anything (a "sanity check").
  Control channel, port P+1: ``u32 cmd`` + payload, answer ``u32 result`` + payload, a new
  connection per request. The TCTI sends CMD_SET_LOCALITY (1-byte locality) at init and
  CMD_INIT on ``Tss2_Tcti_Swtpm_Reset``; cancel is "not implemented" in the TCTI.

mssim (``mssim:host=…,port=P``)
  TPM port P, one connection per TCTI context: ``u32 MS_SIM_TPM_SEND_COMMAND (8)``,
  ``u8 locality``, ``u32 size``, the command; the answer is ``u32 size``, the response and
  four zero bytes. ``u32 TPM_SESSION_END (20)`` ends the session (finalize).
  Platform port P+1: ``u32 signal`` → ``u32 0``; the TCTI sends POWER_ON (1) and NV_ON (11)
  at init, CANCEL_ON/OFF (9/10) around a cancel, SESSION_END (20) at finalize.

Nothing sent to a control or platform port ever reaches the TPM: the proxy answers
success (or swtpm's TPM_BAD_ORDINAL for what it does not offer, such as state blobs) so a
client can neither power-cycle nor reset the TPM that others share.
"""

from __future__ import annotations

import _socket
import select
import socket
import struct
from typing import Any

from tpmtop.tpm.busypoll import RequestPoll, poll_cap_ns, recv_soon

# A socket's address family as the plain int (socket.family wraps it in an enum: 1 µs a call,
# on every wait for a request)
_family = _socket.socket.family.__get__

# TPM buffers are at most 4 KiB (TPM2_PT_MAX_COMMAND_SIZE on swtpm and every chip we know);
# a size field beyond it is a garbled or hostile frame, not a command to wait for.
MAX_COMMAND = 4096
# A request started must be whole within this (a half-sent frame is dropped, never held)
FRAME_DEADLINE_S = 10.0
TPM_HEADER = 10

# swtpm control channel (tpm_ioctl.h)
CMD_GET_CAPABILITY = 0x01
CMD_INIT = 0x02
CMD_SHUTDOWN = 0x03
CMD_GET_TPMESTABLISHED = 0x04
CMD_SET_LOCALITY = 0x05
CMD_HASH_START = 0x06
CMD_HASH_DATA = 0x07
CMD_HASH_END = 0x08
CMD_CANCEL_TPM_CMD = 0x09
CMD_STORE_VOLATILE = 0x0A
CMD_RESET_TPMESTABLISHED = 0x0B
CMD_STOP = 0x0E
CMD_SET_BUFFERSIZE = 0x11
TPM_SUCCESS = 0
TPM_BAD_PARAMETER = 3
TPM_BAD_ORDINAL = 10
TPM_BAD_LOCALITY = 0x3D
# what swtpm advertises for a socket TPM with these answers (PTM_CAP_* bits we honour):
# init, shutdown, est., loc., hash, cancel, stop, buffersize
_CAPS = 0x0001 | 0x0002 | 0x0004 | 0x0008 | 0x0010 | 0x0080 | 0x1000 | 0x2000

# Microsoft simulator (TpmTcpProtocol.h)
MS_SIM_POWER_ON = 1
MS_SIM_POWER_OFF = 2
MS_SIM_HASH_DATA = 6
MS_SIM_TPM_SEND_COMMAND = 8
MS_SIM_CANCEL_ON = 9
MS_SIM_CANCEL_OFF = 10
MS_SIM_NV_ON = 11
MS_SIM_REMOTE_HANDSHAKE = 15
MS_SIM_SESSION_END = 20
MS_SIM_STOP = 21
PLATFORM_NAMES = {1: "POWER_ON", 2: "POWER_OFF", 3: "PHYS_PRES_ON", 4: "PHYS_PRES_OFF", 5: "HASH_START",
                  6: "HASH_DATA", 7: "HASH_END", 9: "CANCEL_ON", 10: "CANCEL_OFF", 11: "NV_ON",
                  12: "NV_OFF", 13: "KEY_CACHE_ON", 14: "KEY_CACHE_OFF", 17: "RESET", 18: "RESTART",
                  20: "SESSION_END", 21: "STOP"}

_U32 = struct.Struct(">I")


class FrameError(Exception):
    """The client broke the framing (garbled, oversized, cut short): drop its connection."""


class Closed(Exception):
    """The client closed the connection cleanly between requests."""


class Idle(Exception):
    """The client sent nothing for the connection's idle time-out (between requests)."""


_TIMEVAL = struct.Struct("@ll")


def set_idle_timeout(sock: socket.socket, seconds: float) -> None:
    """Bound every receive and send on a client's connection by *seconds* with the kernel's
    SO_RCVTIMEO/SO_SNDTIMEO, leaving the socket blocking: a Python time-out
    (``settimeout``) costs a non-blocking switch per connection and a ``poll`` before every
    receive and send — five system calls of a swtpm: TCTI command, which connects anew for
    each command. A receive that waits longer fails with EAGAIN (:func:`recv_exact` says
    Idle or stalled). 0 means no bound (the kernel's meaning)."""
    tv = _TIMEVAL.pack(int(seconds), int((seconds % 1) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


def _idle_timeout(sock: socket.socket) -> float:
    """The receive time-out in force (for a message; the rare path)."""
    if sock.gettimeout() is not None:
        return float(sock.gettimeout() or 0.0)
    sec: int  # struct "@ll": two C longs
    usec: int
    try:
        sec, usec = _TIMEVAL.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _TIMEVAL.size))
    except OSError:
        return 0.0
    return sec + usec / 1e6


def recv_exact(sock: socket.socket, n: int, started: bool, poll: RequestPoll | None = None) -> bytes:
    """``n`` bytes, or :class:`Closed` if the peer closed before the first byte of a request
    (``started`` False), :class:`FrameError` if it closed in the middle of one."""
    buf = bytearray()
    while len(buf) < n:
        try:
            # What has arrived, without waiting (one system call: a command usually has).
            chunk = sock.recv(n - len(buf), socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            chunk = None
        except OSError as e:
            raise FrameError(f"connection error mid-request: {e.strerror or e}") from None
        if chunk is None:
            try:
                if _family(sock) != socket.AF_UNIX:
                    # ACK at once: the mssim TCTI writes its 9-byte header and the command in two
                    # writes without TCP_NODELAY, so Nagle holds the command until our ACK, which
                    # the kernel would otherwise delay by 40 ms.
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
                # The rest of a request is microseconds away, and so is a busy client's next
                # one: poll for it before sleeping (tpmtop.tpm.busypoll: an idle VM's wake-up)
                if started or buf:
                    if cap := poll_cap_ns():
                        chunk = recv_soon(sock, n - len(buf), cap)
                elif poll is not None and (budget := poll.budget()):
                    chunk = recv_soon(sock, n, budget)
                    poll.came(chunk is not None)
                if chunk is None:
                    if (started or buf) and not _readable(sock, FRAME_DEADLINE_S):
                        raise FrameError(f"stalled mid-request ({len(buf)} of {n} bytes) for {FRAME_DEADLINE_S:g} s")
                    chunk = sock.recv(n - len(buf))
            except (TimeoutError, BlockingIOError):  # the Python or the kernel (SO_RCVTIMEO) time-out
                if not buf and not started:
                    raise Idle from None
                raise FrameError(f"stalled mid-request ({len(buf)} of {n} bytes) for "
                                 f"{_idle_timeout(sock):g} s") from None
            except OSError as e:
                raise FrameError(f"connection error mid-request: {e.strerror or e}") from None
        if not chunk:
            if not buf and not started:
                raise Closed
            raise FrameError(f"disconnected mid-command ({len(buf)} of {n} bytes)")
        buf += chunk
    return bytes(buf)


def _readable(sock: socket.socket, seconds: float) -> bool:
    """Something to read (or the end) within ``seconds``: the deadline of a request's rest,
    apart from the socket's receive time-out (which ends the wait for a request)."""
    p = select.poll()
    p.register(sock, select.POLLIN)
    return bool(p.poll(int(seconds * 1000)))


def check_size(size: int, what: str) -> None:
    if size < TPM_HEADER or size > MAX_COMMAND:
        raise FrameError(f"{what} size field {size} outside {TPM_HEADER}..{MAX_COMMAND}: garbled frame")


def read_raw_command(sock: socket.socket, poll: RequestPoll | None = None) -> bytes:
    """swtpm data channel: one TPM command, framed by its own header's size field."""
    head = recv_exact(sock, TPM_HEADER, started=False, poll=poll)
    size = _U32.unpack_from(head, 2)[0]
    check_size(size, "command")
    return head + recv_exact(sock, size - TPM_HEADER, started=True)


def read_mssim_request(sock: socket.socket, poll: RequestPoll | None = None) -> tuple[int, int, bytes | None]:
    """mssim TPM port: ``(code, locality, command)``; command None for SESSION_END etc."""
    code = _U32.unpack(recv_exact(sock, 4, started=False, poll=poll))[0]
    if code == MS_SIM_TPM_SEND_COMMAND:
        hdr = recv_exact(sock, 5, started=True)
        locality, size = hdr[0], _U32.unpack_from(hdr, 1)[0]
        check_size(size, "send-command")
        cmd = recv_exact(sock, size, started=True)
        inner = _U32.unpack_from(cmd, 2)[0]
        if inner != size:
            raise FrameError(f"send-command frame of {size} bytes carries a TPM header of {inner}: garbled frame")
        return code, locality, cmd
    if code in (MS_SIM_SESSION_END, MS_SIM_STOP):
        return code, 0, None
    if code == MS_SIM_REMOTE_HANDSHAKE:
        recv_exact(sock, 4, started=True)  # the client's protocol version
        return code, 0, None
    raise FrameError(f"unknown request {code} on the mssim TPM port: garbled frame")


def mssim_response(rsp: bytes) -> bytes:
    return _U32.pack(len(rsp)) + rsp + b"\0\0\0\0"


def mssim_handshake_answer() -> bytes:
    # server version 1, TPM capabilities: platform available, uses TBS=0, in-place
    return _U32.pack(1) + _U32.pack(1) + _U32.pack(0)


def answer_platform(sock: socket.socket) -> tuple[int, bytes] | None:
    """One platform-port request → (signal, answer); None when the client closed."""
    try:
        code = _U32.unpack(recv_exact(sock, 4, started=False))[0]
    except Closed:
        return None
    if code == MS_SIM_HASH_DATA:  # u32 length + data, accepted and dropped
        n = _U32.unpack(recv_exact(sock, 4, started=True))[0]
        if n > MAX_COMMAND:
            raise FrameError(f"platform HASH_DATA of {n} bytes: garbled frame")
        recv_exact(sock, n, started=True)
    if code == MS_SIM_SESSION_END:
        return code, b""
    return code, _U32.pack(0)


def answer_control(sock: socket.socket, state: dict[str, Any]) -> tuple[int, bytes] | None:
    """One swtpm control-channel request → (cmd, answer); None when the client closed.

    ``state`` carries the locality the client set (reported per client)."""
    try:
        cmd = _U32.unpack(recv_exact(sock, 4, started=False))[0]
    except Closed:
        return None
    ok = _U32.pack(TPM_SUCCESS)
    if cmd == CMD_GET_CAPABILITY:
        return cmd, ok + _U32.pack(_CAPS)  # ptm_cap_n: result, caps
    if cmd == CMD_INIT:
        recv_exact(sock, 4, started=True)  # init flags: a shared TPM is not reset for one client
        return cmd, ok
    if cmd == CMD_SET_LOCALITY:
        loc = recv_exact(sock, 1, started=True)[0]
        if loc > 4:
            return cmd, _U32.pack(TPM_BAD_LOCALITY)
        state["locality"] = loc
        return cmd, ok
    if cmd == CMD_GET_TPMESTABLISHED:
        return cmd, ok + b"\0\0\0\0"  # bit 0 + padding
    if cmd == CMD_RESET_TPMESTABLISHED:
        recv_exact(sock, 1, started=True)
        return cmd, ok
    if cmd == CMD_HASH_DATA:
        n = _U32.unpack(recv_exact(sock, 4, started=True))[0]
        if n > MAX_COMMAND:
            raise FrameError(f"control HASH_DATA of {n} bytes: garbled frame")
        recv_exact(sock, n, started=True)
        return cmd, ok
    if cmd == CMD_SET_BUFFERSIZE:
        want = _U32.unpack(recv_exact(sock, 4, started=True))[0]
        size = want if 128 <= want <= MAX_COMMAND else MAX_COMMAND
        return cmd, ok + _U32.pack(size) + _U32.pack(128) + _U32.pack(MAX_COMMAND)
    if cmd in (CMD_SHUTDOWN, CMD_HASH_START, CMD_HASH_END, CMD_CANCEL_TPM_CMD, CMD_STORE_VOLATILE, CMD_STOP):
        return cmd, ok
    # state blobs, data fds, config: not offered through a shared proxy. Their payloads are
    # not read (their length is not known here): the caller closes the connection after this
    # answer, so no payload byte is ever taken for a request.
    state["refused"] = cmd
    return cmd, _U32.pack(TPM_BAD_ORDINAL)
