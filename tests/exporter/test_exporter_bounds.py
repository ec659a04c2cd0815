"""The exporter's endpoint bounds what a peer can make it hold (issue 50): pending TLS handshakes
are capped and timed out, counted in a metric and logged at a rate limit; one user cannot take
every connection slot.

Each test runs the server class on a real loopback socket with small caps (the process-level
figures, RSS over rounds of 3,000 silent TLS clients, are benchmarks/exporter_tls.py's).
Waits are conditions with generous time-outs; nothing asserts on elapsed time."""

from __future__ import annotations

import os
import socket
import ssl
import threading
import urllib.request

import pytest
from prometheus_client.exposition import make_wsgi_app

from tests.exporter.test_exporter import _certs
from tests.helpers.exporter import value
from tests.helpers.processes import wait_until
from tpmtop.exporter import server as fleet
from tpmtop.exporter.families import ConnectionEnd
from tpmtop.exporter.http import HttpServer


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, text: str) -> None:
        with self._lock:
            self.lines.append(text)


def _server(tls: ssl.SSLContext | None = None, **caps) -> tuple[HttpServer, _Lines, int]:
    reg = fleet.new_registry()
    fleet.ExporterInfo(reg, "facts")
    sock = fleet._listen_socket(fleet.Listen("127.0.0.1", 0))
    lines = _Lines()
    srv = HttpServer(sock, fleet.RenderedOnceASecond(make_wsgi_app(reg)), tls=tls, log=lines, **caps)
    fleet.HttpMetrics(reg, srv)
    srv.start()
    return srv, lines, sock.getsockname()[1]


def _stop(srv: HttpServer, socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()
    srv.shutdown()
    srv.server_close()


def _client_hello() -> bytes:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
    with pytest.raises(ssl.SSLWantReadError):
        ctx.wrap_bio(i, o).do_handshake()
    return o.read()


def test_pending_tls_handshakes_are_capped_timed_out_counted_and_logged_at_a_rate_limit(tmp_path):
    """20 clients that never speak and 6 that send a ClientHello and stop: the silent ones hold
    no TLS state (no handshake under way), at most 2 handshakes run at once (the cap), every one
    of the 26 ends as a handshake time-out at the deadline, the metric says 26, the log says it
    in a few lines, not 26; then a scraper with a certificate is served."""
    c = _certs(tmp_path)
    tls = fleet.tls_context(str(c["server"]), str(c["server-key"]), str(c["ca"]))
    srv, log, port = _server(tls, max_handshakes=2, handshakes_per_peer=2, read_deadline_s=4.0)
    socks: list[socket.socket] = []
    try:
        socks += [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(20)]
        wait_until(lambda: srv.open == 20, "the 20 silent clients to be accepted", 60)
        assert srv.handshaking == 0  # nothing sent: no TLS object made for them
        hello = _client_hello()
        for _ in range(6):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(hello)
            socks.append(s)
        wait_until(lambda: srv.handshaking == 2, "two handshakes to start", 60)
        wait_until(lambda: srv.open == 0, "every pending connection to reach its deadline", 120)
        assert srv.handshaking == 0
        assert srv.handshaking_peak == 2  # the cap held while 6 had sent a ClientHello
        assert srv.ended[ConnectionEnd.HANDSHAKE_TIMEOUT] == 26
        ctx = ssl.create_default_context(cafile=str(c["ca"]))
        ctx.load_cert_chain(str(c["client"]), str(c["client-key"]))
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=60) as r:
            text = r.read().decode()
        assert value(text, "tpmtop_exporter_connections_ended_total", reason="handshake_timeout") == 26
        assert value(text, "tpmtop_exporter_tls_handshakes_pending") == 0
    finally:
        _stop(srv, socks)
    said = [ln for ln in log.lines if "handshake" in ln]
    assert said and len(said) < 26, log.lines
    assert any("no TLS handshake within 4 s" in ln for ln in said)


