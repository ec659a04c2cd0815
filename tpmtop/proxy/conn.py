"""A client connection as the event loop holds it: the bytes received and not yet a whole
request, the bytes of an answer not yet sent, and its deadlines. :mod:`.session` (the TPM
port) and :mod:`.side` (the control and platform ports) say what its requests mean.

A connection is read only while it has nothing in flight: while its command waits for its
turn or for the TPM, or while its answer has not all gone out, it is out of the loop's read
set, so a client that sends ahead (or a flood of bytes) waits in its own socket buffer and
costs the proxy nothing. Its sockets stay in blocking mode; every receive and send here says
MSG_DONTWAIT (a switch to non-blocking mode is two more system calls per connection, and a
swtpm: TCTI client connects for every command).

Deadlines: a connection silent for the idle time-out is closed; a request started must be
whole within :data:`~.protocol.FRAME_DEADLINE_S` (a half-sent frame is dropped, never held).
One timer per connection looks at both, re-armed lazily (:mod:`.loop`).
Layer: proxy; no Textual.
"""

from __future__ import annotations

import socket
import time

from tpmtop.proxy import protocol as P
from tpmtop.proxy.loop import EVENT_READ as READ
from tpmtop.proxy.loop import EVENT_WRITE as WRITE
from tpmtop.proxy.loop import Timer
from tpmtop.proxy.state import ServerState
from tpmtop.tpm.busypoll import poll_cap_ns, recv_soon

RECV_SIZE = 65536
_DONTWAIT = socket.MSG_DONTWAIT
DRAIN_LIMIT = 65536  # bytes read and dropped after a refused control request, at most
DRAIN_S = 1.0  # and for this long at most


