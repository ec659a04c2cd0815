"""The instrumented transport: the one path every TPM command tpmtop sends goes through.

``InstrumentedTransport`` offers ``transact(command) -> response`` for tpmtop's own raw
commands and the native session engine; ESAPI reaches it through a tpm2-pytss ``PyTCTI``
(:class:`tpmtop.tpm.esapi.TransportTcti`, made when ESAPI is first used: a command that needs
no ESAPI, ``tpmtop info`` over SSH, never imports tpm2-pytss). Both paths hand the same exchange (a tuple laid out as
:class:`~tpmtop.tpm.exchange.Exchange`) to the transport's sink (the recorder, in tpmtop) and
do nothing else on the round trip.

Under it sits a *backend* that moves bytes: a persistent socket to swtpm (twice as fast as
tpm2-tss's swtpm TCTI, which reconnects for every command), ``/dev/tpmrm0`` opened directly,
or any tpm2-tss TCTI through ``TCTILdr`` (tabrmd, mssim, …).
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import time
from collections.abc import Callable
from typing import Any, Protocol

from tpmtop.errors import TpmConnectionError, TpmTimeout
from tpmtop.settings import current
from tpmtop.tpm import wire
from tpmtop.tpm.busypoll import AnswerBudget, recv_soon
from tpmtop.tpm.exchange import _LABELS, _WIRE_LOG, ExchangeSink, WireEntry, labelled, wire_log
from tpmtop.tpm.holdclock import sleep_until
from tpmtop.tpm.interrupts import held
from tpmtop.tpm.placement import HELD, FollowCaller

MAX_RESPONSE = 4096
_now = time.perf_counter_ns

# How long a backend waits for the TPM to take a command or answer it: the settings'
# tpm_deadline for most commands, tpm_deadline_long for the few the kernel itself waits longest
# for (LONG_COMMANDS); --timeout SECONDS replaces both (None: the settings decide). A busy TPM
# (another program holds a standalone swtpm's one connection) or a hung one is reported after it.
DEFAULT_TIMEOUT: float | None = None
# Connecting is quick or never: a host that does not answer is not worth the full wait.
CONNECT_TIMEOUT = 10.0
# Key generation and signature checks: the kernel's TPM_LONG_LONG class (drivers/char/tpm/
# tpm2-cmd.c: 300 s before 6.18, where 207696b17f38 cut CreatePrimary's to 30 s) — CreatePrimary,
# Create, CreateLoaded, VerifySignature. Everything else the kernel gives at most 2 s (its
# TPM_LONG) or its 120 s default for commands it does not list.
LONG_COMMANDS = frozenset({0x131, 0x153, 0x191, 0x177})


class Deadline:
    """How long one command may take: ``fixed`` (--timeout) for every command, else the
    settings' two deadlines by command code. Read once, when the backend is made."""

    def __init__(self, fixed: float | None = None) -> None:
        s = current()
        self.fixed = fixed
        self.ordinary = fixed if fixed is not None else s.tpm_deadline
        self.long = fixed if fixed is not None else max(s.tpm_deadline_long, s.tpm_deadline)

    def of(self, command: bytes) -> float:
        if self.long != self.ordinary and len(command) >= 10 \
                and int.from_bytes(command[6:10], "big") in LONG_COMMANDS:
            return self.long
        return self.ordinary


def no_answer(description: str, command: bytes | None, timeout: float) -> TpmTimeout:
    """The one line for a TPM that did not answer: which TPM, which command, how long."""
    what = "a command"
    if command is not None and len(command) >= 10:
        from tpmtop.tpm.names import cc_short

        what = cc_short(int.from_bytes(command[6:10], "big"))
    return TpmTimeout(f"{description} did not answer {what} within {timeout:g} s: the TPM is busy (another "
                      f"program holds it) or hung (--timeout SECONDS waits longer)")


