"""The exporter's HTTP(S) endpoint: one asyncio event loop serves every connection.

Why not prometheus_client's own server: it is wsgiref's threading server, a thread per open
connection with no cap and no time-out (300 held connections were 303 threads; under the
unit's ``TasksMax=16`` 40 of them made scrapes fail), and with TLS the handshake runs in the
accepting thread, so one silent TCP connection stalled every HTTPS scrape. Here:

* one thread runs the loop; a connection is a few objects in it, not a thread, and at most
  ``max_connections`` are open, handshakes included (more get a 503 over plain HTTP, or are
  closed before the handshake over TLS, counted in one rate-limited line a second:
  :mod:`tpmtop.ratelog`);
* one user cannot take every slot: a loopback peer is counted by the uid that owns its socket
  (sock_diag, :func:`tpmtop.proxy.peers.socket_owner`), another host by its address, and each
  gets at most ``max_per_peer`` connections and ``HANDSHAKES_PER_PEER`` handshakes;
* TLS is ours over a plain connection (ssl's memory BIOs), not asyncio's ``ssl=``: asyncio's
  SSLProtocol allocates a 256 KiB receive buffer per connection at accept, so 3,000 silent
  clients held ~930 MB, and the freed buffers stayed in the allocator's arenas (issue 50).
  Here a connection that has sent nothing holds no TLS state at all; the TLS object is made
  when its first bytes arrive, at most ``max_handshakes`` are under way at once (a client
  waits for a turn within its deadline) and it is dropped when the handshake fails or times
  out. Time-outs and failures are counted (``tpmtop_exporter_connections_ended_total``) and
  logged at a rate limit;
* a connection has ``read_deadline_s`` to send a whole request head: a silent or half-sent
  client is dropped after seconds and delays no one meanwhile;
* one request per connection (``Connection: close``, as wsgiref did);
* the exposition is still prometheus_client's WSGI application (content negotiation,
  gzip, ``name[]``), called with a WSGI environ built here, on one rendering thread of its own
  (``RenderedOnceASecond`` keeps it to one rendering a second whoever scrapes).

asyncio rather than selectors by hand: its streams give TLS with a handshake time-out and
per-connection deadlines (``wait_for``) without a state machine of ours, and the exporter's
cost is its rendering, not the loop's overhead.
Layer: exporter; no Textual.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import ipaddress
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from tpmtop.errors import UsageError
from tpmtop.exporter.families import ConnectionEnd
from tpmtop.limits import raise_nofile
from tpmtop.ratelog import RateLimitedLog

MAX_CONNECTIONS = 4096  # open at once, handshakes included; each is a few KB in the loop (and one descriptor)
MAX_PER_PEER = 1024  # of them for one user (loopback) or one address: a quarter, so three others still fit
MAX_HANDSHAKES = 64  # TLS handshakes under way at once (each holds OpenSSL's state, ~100 KB at most)
HANDSHAKES_PER_PEER = 16  # of them for one user or address
READ_DEADLINE_S = 10.0  # from accept to the request's blank line, TLS handshake included
WRITE_DEADLINE_S = 30.0  # to send a response (a scraper that stops reading is dropped)
MAX_HEAD = 16384  # bytes of request line and headers
TLS_READ = 16384  # bytes taken from the socket, or decrypted, at a time (one TLS record)
LISTEN_BACKLOG = 1024
TICK_S = 0.25  # the rate-limited log's summaries
STOP_WAIT_S = 5.0  # for the handlers to end at shutdown (within the 10 s shutdown() waits for the thread)


def tls_context(certfile: str, keyfile: str, client_cafile: str | None) -> ssl.SSLContext:
    """A server context; with ``client_cafile``, a scraper must present a certificate it signed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(certfile=certfile, keyfile=keyfile)
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"--tls-cert {certfile} / --tls-key {keyfile}: cannot load them ({e})") from None
    if client_cafile:
        try:
            ctx.load_verify_locations(cafile=client_cafile)
        except (OSError, ssl.SSLError) as e:
            raise UsageError(f"--tls-client-ca {client_cafile}: cannot load it ({e})") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class _Ended(Exception):
    """A connection ended before it was served, and why."""

    def __init__(self, reason: ConnectionEnd, text: str) -> None:
        super().__init__(text)
        self.reason = reason


