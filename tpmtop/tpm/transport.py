"""The instrumented transport: the one path every TPM command tpmtop sends goes through.

``InstrumentedTransport`` is a tpm2-pytss ``PyTCTI`` (so ESAPI can use it) that also offers
``transact(command) -> response`` for tpmtop's own raw commands and the native session
engine. Both paths hand the same :class:`~tpmtop.tpm.exchange.Exchange` to the transport's
sink (the recorder, in tpmtop) and do nothing else on the round trip.

Under it sits a *backend* that moves bytes: a persistent socket to swtpm (twice as fast as
tpm2-tss's swtpm TCTI, which reconnects for every command), ``/dev/tpmrm0`` opened directly,
or any tpm2-tss TCTI through ``TCTILdr`` (tabrmd, mssim, …).
"""

from __future__ import annotations

import errno
import os
import socket
import time
from typing import Callable, Protocol

from tpm2_pytss.TCTI import PyTCTI

from tpmtop.errors import TpmConnectionError
from tpmtop.tpm import wire
from tpmtop.tpm.exchange import _LABELS, _WIRE_LOG, Exchange, ExchangeSink

MAX_RESPONSE = 4096


class Backend(Protocol):
    description: str

    def transact(self, command: bytes) -> bytes: ...

    def close(self) -> None: ...


class SocketBackend:
    """Raw TPM commands over a connected stream socket (swtpm's data channel).

    A signal (Ctrl-C, SIGTERM) can land between sending a command and reading all of its
    response. The partial response is kept and the rest drained before the next command, so
    the stream never falls out of step — the clean-up that follows an interruption (flushing
    tpmtop's handles) must still be able to talk to the TPM.
    """

    def __init__(self, sock: socket.socket, description: str):
        self.sock = sock
        self.description = description
        self._buf = bytearray()
        self._pending = False

    def _read_response(self) -> bytes:
        buf = self._buf
        while True:
            if len(buf) >= 10:
                size = int.from_bytes(buf[2:6], "big")
                if size < 10 or size > 65536:
                    raise TpmConnectionError(f"TPM sent a response of impossible size {size}")
                if len(buf) >= size:
                    rsp = bytes(buf[:size])
                    del buf[:size]
                    self._pending = False
                    return rsp
                want = size - len(buf)
            else:
                want = 10 - len(buf)
            chunk = self.sock.recv(max(want, 4096) if len(buf) >= 10 else want)
            if not chunk:
                raise TpmConnectionError(f"TPM closed the connection ({self.description})")
            buf += chunk

    def transact(self, command: bytes) -> bytes:
        try:
            if self._pending:
                self._read_response()  # the answer to an interrupted command: discard
            self._buf.clear()
            self.sock.sendall(command)
            self._pending = True
            return self._read_response()
        except OSError as e:
            raise TpmConnectionError(f"TPM connection lost ({self.description}): {e.strerror or e}") from None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def connect_tcp(host: str, port: int, timeout: float = 5.0) -> socket.socket:
    try:
        s = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        raise TpmConnectionError(f"cannot connect to TPM at {host}:{port}: {e.strerror or e}") from None
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(None)
    return s


class DeviceBackend:
    """A TPM character device (/dev/tpmrm0): one write, one read per command."""

    def __init__(self, path: str):
        self.path = path
        self.description = path
        self._pending = False
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except PermissionError:
            raise TpmConnectionError(permission_hint(path)) from None
        except FileNotFoundError:
            raise TpmConnectionError(f"{path} does not exist (no TPM, or its driver is not loaded)") from None
        except OSError as e:
            if e.errno == errno.EBUSY:
                raise TpmConnectionError(f"{path} is busy: another program holds it open "
                                         "(use /dev/tpmrm0, the resource manager)") from None
            raise TpmConnectionError(f"cannot open {path}: {e.strerror}") from None

    def transact(self, command: bytes) -> bytes:
        try:
            if self._pending:  # interrupted between write and read: collect that answer first
                os.read(self.fd, MAX_RESPONSE)
                self._pending = False
            os.write(self.fd, command)
            self._pending = True
            rsp = os.read(self.fd, MAX_RESPONSE)
            self._pending = False
            return rsp
        except OSError as e:
            raise TpmConnectionError(f"TPM device {self.path} failed: {e.strerror}") from None

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def permission_hint(path: str) -> str:
    import grp

    try:
        st = os.stat(path)
        group = grp.getgrgid(st.st_gid).gr_name
    except (OSError, KeyError):
        group = "tss"
    return (f"permission denied on {path}: join the '{group}' group "
            f"(sudo usermod -aG {group} $USER, then log in again) or run as root")