class Backend(Protocol):
    description: str

    def transact(self, command: bytes) -> bytes: ...

    def close(self) -> None: ...


class SocketBackend:
    """Raw TPM commands over a connected stream socket (swtpm's data channel).

    A signal waits until the command in flight is answered (``InstrumentedTransport`` holds
    it), but a second one does not: then the partial response is kept and the rest drained
    before the next command, so the stream never falls out of step — the clean-up that
    follows an interruption (flushing tpmtop's handles) must still be able to talk to the TPM.

    Every send and receive is bounded by the command's :class:`Deadline` (the kernel's
    SO_SNDTIMEO/SO_RCVTIMEO: no extra system call per command, but for the few long commands,
    which set it and set it back). A TPM that stays silent that long ends the connection:
    its late answer would put the stream out of step, and clean-up must not wait again.
    """

    def __init__(self, sock: socket.socket, description: str, timeout: float | None = DEFAULT_TIMEOUT,
                 follow: FollowCaller | None = None):
        self.sock = sock
        self.description = description
        self.deadline = Deadline(timeout)
        self.timeout = self.deadline.ordinary
        self._buf = bytearray()
        self._pending = False
        self._answers = AnswerBudget()  # how long to poll for each command's answer
        # A private swtpm's placement (tpmtop.tpm.placement): asked before each command; while
        # swtpm runs on this thread's CPU a poll would only keep it waiting.
        self._follow = follow
        # Set once the connection is gone (closed, failed, timed out): every later command
        # gets the same error at once, and ESAPI's follow-on errors are reported as it.
        self.lost: TpmConnectionError | None = None
        self._wait(self.timeout)

    def _wait(self, seconds: float) -> None:
        tv = struct.pack("@ll", int(seconds), int((seconds % 1) * 1e6))
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        except OSError:
            pass  # a closed socket: the first command says so

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
            # Whatever has come, up to a whole buffer: swtpm answers one command at a time, so
            # nothing after this response can be in the socket (one receive per answer, not
            # a header and then the rest)
            chunk = self.sock.recv(max(want, 4096))
            if not chunk:
                raise TpmConnectionError(f"TPM connection lost ({self.description}): it closed the connection")
            buf += chunk

    def transact(self, command: bytes) -> bytes:
        if self.lost:
            raise self.lost
        try:
            if self._pending:
                self._read_response()  # the answer to an interrupted command: discard
            self._buf.clear()
            cc = command[6:10]
            follow = self._follow
            here = follow.before() if follow is not None else 0
            poll_ns = 0 if here else self._answers.budget(cc)
            wait = self.deadline.of(command)
            if wait != self.timeout:
                self._wait(wait)
            try:
                self.sock.sendall(command)
                self._pending = True
                t0 = _now()
                if poll_ns:
                    # a fast TPM's answer: poll for it rather than sleep (tpmtop.tpm.busypoll)
                    first = recv_soon(self.sock, MAX_RESPONSE, poll_ns)
                    if first:
                        self._buf += first
                    # b"" (closed): _read_response's recv sees the same end of file and says so
                rsp = self._read_response()
            finally:
                if here == HELD and follow is not None:  # the caller was held on swtpm's CPU
                    follow.after()
                if wait != self.timeout:
                    self._wait(self.timeout)
            self._answers.learn(cc, _now() - t0, polled=poll_ns > 0)
            return rsp
        except (TimeoutError, BlockingIOError):  # SO_RCVTIMEO/SO_SNDTIMEO ran out
            self.lost = no_answer(self.description, command, self.deadline.of(command))
        except OSError as e:
            self.lost = TpmConnectionError(f"TPM connection lost ({self.description}): {e.strerror or e}")
        except TpmConnectionError as e:
            self.lost = e
        raise self.lost

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def connect_tcp(host: str, port: int, timeout: float | None = CONNECT_TIMEOUT) -> socket.socket:
    wait = min(timeout, CONNECT_TIMEOUT) if timeout is not None else CONNECT_TIMEOUT
    try:
        s = socket.create_connection((host, port), timeout=wait)
    except TimeoutError:
        raise TpmTimeout(f"cannot connect to TPM at {host}:{port}: no answer within {wait:g} s") from None
    except OSError as e:
        raise TpmConnectionError(f"cannot connect to TPM at {host}:{port}: {e.strerror or e}") from None
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(None)
    return s