class _Plain:
    """The request/response side of a plain connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def read_head(self) -> bytes | None:
        """The request head up to its blank line; None if the client closed first."""
        try:
            return await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        except asyncio.LimitOverrunError:
            raise _Ended(ConnectionEnd.BAD_REQUEST, "request head too large") from None

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()


class _Tls(_Plain):
    """TLS over a plain connection with ssl's memory BIOs: the only buffers are OpenSSL's own
    (released between records: CPython sets SSL_MODE_RELEASE_BUFFERS) and what one read took."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ctx: ssl.SSLContext,
                 first: bytes) -> None:
        super().__init__(reader, writer)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.incoming.write(first)
        self.tls: ssl.SSLObject | None = ctx.wrap_bio(self.incoming, self.outgoing, server_side=True)

    def _flush(self) -> None:
        if self.outgoing.pending:
            self.writer.write(self.outgoing.read())

    async def _feed(self) -> None:
        data = await self.reader.read(TLS_READ)
        if not data:
            raise ConnectionResetError("closed by the client")
        self.incoming.write(data)

    async def handshake(self) -> None:
        assert self.tls is not None
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                await self._feed()
        self._flush()

    async def read_head(self) -> bytes | None:
        assert self.tls is not None
        got = bytearray()
        while b"\r\n\r\n" not in got:
            if len(got) > MAX_HEAD:
                raise _Ended(ConnectionEnd.BAD_REQUEST, "request head too large")
            try:
                chunk = self.tls.read(TLS_READ)
            except ssl.SSLWantReadError:
                self._flush()
                try:
                    await self._feed()
                except ConnectionResetError:
                    return None
                continue
            except ssl.SSLZeroReturnError:
                return None
            if not chunk:
                return None
            got += chunk
        end = got.index(b"\r\n\r\n") + 4
        if end > MAX_HEAD:
            raise _Ended(ConnectionEnd.BAD_REQUEST, "request head too large")
        return bytes(got[:end])

    def write(self, data: bytes) -> None:
        assert self.tls is not None
        view = memoryview(data)
        while view:
            n = self.tls.write(view[:TLS_READ])
            view = view[n:]
            self._flush()

    def close_notify(self) -> None:
        """Say close_notify (not waiting for the client's) and let OpenSSL's state go."""
        if self.tls is None:
            return
        try:
            self.tls.unwrap()
        except (ssl.SSLError, OSError):
            pass
        self._flush()
        self.tls = None


class _Turns:
    """One peer's share of the handshake slots, kept while it has a handshake waiting or under way."""

    def __init__(self, n: int) -> None:
        self.slots = asyncio.Semaphore(n)
        self.users = 0


