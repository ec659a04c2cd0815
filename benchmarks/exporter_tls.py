"""What silent TLS clients cost ``tpmtop exporter`` (issue 50): RSS over rounds of held connections.

Starts ``tpmtop exporter --no-kernel`` with TLS and client certificates (a throw-away CA made
here) on 127.0.0.1, then ``--rounds`` times (default 4): opens ``--connections`` (default
3,000) TCP connections to it that never send a byte (``--mode silent``) or that send a TLS
ClientHello and then nothing (``--mode hello``: each makes the server start a handshake),
keeps them open while a scraper with a valid certificate scrapes /metrics once, closes them,
and waits until the exporter holds none. RSS is read (psutil) while they are held and after.

The silent clients are spread over ``--users`` (default 3) system uids (daemon, bin, sys),
1,000 each: one uid may hold at most a quarter of the exporter's 4,096 connections
(tpmtop.exporter.http.MAX_PER_PEER), so all 3,000 are held; the scraper runs as the invoking user.
Needs root for that (otherwise they all come from one uid and the cap refuses the surplus: the
figures say how many were held). Loopback only; bounded loops.

Prints a line per round and last:

    exporter TLS: RSS after rounds <a> <b> <c> <d> MB (last/first ×<r>), peak <p> MB, scrapes <ok>/<n>

    .venv/bin/python benchmarks/exporter_tls.py [--rounds 4] [--connections 3000] [--mode silent|hello] [--hold S]
"""

from __future__ import annotations

import argparse
import datetime
import encodings.idna  # noqa: F401 - a child that has given up root can no longer import it (socket needs it)
import faulthandler
import ipaddress
import os
import re
import resource
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from machine import describe  # noqa: E402 - benchmarks/machine.py

USERS = (1, 2, 3)  # daemon, bin, sys on Debian: uids that own nothing else here