class DeviceBackend:
    """A TPM character device (/dev/tpmrm0): one write, one read per command."""

    def __init__(self, path: str, timeout: float | None = DEFAULT_TIMEOUT):
        self.path = path
        self.description = path
        self.deadline = Deadline(timeout)
        self.timeout = self.deadline.ordinary
        self._pending = False
        self.lost: TpmConnectionError | None = None  # set by a time-out: see SocketBackend
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
        self._poll = select.poll()
        self._poll.register(self.fd, select.POLLIN)

    def _read(self, command: bytes) -> bytes:
        # The TPM driver supports poll(): wait for the answer at most `timeout` (a real chip
        # answers in ms, so the extra system call is noise).
        wait = self.deadline.of(command)
        if not self._poll.poll(int(wait * 1000)):
            self.lost = no_answer(self.description, command, wait)
            raise self.lost
        return os.read(self.fd, MAX_RESPONSE)

    def transact(self, command: bytes) -> bytes:
        if self.lost:
            raise self.lost
        try:
            if self._pending:  # interrupted between write and read: collect that answer first
                self._read(command)
                self._pending = False
            os.write(self.fd, command)
            self._pending = True
            rsp = self._read(command)
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


_TCTI_RC_TRY_AGAIN = 0xA0009  # TSS2_TCTI_RC_TRY_AGAIN: the TCTI's receive timed out


class TctiLdrBackend:
    """Any tpm2-tss TCTI (tabrmd, mssim, libtpms …) through tpm2-pytss's TCTILdr."""

    def __init__(self, name: str, conf: str | None, timeout: float | None = DEFAULT_TIMEOUT):
        from tpm2_pytss.TCTILdr import TCTILdr

        self.description = f"{name}:{conf}" if conf else name
        self.deadline = Deadline(timeout)
        self.timeout = self.deadline.ordinary
        self.lost: TpmConnectionError | None = None  # set by a time-out: see SocketBackend
        try:
            self.tcti = TCTILdr(name, conf)
        except Exception as e:
            raise TpmConnectionError(f"cannot open TCTI {self.description}: {e}") from None

    def transact(self, command: bytes) -> bytes:
        if self.lost:
            raise self.lost
        wait = self.deadline.of(command)
        try:
            self.tcti.transmit(command)
            return bytes(self.tcti.receive(-1, int(wait * 1000)))
        except Exception as e:
            if getattr(e, "rc", None) == _TCTI_RC_TRY_AGAIN:  # receive's timeout ran out
                self.lost = no_answer(f"TCTI {self.description}", command, wait)
                raise self.lost from None
            raise TpmConnectionError(f"TCTI {self.description} failed: {e}") from None

    def close(self) -> None:
        try:
            self.tcti.finalize()
        except Exception:
            pass


# A latency shaper (issue: chip profiles) returns how long, in ns since the command was
# sent, the response must be held back; None means "as fast as it came".
Shaper = Callable[[wire.CommandInfo], "int | None"]