class HttpServer:
    """Serve a WSGI ``app`` on ``sock`` (bound and listening) from one event loop thread."""

    def __init__(self, sock: socket.socket, app: Callable[..., Iterable[bytes]], *,
                 tls: ssl.SSLContext | None = None, log: Callable[[str], None] | None = None,
                 max_connections: int = MAX_CONNECTIONS, read_deadline_s: float = READ_DEADLINE_S,
                 max_per_peer: int = MAX_PER_PEER, max_handshakes: int = MAX_HANDSHAKES,
                 handshakes_per_peer: int = HANDSHAKES_PER_PEER):
        self.sock, self.app, self.tls = sock, app, tls
        self.max_connections, self.read_deadline_s = max_connections, read_deadline_s
        self.max_per_peer, self.max_handshakes = max_per_peer, max_handshakes
        self.handshakes_per_peer = handshakes_per_peer
        self.server_address = sock.getsockname()
        self.log = RateLimitedLog(log or _stderr)
        self.open = 0  # connections open now, TLS handshakes included
        self.handshaking = 0  # TLS handshakes under way now
        self.handshaking_peak = 0  # the most at once so far
        self.handshakes = 0  # started so far
        self.served = 0
        self.ended: dict[ConnectionEnd, int] = dict.fromkeys(ConnectionEnd, 0)  # not served, by why
        self._per_peer: dict[str, int] = {}  # peer key -> connections open
        self._handshake_slots = asyncio.Semaphore(max_handshakes)
        self._peer_turns: dict[str, _Turns] = {}  # peer key -> its share of them, while it has a handshake
        self._loop = asyncio.new_event_loop()
        self._render = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="exporter-render")
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._run, name="exporter-http", daemon=True)
        raise_nofile(max_connections + 256)

    @property
    def refused(self) -> int:
        """Connections refused at accept (over the limit or the peer's share)."""
        return self.ended[ConnectionEnd.LIMIT] + self.ended[ConnectionEnd.PEER_LIMIT]

    @property
    def dropped(self) -> int:
        """Connections accepted and dropped unserved."""
        return sum(self.ended.values()) - self.refused

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> HttpServer:
        self._thread.start()
        self._ready.wait(30)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        # What asyncio would log itself (a transport's fatal error, accept() out of descriptors)
        # is a line a peer can cause: through the rate-limited log, not the logging module.
        self._loop.set_exception_handler(self._loop_error)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._connection, sock=self.sock, backlog=LISTEN_BACKLOG, limit=MAX_HEAD))
            self._loop.call_later(TICK_S, self._tick)
        finally:
            self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def _loop_error(self, _loop: asyncio.AbstractEventLoop, ctx: dict[str, Any]) -> None:
        exc = ctx.get("exception")
        if isinstance(exc, asyncio.CancelledError):
            # A handler cancelled by shutdown(): Python 3.11's stream callback asks the task
            # for its exception, which raises CancelledError, and the loop calls that an error
            return
        self.log("errors", f"{ctx.get('message')}{': ' + str(exc) if exc else ''}")

    def _tick(self) -> None:
        self.log.tick()
        self._loop.call_later(TICK_S, self._tick)

    def shutdown(self) -> None:
        """Stop serving (open connections are closed); idempotent."""
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            # Each handler runs its cancellation (its finally closes its connection and its
            # count) before the loop stops: stopped at once, the loop left some of them for
            # good, their clients never told and their transports never closed.
            if handlers:
                await asyncio.wait(handlers, timeout=STOP_WAIT_S)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(stop(), self._loop)
        self._thread.join(10)
        self._render.shutdown(wait=False, cancel_futures=True)
        self.log.flush()

    def server_close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- one connection ---------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer_key(writer)
        if self.open >= self.max_connections:
            self._refuse(writer, ConnectionEnd.LIMIT, f"{self.max_connections} connections are open (the limit)")
            return
        if self._per_peer.get(peer, 0) >= self.max_per_peer:
            self._refuse(writer, ConnectionEnd.PEER_LIMIT,
                         f"{peer} holds {self.max_per_peer} connections (one peer's limit)")
            return
        self.open += 1
        self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
        conn: _Plain = _Plain(reader, writer)
        try:
            deadline = self._loop.time() + self.read_deadline_s
            if self.tls is not None:
                tls = await self._handshake(reader, writer, peer, deadline)
                if tls is None:
                    return  # closed before a byte (a port check): nothing to say
                conn = tls
            await asyncio.wait_for(self._serve(conn, deadline), self.read_deadline_s + WRITE_DEADLINE_S)
        except _Ended as e:
            self._drop(writer, e.reason, str(e))
        except TimeoutError:
            self._drop(writer, ConnectionEnd.READ_TIMEOUT, f"no whole request within {self.read_deadline_s:g} s")
        except (ConnectionError, OSError, ssl.SSLError, asyncio.IncompleteReadError) as e:
            self._drop(writer, ConnectionEnd.BAD_REQUEST, type(e).__name__)
        finally:
            if isinstance(conn, _Tls):
                conn.tls = None  # OpenSSL's state goes with the connection, whatever ended it
            self.open -= 1
            left = self._per_peer[peer] - 1
            if left:
                self._per_peer[peer] = left
            else:
                del self._per_peer[peer]
            _abort(writer, graceful=False)

    def _refuse(self, writer: asyncio.StreamWriter, reason: ConnectionEnd, why: str) -> None:
        self.ended[reason] += 1
        self.log("refused", f"{why}: a connection from {_peer(writer)} refused ({self.refused:,} so far)")
        if self.tls is None:
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                         b"Content-Length: 26\r\n\r\ntoo many open connections\n")
        _abort(writer, graceful=self.tls is None)

    def _drop(self, writer: asyncio.StreamWriter, reason: ConnectionEnd, why: str) -> None:
        self.ended[reason] += 1
        self.log(reason.value, f"a connection from {_peer(writer)} dropped: {why}")

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str,
                         deadline: float) -> _Tls | None:
        """The TLS connection once its handshake is done, by ``deadline`` (None if the client
        closed before sending anything). Until the client's first bytes it holds no TLS state;
        then it waits for one of ``max_handshakes`` turns and of its peer's share of them
        (semaphores: a handshake's end wakes one waiter, not all of them)."""
        assert self.tls is not None
        loop = self._loop
        try:
            first = await asyncio.wait_for(reader.read(TLS_READ), max(deadline - loop.time(), 0.001))
        except TimeoutError:
            raise _Ended(ConnectionEnd.HANDSHAKE_TIMEOUT,
                         f"no TLS handshake within {self.read_deadline_s:g} s") from None
        if not first:
            return None
        turns = self._peer_turns.setdefault(peer, _Turns(self.handshakes_per_peer))
        turns.users += 1
        try:
            return await asyncio.wait_for(self._handshake_in_turn(reader, writer, turns, first),
                                          max(deadline - loop.time(), 0.001))
        except TimeoutError:
            raise _Ended(ConnectionEnd.HANDSHAKE_TIMEOUT,
                         f"no TLS handshake within {self.read_deadline_s:g} s") from None
        finally:
            turns.users -= 1
            if not turns.users:
                del self._peer_turns[peer]

    async def _handshake_in_turn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                 turns: _Turns, first: bytes) -> _Tls:
        assert self.tls is not None
        async with turns.slots, self._handshake_slots:
            if reader.at_eof():  # the client left while it waited: no handshake (its CPU, OpenSSL's memory) for no one
                raise _Ended(ConnectionEnd.HANDSHAKE_FAILED, "closed by the client before its handshake's turn")
            self.handshaking += 1
            self.handshakes += 1
            self.handshaking_peak = max(self.handshaking_peak, self.handshaking)
            try:
                conn = _Tls(reader, writer, self.tls, first)
                await conn.handshake()
                return conn
            except (ssl.SSLError, ConnectionError, OSError) as e:
                raise _Ended(ConnectionEnd.HANDSHAKE_FAILED, f"TLS handshake failed ({type(e).__name__})") from None
            finally:
                self.handshaking -= 1

    async def _serve(self, conn: _Plain, deadline: float) -> None:
        loop = self._loop
        try:
            head = await asyncio.wait_for(conn.read_head(), max(deadline - loop.time(), 0.001))
        except _Ended:
            await self._respond(conn, "431 Request Header Fields Too Large", [], [b"request head too large\n"])
            raise
        if head is None:
            return  # closed before a whole request (a port check): nothing to say
        environ = _environ(head, conn.writer, https=self.tls is not None)
        if environ is None:
            await self._respond(conn, "400 Bad Request", [], [b"bad request\n"])
            raise _Ended(ConnectionEnd.BAD_REQUEST, "not an HTTP request")
        got: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            got["status"], got["headers"] = status, headers

        body = await loop.run_in_executor(self._render, lambda: list(self.app(environ, start_response)))
        if environ["REQUEST_METHOD"] == "HEAD":
            length = sum(len(b) for b in body)
            await self._respond(conn, got["status"], got["headers"], [], length)
        else:
            await self._respond(conn, got["status"], got["headers"], body)
        self.served += 1
        if isinstance(conn, _Tls):
            conn.close_notify()
            await asyncio.wait_for(conn.drain(), WRITE_DEADLINE_S)
        conn.writer.close()  # after what was written has gone out
        await asyncio.wait_for(conn.writer.wait_closed(), WRITE_DEADLINE_S)

    async def _respond(self, conn: _Plain, status: str, headers: list[tuple[str, str]],
                       body: list[bytes], length: int | None = None) -> None:
        n = sum(len(b) for b in body) if length is None else length
        lines = [f"HTTP/1.1 {status}"] + [f"{k}: {v}" for k, v in headers
                                          if k.lower() not in ("content-length", "connection")]
        lines += [f"Content-Length: {n}", "Connection: close", "", ""]
        conn.write("\r\n".join(lines).encode("latin-1"))
        for b in body:
            conn.write(b)
        await asyncio.wait_for(conn.drain(), WRITE_DEADLINE_S)


