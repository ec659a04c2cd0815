"""The exporter under a hostile client, on loopback: held connections, silent TLS clients and
floods cost neither threads nor other scrapers' service, and log at most a line a second.

Each test runs a real ``tpmtop exporter`` process (or, for the connection cap, the server
class on a real socket with a small cap) and counts what the kernel says it holds: threads
and ESTABLISHED sockets of that process (psutil). Loops are bounded; waits are conditions
with generous time-outs (the machine is a loaded 2-core)."""

from __future__ import annotations

import socket
import ssl
import threading
import time
import urllib.request

import psutil
import pytest

from tests.exporter.test_exporter import _certs
from tests.helpers.exporter import Exporter
from tests.helpers.processes import wait_until

HELD = 1000


def _port(exp: Exporter) -> int:
    return int(exp.address.rsplit(":", 1)[1])


def _established(pid: int, port: int) -> int:
    return sum(1 for c in psutil.Process(pid).net_connections("tcp")
               if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED)


def _half_requests(port: int, n: int) -> list[socket.socket]:
    held = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"GET /metr")  # a request line never finished
        held.append(s)
    return held


def _close(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


def test_a_thousand_held_connections_cost_no_thread_and_delay_no_scrape():
    """1,000 connections that each sent half a request line: the exporter's thread count stays
    what it was, another client's scrape is served meanwhile, and the held ones are dropped by
    the read deadline (the kernel then holds none of them)."""
    exp = Exporter("--no-kernel")
    held: list[socket.socket] = []
    try:
        _, body = exp.scrape()  # the rendering thread exists from the first scrape on
        assert "tpmtop_exporter_info" in body
        proc = psutil.Process(exp.proc.pid)
        threads = proc.num_threads()
        port = _port(exp)
        held = _half_requests(port, HELD)
        wait_until(lambda: _established(exp.proc.pid, port) >= HELD, "the exporter to accept all 1,000", 120)
        assert proc.num_threads() == threads
        _, body = exp.scrape()  # served while the 1,000 are held (urlopen's time-out: 60 s)
        assert "tpmtop_exporter_info" in body
        assert proc.num_threads() == threads
        # the read deadline (10 s) drops them: the exporter holds none, with the clients still open
        wait_until(lambda: _established(exp.proc.pid, port) == 0, "the held connections to be dropped", 120)
        assert proc.num_threads() == threads
    finally:
        _close(held)
        _, err = exp.stop()
    # one line a second at most about the dropped ones, not one per connection
    assert err.count("dropped") < 100, err


def test_a_silent_tls_client_does_not_delay_a_scrape(tmp_path):
    """Plain TCP connections to the HTTPS port that never start a handshake: a scrape with a
    valid client certificate is answered while they stay open (it waited for them before)."""
    c = _certs(tmp_path)
    exp = Exporter("--no-kernel", "--tls-cert", str(c["server"]), "--tls-key", str(c["server-key"]),
                   "--tls-client-ca", str(c["ca"]))
    silent: list[socket.socket] = []
    try:
        port = _port(exp)
        silent = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(20)]
        wait_until(lambda: _established(exp.proc.pid, port) >= 20, "the exporter to accept the silent ones", 60)
        ctx = ssl.create_default_context(cafile=str(c["ca"]))
        ctx.load_cert_chain(str(c["client"]), str(c["client-key"]))
        with urllib.request.urlopen(exp.url, context=ctx, timeout=60) as r:
            assert "tpmtop_exporter_info" in r.read().decode()
        assert all(s.fileno() >= 0 for s in silent)  # they were still open during the scrape
    finally:
        _close(silent)
        exp.stop()


def test_connections_over_the_cap_are_refused_with_a_503_and_logged_once_a_second():
    """The server with a cap of 8 and 8 held connections: every further connection gets a 503
    and is closed; 3,000 of them write at most one line per second of the flood (plus the
    summary at stop); the held ones are dropped at the deadline and a scrape is served again."""
    from prometheus_client import CollectorRegistry

    from tpmtop.exporter import server as fleet

    lines: list[str] = []
    lock = threading.Lock()

    def log(text: str) -> None:
        with lock:
            lines.append(text)

    reg = fleet.new_registry()
    assert isinstance(reg, CollectorRegistry)
    fleet.ExporterInfo(reg, "facts")
    sock = fleet._listen_socket(fleet.Listen("127.0.0.1", 0))
    from prometheus_client.exposition import make_wsgi_app

    from tpmtop.exporter.http import HttpServer

    srv = HttpServer(sock, fleet.RenderedOnceASecond(make_wsgi_app(reg)), log=log, max_connections=8,
                     read_deadline_s=5.0).start()
    port = sock.getsockname()[1]
    held = _half_requests(port, 8)
    try:
        wait_until(lambda: srv.open == 8, "8 connections held", 60)
        start = time.monotonic()
        refused_503 = 0
        for _ in range(3000):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                if s.recv(64).startswith(b"HTTP/1.1 503"):
                    refused_503 += 1
        elapsed = time.monotonic() - start
        assert srv.refused >= 3000 - 8 and refused_503 >= 3000 - 8  # a few may land after a drop
        with lock:
            said = len(lines)
        assert said <= elapsed / srv.log.interval_s + 2, lines
        wait_until(lambda: srv.open == 0, "the held connections to be dropped at the deadline", 60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
            assert "tpmtop_exporter_info" in r.read().decode()
    finally:
        _close(held)
        srv.shutdown()
        srv.server_close()
    assert any("refused" in line and "the limit" in line for line in lines)


@pytest.mark.parametrize("n", [1024])
def test_after_a_flood_threads_and_sockets_return_to_idle(n):
    """1,024 connections opened and left by their client: the exporter's threads never grow
    and its sockets are back to idle (none ESTABLISHED) once the clients are gone."""
    exp = Exporter("--no-kernel")
    try:
        exp.scrape()
        proc = psutil.Process(exp.proc.pid)
        threads = proc.num_threads()
        port = _port(exp)
        flood = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(n)]
        wait_until(lambda: _established(exp.proc.pid, port) >= n // 2, "the flood to be accepted", 120)
        assert proc.num_threads() == threads
        _close(flood)
        wait_until(lambda: _established(exp.proc.pid, port) == 0, "the exporter's sockets to be idle", 60)
        assert proc.num_threads() == threads
        exp.scrape()
    finally:
        exp.stop()