class InstrumentedTransport:
    """Reports every exchange to its sink; never changes a byte of what is sent or received.

    Owned by one thread at a time (the TPM owner, :mod:`tpmtop.tpm.owner`, or a test or a
    benchmark that drives it directly): there is no lock on the round trip.
    """

    def __init__(self, backend: Backend, sink: ExchangeSink | None = None):
        self.backend = backend
        self.sink = sink
        self.shaper: Shaper | None = None
        self.closed = False

    def transact(self, command: bytes) -> bytes:
        # On the owner thread no signal can land; a caller on the main thread (a test, a
        # one-off command) gets the same guarantee: a signal waits until this command is
        # answered and reported, so the stream stays in step and a handle it created is known
        # to the clean-up that follows.
        with held():
            return self._transact(command)

    def transact_as(self, command: bytes, labels: Any, _now: Callable[[], int] = time.perf_counter_ns,
                    _log: Callable[[], Any] = _WIRE_LOG.get) -> tuple[bytes, int]:
        """One command stamped with ``labels`` (given, not the context's): (response, wire ns).
        For a caller that sends one command per job and needs its wire time (the proxy's
        exchange): no context variable is set or read on the way (two of them, set and reset
        around each command, were ~1.6 µs of a proxied command's ~8 µs of Python on this
        project's VM). Anything more than recording (a shaper, an enclosing wire log) goes
        the general way, with the same result."""
        put, sink = self._put, self._sink
        if put is None or sink is None or not sink.enabled or self.shaper is not None or _log() is not None:
            log: list[WireEntry] = []
            with labelled(labels), wire_log(log):
                rsp = self.transact(command)
            return rsp, (log[-1][1] if log else 0)
        with held():
            t0 = _now()
            try:
                rsp = self.backend.transact(command)
            except Exception as e:
                put((t0, _now() - t0, command, None, str(e), labels))
                raise
            wire_ns = _now() - t0
            put((t0, wire_ns, command, rsp, None, labels))
            return rsp, wire_ns

    @property
    def sink(self) -> ExchangeSink | None:
        return self._sink

    @sink.setter
    def sink(self, sink: ExchangeSink | None) -> None:
        self._sink = sink
        # the round trip appends through the bound method itself: no look-up per command
        self._put = sink.put if sink is not None else None

    def _transact(self, command: bytes, _now: Callable[[], int] = time.perf_counter_ns,
                  _labels: Callable[[], Any] = _LABELS.get, _log: Callable[[], Any] = _WIRE_LOG.get) -> bytes:
        sink = self._sink
        if sink is not None and sink.enabled and self.shaper is None and _log() is None:
            # Recording, nothing else (every proxied command, every ESAPI call): the two clock
            # reads, one tuple in Exchange's field order and an append — the whole of what
            # recording adds to the round trip (benchmarks/overhead.py).
            t0 = _now()
            try:
                rsp = self.backend.transact(command)
            except Exception as e:
                self._put((t0, _now() - t0, command, None, str(e), _labels()))  # type: ignore[misc]
                raise
            self._put((t0, _now() - t0, command, rsp, None, _labels()))  # type: ignore[misc]
            return rsp
        report = sink is not None and sink.enabled
        log = _log()
        if not report and self.shaper is None and log is None:
            return self.backend.transact(command)
        t0 = _now()
        try:
            rsp = self.backend.transact(command)
        except Exception as e:
            wire_ns = _now() - t0
            if log is not None:
                log.append((_cc(command), wire_ns, t0))
            if report and sink is not None:
                sink.put((t0, wire_ns, command, None, str(e), _labels()))
            raise
        if self.shaper is not None:
            hold = self.shaper(wire.decode_command(command))
            if hold:
                sleep_until(t0 + hold)
        wire_ns = _now() - t0
        if log is not None:
            log.append((int.from_bytes(command[6:10], "big") if len(command) >= 10 else None, wire_ns, t0))
        if report and sink is not None:
            # A plain tuple in Exchange's field order: building the NamedTuple itself (even by
            # tuple.__new__) cost ~0.25 µs here, half of what recording adds to a command.
            sink.put((t0, wire_ns, command, rsp, None, _labels()))
        return rsp

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.backend.close()


def _cc(command: bytes) -> int | None:
    return int.from_bytes(command[6:10], "big") if len(command) >= 10 else None