def _environ(head: bytes, writer: asyncio.StreamWriter, https: bool) -> dict[str, Any] | None:
    """A WSGI environ for the request ``head`` (request line and headers), or None if it is no
    HTTP request."""
    try:
        text = head.decode("latin-1")
        request, *fields = text[:-4].split("\r\n")
        method, target, version = request.split(" ")
    except ValueError:
        return None
    if not version.startswith("HTTP/1.") or not target.startswith("/"):
        return None
    path, _, query = target.partition("?")
    host, port = (writer.get_extra_info("sockname") or ("", 0))[:2]
    env: dict[str, Any] = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "SERVER_PROTOCOL": version,
        "SERVER_NAME": str(host), "SERVER_PORT": str(port), "SCRIPT_NAME": "",
        "wsgi.version": (1, 0), "wsgi.url_scheme": "https" if https else "http", "wsgi.input": io.BytesIO(),
        "wsgi.errors": sys.stderr, "wsgi.multithread": False, "wsgi.multiprocess": False, "wsgi.run_once": False,
    }
    for f in fields:
        k, sep, v = f.partition(":")
        if not sep:
            return None
        key = k.strip().upper().replace("-", "_")
        env["CONTENT_TYPE" if key == "CONTENT_TYPE" else f"HTTP_{key}"] = v.strip()
    return env


