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

The readers here are incremental: each looks at the bytes a connection has received so far
(the event loop reads whatever arrived) and returns either a whole request with its length,
or the length the request needs before it can be judged. A frame that cannot be a request
(a size beyond any TPM's buffer, an unknown request code) raises :class:`FrameError` as soon
as the bytes that show it are in.
"""

from __future__ import annotations

import struct
from typing import Any

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


def check_size(size: int, what: str) -> None:
    if size < TPM_HEADER or size > MAX_COMMAND:
        raise FrameError(f"{what} size field {size} outside {TPM_HEADER}..{MAX_COMMAND}: garbled frame")


def _u32(buf: bytearray | bytes, at: int) -> int:
    value: int = _U32.unpack_from(buf, at)[0]
    return value


# What a reader returns: a whole request, or (as a plain int) the bytes it needs first.
# A request is (its length in the buffer, its code, locality, the TPM command or None).
Request = tuple[int, int, int, bytes | None]


def raw_command(buf: bytearray) -> Request | int:
    """swtpm data channel: one TPM command, framed by its own header's size field."""
    if len(buf) < 6:
        return TPM_HEADER
    size = _u32(buf, 2)
    check_size(size, "command")
    if len(buf) < size:
        return size
    return size, MS_SIM_TPM_SEND_COMMAND, 0, bytes(buf[:size])


def mssim_request(buf: bytearray) -> Request | int:
    """mssim TPM port: a send-command with its locality, or SESSION_END/STOP/handshake
    (command None)."""
    if len(buf) < 4:
        return 4
    code = _u32(buf, 0)
    if code == MS_SIM_TPM_SEND_COMMAND:
        if len(buf) < 9:
            return 9
        locality, size = buf[4], _u32(buf, 5)
        check_size(size, "send-command")
        if len(buf) < 9 + size:
            return 9 + size
        inner = _u32(buf, 11)
        if inner != size:
            raise FrameError(f"send-command frame of {size} bytes carries a TPM header of {inner}: garbled frame")
        return 9 + size, code, locality, bytes(buf[9:9 + size])
    if code in (MS_SIM_SESSION_END, MS_SIM_STOP):
        return 4, code, 0, None
    if code == MS_SIM_REMOTE_HANDSHAKE:  # u32 the client's protocol version
        return 8 if len(buf) < 8 else (8, code, 0, None)
    raise FrameError(f"unknown request {code} on the mssim TPM port: garbled frame")


def mssim_response(rsp: bytes) -> bytes:
    return _U32.pack(len(rsp)) + rsp + b"\0\0\0\0"


def mssim_handshake_answer() -> bytes:
    # server version 1, TPM capabilities: platform available, uses TBS=0, in-place
    return _U32.pack(1) + _U32.pack(1) + _U32.pack(0)


# What a side-port reader returns: (length, request code, answer), or the bytes it needs.
Answered = tuple[int, int, bytes]


def _with_payload(buf: bytearray, at: int, what: str) -> int:
    """The length of a request whose u32 payload length sits at ``at`` (0: not known yet)."""
    if len(buf) < at + 4:
        return 0
    n = _u32(buf, at)
    if n > MAX_COMMAND:
        raise FrameError(f"{what} HASH_DATA of {n} bytes: garbled frame")
    return at + 4 + n


def platform_request(buf: bytearray) -> Answered | int:
    """One platform-port request: (length, signal, answer); SESSION_END's answer is empty."""
    if len(buf) < 4:
        return 4
    code = _u32(buf, 0)
    n = 4
    if code == MS_SIM_HASH_DATA:  # u32 length + data, accepted and dropped
        n = _with_payload(buf, 4, "platform")
        if not n or len(buf) < n:
            return n or 8
    return n, code, b"" if code == MS_SIM_SESSION_END else _U32.pack(0)


# swtpm control requests with a fixed payload, answered success: cmd -> payload length
_FIXED = {CMD_INIT: 4, CMD_RESET_TPMESTABLISHED: 1, CMD_SHUTDOWN: 0, CMD_HASH_START: 0, CMD_HASH_END: 0,
          CMD_CANCEL_TPM_CMD: 0, CMD_STORE_VOLATILE: 0, CMD_STOP: 0}


def control_request(buf: bytearray, state: dict[str, Any]) -> Answered | int:
    """One swtpm control-channel request: (length, cmd, answer). ``state`` carries the
    locality the client set, and ``refused``: a request not offered, whose payload length is
    unknown (the caller answers, then reads no further request on that connection)."""
    if len(buf) < 4:
        return 4
    cmd = _u32(buf, 0)
    ok = _U32.pack(TPM_SUCCESS)
    if cmd == CMD_GET_CAPABILITY:
        return 4, cmd, ok + _U32.pack(_CAPS)  # ptm_cap_n: result, caps
    if cmd == CMD_GET_TPMESTABLISHED:
        return 4, cmd, ok + b"\0\0\0\0"  # bit 0 + padding
    if cmd in _FIXED:  # CMD_INIT's flags: a shared TPM is not reset for one client
        n = 4 + _FIXED[cmd]
        return n if len(buf) < n else (n, cmd, ok)
    if cmd == CMD_SET_LOCALITY:
        if len(buf) < 5:
            return 5
        loc = buf[4]
        if loc > 4:
            return 5, cmd, _U32.pack(TPM_BAD_LOCALITY)
        state["locality"] = loc
        return 5, cmd, ok
    if cmd == CMD_HASH_DATA:
        n = _with_payload(buf, 4, "control")
        if not n or len(buf) < n:
            return n or 8
        return n, cmd, ok
    if cmd == CMD_SET_BUFFERSIZE:
        if len(buf) < 8:
            return 8
        want = _u32(buf, 4)
        size = want if 128 <= want <= MAX_COMMAND else MAX_COMMAND
        return 8, cmd, ok + _U32.pack(size) + _U32.pack(128) + _U32.pack(MAX_COMMAND)
    # state blobs, data fds, config: not offered through a shared proxy. Their payloads are
    # not read (their length is not known here): no payload byte is ever taken for a request.
    state["refused"] = cmd
    return 4, cmd, _U32.pack(TPM_BAD_ORDINAL)
