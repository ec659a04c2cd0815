"""The exporter's registry and its HTTP endpoint (prometheus_client's WSGI application, served
from one event loop: :mod:`tpmtop.exporter.http` says why not from its own threading server).

prometheus_client does the exposition and the content negotiation: a scraper that sends
``Accept: application/openmetrics-text`` (Prometheus does) gets OpenMetrics 1.0, anything
else gets the classic text format 0.0.4; ``Accept-Encoding: gzip`` is honoured. TLS, and
client certificates as the way to authenticate a scraper (``certfile``/``keyfile``/
``client_cafile``), are Python's ssl module's. Layer: exporter; no Textual.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tpmtop import __version__
from tpmtop.errors import UsageError
from tpmtop.exporter import families as fam
from tpmtop.exporter.http import LISTEN_BACKLOG, HttpServer, tls_context

DEFAULT_PORT = 9927  # not in Prometheus' default-port allocations as of writing; --listen changes it
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"

# The _created series prometheus_client adds to every counter and histogram in the classic
# text format double the exposition, and Prometheus 2.42 does not read them.
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it untyped


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return self.host == "localhost"

    def url(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{h}:{self.port}/metrics"


def parse_listen(text: str) -> Listen:
    """``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (loopback). Port 0 picks a free one."""
    host, sep, port = text.rpartition(":")
    if not sep:
        raise UsageError(f"--listen {text!r}: want HOST:PORT, e.g. {DEFAULT_LISTEN}")
    host = host.strip("[]") or "127.0.0.1"
    try:
        p = int(port)
    except ValueError:
        p = -1
    if not 0 <= p <= 65535:
        raise UsageError(f"--listen {text!r}: {port!r} is not a port number (0-65535)")
    return Listen(host, p)


class ExporterInfo(Collector):
    def __init__(self, registry: CollectorRegistry, source: str):
        self.source = source
        registry.register(self)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        n = fam.name("exporter_info")
        g = GaugeMetricFamily(n, fam.HELP[n], labels=("version", "source"))
        g.add_metric((__version__, self.source), 1.0)
        yield g


class HttpMetrics(Collector):
    """The endpoint's own connections: open, TLS handshakes under way, and those ended unserved
    by why (a silent TLS client's time-out is ``handshake_timeout``)."""

    def __init__(self, registry: CollectorRegistry, server: HttpServer):
        self.server = server
        registry.register(self)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        n = fam.name("exporter_connections_ended_total")
        c = CounterMetricFamily(n.removesuffix("_total"), fam.HELP[n], labels=("reason",))
        for reason, count in list(self.server.ended.items()):
            c.add_metric((reason.value,), float(count))
        yield c
        for short, value in (("exporter_connections_open", self.server.open),
                             ("exporter_tls_handshakes_pending", self.server.handshaking)):
            yield GaugeMetricFamily(fam.name(short), fam.HELP[fam.name(short)], value=float(value))


def new_registry() -> CollectorRegistry:
    """A registry of tpmtop's own (not prometheus_client's global one) with the process_*
    families (resident memory, CPU seconds, open fds): the exporter's own cost, scraped."""
    reg = CollectorRegistry()
    ProcessCollector(registry=reg)
    return reg


RENDER_MAX_AGE_S = 1.0
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class RenderedOnceASecond:
    """prometheus_client's WSGI app, but one rendering per format serves every scrape of the
    same second. Writing the exposition is the exporter's costliest work (~3 ms of CPU for
    ~400 series on the benchmark machine with prometheus_client 0.21, more under load): a
    scraper that polls ten times a second, or a local user hammering /metrics, then costs one
    rendering a second, not ten — the CPU stays bounded whoever scrapes. Prometheus scrapes
    every 15-60 s: it always gets a fresh one."""

    def __init__(self, app: WsgiApp, max_age_s: float = RENDER_MAX_AGE_S):
        import threading

        self.app = app
        self.max_age_s = max_age_s
        self._cache: dict[tuple[Any, ...], tuple[float, str, list[tuple[str, str]], list[bytes]]] = {}
        self._lock = threading.Lock()  # one rendering at a time; a scrape meanwhile waits and reuses it

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        import time

        from prometheus_client.exposition import choose_encoder, gzip_accepted

        if environ.get("REQUEST_METHOD") != "GET":
            return self.app(environ, start_response)
        key = (choose_encoder(environ.get("HTTP_ACCEPT", ""))[1],
               gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")),
               environ.get("PATH_INFO"), environ.get("QUERY_STRING", ""))
        with self._lock:
            hit = self._cache.get(key)
            if hit is None or time.monotonic() - hit[0] >= self.max_age_s:
                got: dict[str, Any] = {}

                def keep(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
                    got["status"], got["headers"] = status, headers

                body = list(self.app(environ, keep))
                hit = (time.monotonic(), got["status"], got["headers"], body)
                self._cache = {k: v for k, v in self._cache.items() if time.monotonic() - v[0] < self.max_age_s}
                self._cache[key] = hit
        _, status, headers, body = hit
        start_response(status, headers)
        return body


def _listen_socket(listen: Listen) -> socket.socket:
    try:
        infos = socket.getaddrinfo(listen.host, listen.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise UsageError(f"cannot listen on {listen.host}: {e}") from None
    family, kind, proto, _, addr = infos[0]
    s = socket.socket(family, kind, proto)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr)
        s.listen(LISTEN_BACKLOG)
    except OSError as e:
        s.close()
        raise UsageError(f"cannot listen on {listen.host}:{listen.port}: {e.strerror or e}") from None
    return s


def serve(registry: CollectorRegistry, listen: Listen, *, certfile: str | None = None, keyfile: str | None = None,
          client_cafile: str | None = None, log: Callable[[str], None] | None = None) -> tuple[HttpServer, Listen]:
    """Start serving from the event loop's thread (:mod:`tpmtop.exporter.http`); returns (server,
    the address it listens on)."""
    from prometheus_client.exposition import make_wsgi_app

    tls = tls_context(certfile, keyfile, client_cafile) if certfile and keyfile else None
    sock = _listen_socket(listen)
    server = HttpServer(sock, RenderedOnceASecond(make_wsgi_app(registry)), tls=tls, log=log)
    HttpMetrics(registry, server)
    server.start()
    host, port = sock.getsockname()[:2]
    return server, Listen(str(host), int(port))