class Conn:
    """The parts every kind of connection shares; a kind defines :meth:`process` (the
    requests in ``buf``) and :meth:`ended` (what its end means)."""

    __slots__ = ("buf", "busy", "closed", "draining", "frame_since", "interest", "last", "need", "out",
                 "owner", "poll_cap", "sock", "srv", "tcp", "timer", "uid")

    def __init__(self, srv: ServerState, sock: socket.socket, owner: tuple[int, int] | None, tcp: bool):
        self.srv, self.sock, self.owner, self.tcp = srv, sock, owner, tcp
        self.buf = bytearray()
        self.out = b""  # an answer's rest, still to send
        self.need = 0  # the length of the request being received (for messages)
        self.busy = False  # a request in flight: not read meanwhile
        self.closed = False
        self.draining = 0  # >0: bytes left to read and drop before closing (a refused control request)
        self.interest = 0  # the events the loop watches for it
        self.last = time.monotonic()
        self.frame_since: float | None = None
        self.poll_cap = poll_cap_ns()  # the rest of a request is microseconds away: poll for it
        self.timer: Timer | None = None
        self.uid: int | None = None  # set by admission where a per-user cap counts it

    # -- in the loop ---------------------------------------------------------------------------
    def start(self) -> None:
        self._want(READ)
        self.timer = self.srv.loop.call_at(self.last + self.srv.check_period(), self._deadline)

    def _want(self, events: int) -> None:
        """Watch ``events`` (0: nothing) for this connection."""
        if events == self.interest or self.closed:
            return
        loop = self.srv.loop
        if not events:
            loop.unregister(self.sock)
        elif not self.interest:
            loop.register(self.sock, events, self.on_event)
        else:
            loop.modify(self.sock, events, self.on_event)
        self.interest = events

    def on_event(self, mask: int) -> None:
        try:
            if mask & WRITE:
                self.flush()
            elif mask & READ:
                self.read()
        except Exception as e:  # a bug must cost one connection, not the proxy
            self.srv.handler_failed(e)
            self.close()

    def read(self) -> None:
        try:
            data = self.sock.recv(RECV_SIZE, _DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            data = b""
            if self.buf:
                self.broken(f"connection error mid-request: {e.strerror or e}")
                return
        self.last = time.monotonic()
        if self.draining:
            self.draining = max(self.draining - len(data), 0)
            if not data or not self.draining:
                self.close()
            return
        if not data:
            if self.buf:
                self.broken(f"disconnected mid-command ({len(self.buf)} of {self.need} bytes)")
            else:
                self.ended()
            return
        self.buf += data
        self.received()

    def received(self) -> None:
        """New bytes are in ``buf``: serve what they complete (framing errors end the connection)."""
        if self.srv.stopping.is_set():
            return  # the proxy stops: nothing more goes to the TPM
        try:
            self.process()
        except P.FrameError as e:
            self.broken(str(e))

    def incomplete(self, need: int) -> bool:
        """A request is cut short in ``buf``: wait (True) or go on (False: more came)."""
        self.need = need
        if self.frame_since is None:
            self.frame_since = time.monotonic()
        if self.poll_cap:  # the rest is microseconds away: poll for it (tpmtop.tpm.busypoll)
            chunk = recv_soon(self.sock, RECV_SIZE, self.poll_cap)
            if chunk:
                self.buf += chunk
                return False
            if chunk == b"":  # closed mid-request: the read that follows says so
                return True
        if self.tcp:
            # ACK at once: the mssim TCTI writes its 9-byte header and the command in two writes
            # without TCP_NODELAY, so Nagle holds the command until our ACK, which the kernel
            # would otherwise delay by 40 ms. On loopback the ACK goes out inside this call and
            # the held command comes back in the same softirq: it is usually there to read at
            # once, without a trip through the loop.
            try:
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
                chunk = self.sock.recv(RECV_SIZE, _DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return True  # the read that follows sees the error
            if chunk:
                self.buf += chunk
                return False
        return True

    def whole(self, n: int) -> None:
        """The first ``n`` bytes of ``buf`` were a whole request."""
        del self.buf[:n]
        self.frame_since = None

    def try_send(self, data: bytes) -> int:
        """What the socket takes of ``data`` now, without waiting: 0 if nothing, -1 if the peer
        is gone. Any thread may call it (the owner's, answering from inside a TPM job)."""
        try:
            return self.sock.send(data, _DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:
            return -1

    def send(self, data: bytes) -> bool:
        """Send ``data`` without waiting; what the socket does not take now goes out when it
        can (the connection is not read meanwhile). False: the peer is gone."""
        sent = self.try_send(data)
        if sent < 0:
            return False
        if sent < len(data):
            self.out = data[sent:]
            self._want(WRITE)
        return True

    def flush(self) -> None:
        if not self.out:
            return  # a stale event (its number was another connection's in the same batch)
        sent = self.try_send(self.out)
        if sent < 0:
            self.gone(len(self.out))
            return
        self.out = self.out[sent:]
        if not self.out:
            self.last = time.monotonic()
            self.resume()

    def pause(self) -> None:
        """A request is in flight: not read until :meth:`resume`."""
        self.busy = True
        self._want(0)

    def resume(self) -> None:
        """Nothing in flight and nothing left to send: read on (what is buffered first)."""
        self.busy = False
        if self.closed:
            return
        if self.out:
            self._want(WRITE)
            return
        self._want(READ)
        if self.buf:
            self.received()

    def _deadline(self) -> None:
        if self.closed:
            return
        now = time.monotonic()
        period = self.srv.check_period()
        if self.busy or self.out:
            due = now + period  # waiting for its turn, the TPM or its peer: not idle
        elif self.frame_since is not None:
            due = self.frame_since + P.FRAME_DEADLINE_S
            if now >= due:
                self.broken(f"stalled mid-request ({len(self.buf)} of {self.need} bytes) for "
                            f"{P.FRAME_DEADLINE_S:g} s")
                return
        elif self.draining:
            self.close()
            return
        else:
            due = self.last + self.srv.idle_timeout
            if now >= due:
                self.idle()
                return
        self.timer = self.srv.loop.call_at(min(due, now + period), self._deadline)

    def close(self) -> None:
        if self.closed:
            return
        if self.interest:
            self.srv.loop.closing(self.sock)  # closed below: no EPOLL_CTL_DEL (Loop.closing)
            self.interest = 0
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        self.srv.conns.pop(self.sock, None)
        if self.uid is not None:
            self.srv.user_closed(self.uid)
        try:
            self.sock.close()
        except OSError:
            pass
        self.closed_now()

    def drain_and_close(self) -> None:
        """The answer is sent; the rest is read and dropped (closing with unread bytes would
        reset the connection under the answer), for a second at most."""
        self.buf.clear()
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close()
            return
        self.draining = DRAIN_LIMIT
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.srv.loop.call_later(DRAIN_S, self._deadline)

    # -- what a kind of connection says ----------------------------------------------------------
    def process(self) -> None:
        raise NotImplementedError

    def ended(self) -> None:
        """The peer closed between requests."""
        self.close()

    def broken(self, why: str) -> None:
        """The framing broke (or the connection did, mid-request): the connection is dropped."""
        self.close()

    def idle(self) -> None:
        """Silent for the idle time-out."""
        self.close()

    def gone(self, n: int) -> None:
        """The peer went away with ``n`` bytes of an answer unsent."""
        self.close()

    def closed_now(self) -> None:
        """After the socket is closed (the client's accounting)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} fd={self.sock.fileno()} busy={self.busy}>"


def shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