def _peer_key(writer: asyncio.StreamWriter) -> str:
    """Whose share a connection counts in: ``uid N`` for a loopback peer whose socket's owner
    the kernel names, else its address (every host behind one address shares it; a loopback
    peer already gone shares one key with every other unnamed one, never a user's)."""
    peer, local = writer.get_extra_info("peername"), writer.get_extra_info("sockname")
    if not (isinstance(peer, tuple) and isinstance(local, tuple)):
        return "an unknown peer"
    host = str(peer[0])
    try:
        loopback = ipaddress.ip_address(host.removeprefix("::ffff:")).is_loopback
    except ValueError:
        return host
    if loopback:
        from tpmtop.proxy.peers import socket_owner

        owner = socket_owner(peer, local, ":" in host)
        if owner is not None and owner[1] != 0:  # inode 0: the peer's socket is gone (TIME_WAIT)
            return f"uid {owner[0]}"
    return host


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "an unknown peer"


def _abort(writer: asyncio.StreamWriter, graceful: bool) -> None:
    """Close at once: nothing waits on a peer that does not read (its data is dropped)."""
    try:
        if graceful:
            writer.close()
        else:
            writer.transport.abort()
    except (OSError, RuntimeError):
        pass


def _stderr(text: str) -> None:
    from tpmtop.textsafe import safe

    print(f"tpmtop exporter: {safe(text)}", file=sys.stderr, flush=True)