def certs(tmp: str) -> dict[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    out: dict[str, str] = {}

    def make(name: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, issuer_key: ec.EllipticCurvePrivateKey,
             ca: bool = False, server: bool = False) -> None:
        subject = issuer if ca else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        b = (x509.CertificateBuilder().subject_name(subject)
             .issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if server:
            b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                critical=False)
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        elif not ca:
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        path = os.path.join(tmp, f"{name}.pem")
        with open(path, "wb") as f:
            f.write(b.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
        out[name] = path
        kpath = os.path.join(tmp, f"{name}-key.pem")
        with open(kpath, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        out[name + "-key"] = kpath

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench CA")])
    make("ca", ca_key, ca_name, ca_key, ca=True)
    make("server", ec.generate_private_key(ec.SECP256R1()), ca_name, ca_key, server=True)
    make("client", ec.generate_private_key(ec.SECP256R1()), ca_name, ca_key)
    return out


def client_hello() -> bytes:
    """The first flight of a TLS client (its ClientHello), made with ssl's memory BIOs."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
    try:
        ctx.wrap_bio(i, o).do_handshake()
    except ssl.SSLWantReadError:
        pass
    return o.read()


class Holder:
    """A forked child (as ``uid`` when given) that opens ``n`` connections, sends ``first`` on
    each, and holds them until :meth:`close`."""

    def __init__(self, port: int, n: int, first: bytes, uid: int | None) -> None:
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            try:
                os.close(r1)
                os.close(w2)
                if uid is not None:
                    os.setgroups([])
                    os.setgid(uid)
                    os.setuid(uid)
                held = []
                for _ in range(n):
                    try:
                        s = socket.create_connection(("127.0.0.1", port), timeout=30)
                        if first:
                            s.sendall(first)
                    except OSError:
                        break
                    held.append(s)
                os.write(w1, f"{len(held)}\n".encode())
                os.read(r2, 1)  # until the parent ends it
            finally:
                os._exit(0)
        os.close(w1)
        os.close(r2)
        self._from, self._to = r1, w2

    def opened(self) -> int:
        with os.fdopen(self._from) as f:
            return int(f.readline() or 0)

    def close(self) -> None:
        # A later holder inherited this pipe's end too: the signal, not the pipe, ends the child.
        os.close(self._to)
        os.kill(self.pid, signal.SIGTERM)
        os.waitpid(self.pid, 0)


def established(pid: int, port: int) -> int:
    return sum(1 for c in psutil.Process(pid).net_connections("tcp")
               if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED)


def wait(cond, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--connections", type=int, default=3000)
    ap.add_argument("--mode", choices=("silent", "hello"), default="silent")
    ap.add_argument("--users", type=int, default=3, help="uids the connections come from (root only)")
    ap.add_argument("--hold", type=float, default=0.0,
                    help="seconds the clients stay after the scrape (12: past the exporter's 10 s deadline)")
    a = ap.parse_args()
    faulthandler.dump_traceback_later(1800, exit=True)  # a bound on the whole run, whatever hangs
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    print(describe())
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}; "
          f"{a.rounds} rounds of {a.connections:,} {a.mode} TLS connections")
    # A SIGTERM (a `timeout` around the run) unwinds through the finally below, which stops the
    # exporter; the certificates go with their folder.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmpdir = tempfile.TemporaryDirectory(prefix="exporter-tls-")
    c = certs(tmpdir.name)
    env = dict(os.environ, PYTHONPATH=REPO)
    exp = subprocess.Popen([sys.executable, "-m", "tpmtop", "exporter", "--no-kernel", "--listen", "127.0.0.1:0",
                            "--tls-cert", c["server"], "--tls-key", c["server-key"], "--tls-client-ca", c["ca"]],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    assert exp.stderr is not None
    m = re.search(r"serving (https://\S+/metrics)", exp.stderr.readline())
    if m is None:
        exp.kill()
        print("the exporter did not start", file=sys.stderr)
        return 1
    url = m.group(1)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    proc = psutil.Process(exp.pid)
    ctx = ssl.create_default_context(cafile=c["ca"])
    ctx.load_cert_chain(c["client"], c["client-key"])

    def scrape() -> str:
        with urllib.request.urlopen(url, context=ctx, timeout=60) as r:
            return str(r.read().decode())

    def open_now() -> float:  # the exporter's own count (its CLOSE_WAIT ones included), this scrape excluded
        m = re.search(r"^tpmtop_exporter_connections_open (\S+)", scrape(), re.M)
        return float(m.group(1)) - 1 if m else -1

    scrape()
    idle = proc.memory_info().rss / 1e6
    print(f"idle: {idle:.0f} MB RSS")
    users = a.users if os.geteuid() == 0 else 1
    first = client_hello() if a.mode == "hello" else b""
    after: list[float] = []
    peak = idle
    ok = tries = 0
    try:
        for rnd in range(1, a.rounds + 1):
            share = -(-a.connections // users)
            holders = [Holder(port, min(share, a.connections - i * share), first,
                              USERS[i % len(USERS)] if users > 1 else None) for i in range(users)]
            opened = sum(h.opened() for h in holders)
            wait(lambda n=opened: established(exp.pid, port) >= n, 30)
            held = established(exp.pid, port)
            rss_held = proc.memory_info().rss / 1e6
            t0 = time.monotonic()
            tries += 1
            try:
                scraped = "tpmtop_exporter_info" in scrape()
            except OSError as e:
                scraped = False
                print(f"  scrape failed: {e}")
            ok += scraped
            scrape_ms = (time.monotonic() - t0) * 1000
            time.sleep(a.hold)
            for h in holders:
                h.close()
            wait(lambda: established(exp.pid, port) == 0 and open_now() == 0, 120)
            time.sleep(1.0)
            rss_after = proc.memory_info().rss / 1e6
            peak = max(peak, rss_held, rss_after)
            after.append(rss_after)
            print(f"round {rnd}: {opened:,} opened, {held:,} held by the exporter, RSS {rss_held:.0f} MB held, "
                  f"{rss_after:.0f} MB after; scrape during them {'ok' if scraped else 'FAILED'} "
                  f"in {scrape_ms:.0f} ms")
        text = scrape()
        ended = re.findall(r'^tpmtop_exporter_connections_ended_total\{reason="(\w+)"\} (\S+)', text, re.M)
        print("ended unserved: " + ", ".join(f"{r} {float(v):,.0f}" for r, v in ended if float(v)))
    finally:
        tmpdir.cleanup()
        exp.terminate()
        try:
            exp.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            exp.kill()
            exp.communicate()
    ratio = after[-1] / after[0] if after and after[0] else float("nan")
    print(f"exporter TLS: RSS after rounds {' '.join(f'{x:.0f}' for x in after)} MB "
          f"(last/first ×{ratio:.2f}), peak {peak:.0f} MB, scrapes {ok}/{tries}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