def test_a_client_that_leaves_while_waiting_for_a_handshake_turn_costs_no_handshake(tmp_path):
    """One handshake slot, held by a client that sent a ClientHello and stays; 5 more send theirs
    and leave while they wait: none of them gets a handshake (each was a full one, ECDHE and a
    signature, against a closed socket: 3,000 of them left 200 MB of RSS behind)."""
    c = _certs(tmp_path)
    tls = fleet.tls_context(str(c["server"]), str(c["server-key"]), str(c["ca"]))
    srv, _log, port = _server(tls, max_handshakes=1, read_deadline_s=60.0)
    hello = _client_hello()
    socks: list[socket.socket] = []
    try:
        first = socket.create_connection(("127.0.0.1", port), timeout=30)
        first.sendall(hello)
        socks.append(first)
        wait_until(lambda: srv.handshaking == 1, "the first handshake to start", 60)
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(hello)
        wait_until(lambda: srv.open == 6, "the 5 to be accepted", 60)
        first.close()  # its handshake fails; the slot goes to the waiting ones, which have left
        wait_until(lambda: srv.open == 0, "every connection to end", 60)
        assert srv.handshakes == 1
        assert srv.ended[ConnectionEnd.HANDSHAKE_FAILED] == 6
    finally:
        _stop(srv, socks)


def _get_as(uid: int, port: int) -> str:
    """The status line another user's HTTP GET gets (a forked child that gave up root)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(60)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            os.write(w, s.recv(64).split(b"\r\n", 1)[0])
        finally:
            os._exit(0)
    os.close(w)
    try:
        with os.fdopen(r, "rb") as f:
            return f.read().decode()
    finally:
        os.waitpid(pid, 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="a second user's connection needs root to fork one")
def test_one_user_cannot_take_every_connection_slot():
    """A cap of 8 connections, 4 per user: root holds 8 half-sent requests; only 4 are held, the
    others get a 503 at once; another user's scrape is still served (with one global cap it got
    a 503 too)."""
    srv, log, port = _server(max_connections=8, max_per_peer=4, read_deadline_s=60.0)
    socks: list[socket.socket] = []
    try:
        got = []
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(b"GET /metr")
            socks.append(s)
        wait_until(lambda: srv.open + srv.refused == 8, "the 8 connections to be accepted or refused", 60)
        for s in socks[4:]:
            got.append(s.recv(64))
        assert srv.open == 4
        assert all(g.startswith(b"HTTP/1.1 503") for g in got), got
        assert srv.ended[ConnectionEnd.PEER_LIMIT] == 4
        assert _get_as(65534, port) == "HTTP/1.1 200 OK"
    finally:
        _stop(srv, socks)
    assert any("one peer's limit" in ln for ln in log.lines), log.lines


def _told_the_end(s: socket.socket) -> bool:
    """The client reads the end of its stream (a close, or a reset), not silence."""
    s.settimeout(30)
    try:
        return s.recv(64) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_shutdown_ends_every_connection_it_holds():
    """shutdown() ends each connection it holds, half-sent requests included: none is counted open
    after it and every client reads the end of its stream. (It stopped the loop right after
    cancelling the handlers, before they ran their cancellation: one or two of three stayed
    counted open, their clients never told, their transports never closed.)"""
    srv, log, port = _server(max_connections=8, max_per_peer=8, read_deadline_s=60.0)
    socks: list[socket.socket] = []
    try:
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(b"GET /metr")
            socks.append(s)
        wait_until(lambda: srv.open == 3, "the 3 connections to be held", 60)
        srv.shutdown()
        assert srv.open == 0
        assert [_told_the_end(s) for s in socks] == [True, True, True]
    finally:
        _stop(srv, socks)
    # a cancelled handler is no error: Python 3.11's stream callback asks a cancelled task for
    # its exception, which raises, and the loop reported that as one ("Exception in callback")
    assert not any("exception" in ln.lower() for ln in log.lines), log.lines