class TctiLdrBackend:
    """Any tpm2-tss TCTI (tabrmd, mssim, libtpms …) through tpm2-pytss's TCTILdr."""

    def __init__(self, name: str, conf: str | None):
        from tpm2_pytss.TCTILdr import TCTILdr

        self.description = f"{name}:{conf}" if conf else name
        try:
            self.tcti = TCTILdr(name, conf)
        except Exception as e:
            raise TpmConnectionError(f"cannot open TCTI {self.description}: {e}") from None

    def transact(self, command: bytes) -> bytes:
        try:
            self.tcti.transmit(command)
            return bytes(self.tcti.receive(-1))
        except Exception as e:
            raise TpmConnectionError(f"TCTI {self.description} failed: {e}") from None

    def close(self) -> None:
        try:
            self.tcti.finalize()
        except Exception:
            pass


# A latency shaper (issue: chip profiles) returns how long, in ns since the command was
# sent, the response must be held back; None means "as fast as it came".
Shaper = Callable[[wire.CommandInfo], "int | None"]


class InstrumentedTransport(PyTCTI):
    """Reports every exchange to its sink; never changes a byte of what is sent or received.

    Owned by one thread at a time (the TPM owner, :mod:`tpmtop.tpm.owner`, or a test or a
    benchmark that drives it directly): there is no lock on the round trip.
    """

    def __init__(self, backend: Backend, sink: ExchangeSink | None = None):
        super().__init__(max_size=MAX_RESPONSE, magic=b"TPMTOP\x00\x00")
        self.backend = backend
        self.sink = sink
        self.shaper: Shaper | None = None
        self._pending: bytes | None = None
        self.closed = False

    def transact(self, command: bytes) -> bytes:
        sink = self.sink
        report = sink is not None and sink.enabled
        log = _WIRE_LOG.get()
        if not report and self.shaper is None and log is None:
            return self.backend.transact(command)
        t0 = time.perf_counter_ns()
        try:
            rsp = self.backend.transact(command)
        except Exception as e:
            wire_ns = time.perf_counter_ns() - t0
            if log is not None:
                log.append((_cc(command), wire_ns))
            if report:
                sink.put(_new(Exchange, (t0, wire_ns, command, None, str(e), _LABELS.get())))
            raise
        if self.shaper is not None:
            hold = self.shaper(wire.decode_command(command))
            if hold:
                _sleep_until(t0 + hold)
        wire_ns = time.perf_counter_ns() - t0
        if log is not None:
            log.append((_cc(command), wire_ns))
        if report:
            sink.put(_new(Exchange, (t0, wire_ns, command, rsp, None, _LABELS.get())))
        return rsp

    # -- PyTCTI: ESAPI calls transmit then receive on the same thread ----------------------
    def do_transmit(self, command: bytes) -> None:
        self._pending = self.transact(bytes(command))

    def do_receive(self, timeout: int) -> bytes:
        rsp, self._pending = self._pending, None
        if rsp is None:
            raise TpmConnectionError("receive without a transmitted command")
        return rsp

    def do_finalize(self) -> None:
        pass  # the connection owns the backend; ESAPI closing must not close it

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.backend.close()


# An Exchange built by tuple.__new__ directly: the NamedTuple's generated __new__ is a Python
# call (~0.3 µs here), a noticeable share of a 30 µs round trip.
_new = tuple.__new__


def _cc(command: bytes) -> int | None:
    return int.from_bytes(command[6:10], "big") if len(command) >= 10 else None


def _sleep_until(deadline_ns: int) -> None:
    # sleep() for the bulk, then spin the last 200 µs: a profile's figures are ms-scale and
    # the scheduler's wake-up jitter would otherwise add ~60 µs to every held response.
    while True:
        left = deadline_ns - time.perf_counter_ns()
        if left <= 0:
            return
        if left > 300_000:
            time.sleep((left - 200_000) / 1e9)
