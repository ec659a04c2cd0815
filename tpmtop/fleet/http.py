"""The exporter's HTTP(S) endpoint: one asyncio event loop serves every connection.

Why not prometheus_client's own server: it is wsgiref's threading server, a thread per open
connection with no cap and no time-out (300 held connections were 303 threads; under the
unit's ``TasksMax=16`` 40 of them made scrapes fail), and with TLS the handshake runs in the
accepting thread, so one silent TCP connection stalled every HTTPS scrape. Here:

* one thread runs the loop; a connection is a few objects in it, not a thread, and at most
  ``max_connections`` are open (more get a 503 over plain HTTP, or are closed before the
  handshake over TLS, counted in one rate-limited line a second: :mod:`tpmtop.ratelog`);
* the TLS handshake is the loop's (asyncio's, bounded by ``ssl_handshake_timeout``), never
  the accept path's: a client that never speaks costs its own time-out, not anyone's scrape;
  the cap counts connections from the end of their handshake;
* a connection has ``read_deadline_s`` to send a whole request head: a silent or half-sent
  client is dropped after seconds and delays no one meanwhile;
* one request per connection (``Connection: close``, as wsgiref did);
* the exposition is still prometheus_client's WSGI application (content negotiation,
  gzip, ``name[]``), called with a WSGI environ built here, on one rendering thread of its own
  (``RenderedOnceASecond`` keeps it to one rendering a second whoever scrapes).

asyncio rather than selectors by hand: its streams give TLS with a handshake time-out and
per-connection deadlines (``wait_for``) without a state machine of ours, and the exporter's
cost is its rendering, not the loop's overhead.
Layer: fleet; no Textual.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from tpmtop.errors import UsageError
from tpmtop.limits import raise_nofile
from tpmtop.ratelog import RateLimitedLog

MAX_CONNECTIONS = 4096  # open at once; each is ~10 KB in the loop (and one descriptor)
READ_DEADLINE_S = 10.0  # from accept to the request's blank line, TLS handshake included
WRITE_DEADLINE_S = 30.0  # to send a response (a scraper that stops reading is dropped)
MAX_HEAD = 16384  # bytes of request line and headers
LISTEN_BACKLOG = 1024
TICK_S = 0.25  # the rate-limited log's summaries


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


class HttpServer:
    """Serve a WSGI ``app`` on ``sock`` (bound and listening) from one event loop thread."""

    def __init__(self, sock: socket.socket, app: Callable[..., Iterable[bytes]], *,
                 tls: ssl.SSLContext | None = None, log: Callable[[str], None] | None = None,
                 max_connections: int = MAX_CONNECTIONS, read_deadline_s: float = READ_DEADLINE_S):
        self.sock, self.app, self.tls = sock, app, tls
        self.max_connections, self.read_deadline_s = max_connections, read_deadline_s
        self.server_address = sock.getsockname()
        self.log = RateLimitedLog(log or _stderr)
        self.open = 0  # connections open now
        self.served = 0
        self.refused = 0  # over the cap
        self.dropped = 0  # no whole request within the deadline, a failed handshake, a bad request
        self._loop = asyncio.new_event_loop()
        self._render = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="exporter-render")
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._run, name="exporter-http", daemon=True)
        raise_nofile(max_connections + 256)

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
                asyncio.start_server(self._connection, sock=self.sock, backlog=LISTEN_BACKLOG, limit=MAX_HEAD,
                                     ssl=self.tls, ssl_handshake_timeout=self.read_deadline_s if self.tls else None))
            self._loop.call_later(TICK_S, self._tick)
        finally:
            self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def _loop_error(self, _loop: asyncio.AbstractEventLoop, ctx: dict[str, Any]) -> None:
        exc = ctx.get("exception")
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
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
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
        if self.open >= self.max_connections:
            self.refused += 1
            self.log("refused", f"{self.max_connections} connections are open (the limit): a connection from "
                                f"{_peer(writer)} refused ({self.refused:,} so far)")
            if self.tls is None:
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: 26\r\n\r\ntoo many open connections\n")
            _abort(writer, graceful=self.tls is None)
            return
        self.open += 1
        try:
            await asyncio.wait_for(self._serve(reader, writer), self.read_deadline_s + WRITE_DEADLINE_S)
        except TimeoutError:
            self._drop(writer, f"no whole request within {self.read_deadline_s:g} s")
        except (ConnectionError, OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            self._drop(writer, type(e).__name__)
        finally:
            self.open -= 1
            _abort(writer, graceful=False)

    def _drop(self, writer: asyncio.StreamWriter, why: str) -> None:
        self.dropped += 1
        self.log("dropped", f"a connection from {_peer(writer)} dropped: {why}")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = self._loop
        deadline = loop.time() + self.read_deadline_s
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), max(deadline - loop.time(), 0.001))
        except asyncio.LimitOverrunError:
            await self._respond(writer, "431 Request Header Fields Too Large", [], [b"request head too large\n"])
            return
        except asyncio.IncompleteReadError:
            return  # closed before a whole request (a port check): nothing to say
        environ = _environ(head, writer, https=self.tls is not None)
        if environ is None:
            await self._respond(writer, "400 Bad Request", [], [b"bad request\n"])
            self._drop(writer, "not an HTTP request")
            return
        got: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            got["status"], got["headers"] = status, headers

        body = await loop.run_in_executor(self._render, lambda: list(self.app(environ, start_response)))
        if environ["REQUEST_METHOD"] == "HEAD":
            length = sum(len(b) for b in body)
            await self._respond(writer, got["status"], got["headers"], [], length)
        else:
            await self._respond(writer, got["status"], got["headers"], body)
        self.served += 1
        writer.close()  # after what was written has gone out (a TLS close_notify too)
        await asyncio.wait_for(writer.wait_closed(), WRITE_DEADLINE_S)

    async def _respond(self, writer: asyncio.StreamWriter, status: str, headers: list[tuple[str, str]],
                       body: list[bytes], length: int | None = None) -> None:
        n = sum(len(b) for b in body) if length is None else length
        lines = [f"HTTP/1.1 {status}"] + [f"{k}: {v}" for k, v in headers
                                          if k.lower() not in ("content-length", "connection")]
        lines += [f"Content-Length: {n}", "Connection: close", "", ""]
        writer.write("\r\n".join(lines).encode("latin-1"))
        for b in body:
            writer.write(b)
        await asyncio.wait_for(writer.drain(), WRITE_DEADLINE_S)


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
