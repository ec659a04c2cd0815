"""Proxy memory benchmark: does a `tpmtop proxy` left running grow with the clients it served?

    .venv/bin/python benchmarks/proxy_memory.py [--clients 10000] [--held 1000]

One `tpmtop proxy --sim` process (swtpm protocol, no --events). Then:
  1. CLIENTS sequential clients, each its own process (forked from here: a raw socket that
     sends GetRandom(8) through the proxy's port, reads the answer and exits). Each is a new
     client to the proxy: named by its pid, accounted, departed, folded into its program's
     summary. (Raw sockets rather than tpm2-tools: 10,000 tpm2-tools runs take ~40 minutes
     on the 2-core machine; the proxy cannot tell the difference — a process, a connection,
     a command.)
  2. HELD connections opened at once from this process, each sending GetRandom(8) and kept
     open, then all closed.
The proxy's RSS is read (psutil) after 100 warm-up clients, after the clients, and after the
held connections closed; its thread count before the held connections and once they closed
(its idle threads exit after a few seconds). Last line:
`proxy memory: +<X> MB after <CLIENTS> clients, <T> threads after close` (X: RSS growth
from the warm-up to the end; T should be back to the idle count, printed the line before).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from machine import describe, end  # noqa: E402 - benchmarks/machine.py

from tests.helpers.processes import free_port_pair as free_pair  # noqa: E402 - the repository on the path above

GET_RANDOM_8 = bytes.fromhex("80010000000c0000017b0008")


def ask(sock: socket.socket) -> None:
    sock.sendall(GET_RANDOM_8)
    got = b""
    while len(got) < 20:
        chunk = sock.recv(20 - len(got))
        if not chunk:
            raise OSError("closed")
        got += chunk


def one_client(port: int) -> int:
    """A client process: fork, connect, GetRandom, exit. Its exit status (0: answered)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
                ask(s)
            code = 0
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1]


def wait_threads(proc, settle_s: float = 8.0, limit_s: float = 60.0) -> int:
    """The thread count once it has not changed for settle_s (idle threads exit on their own)."""
    last, since = proc.num_threads(), time.monotonic()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        n = proc.num_threads()
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= settle_s:
            break
    return last


def main() -> int:
    import psutil

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10_000)
    ap.add_argument("--held", type=int, default=1_000)
    args = ap.parse_args()
    print(describe())
    port = free_pair()
    env = dict(os.environ)
    env.pop("TPM2TOOLS_TCTI", None)
    proxy = subprocess.Popen([sys.executable, "-m", "tpmtop", "proxy", "--sim", "--port", str(port)],
                             cwd=os.path.join(HERE, ".."), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        for line in proxy.stderr:
            if "serving" in line:
                break
        else:
            raise SystemExit("the proxy did not start")
        # its log (one line per client) is drained so that it never blocks on a full pipe
        import threading

        threading.Thread(target=lambda: [None for _ in proxy.stderr], daemon=True).start()
        p = psutil.Process(proxy.pid)
        failed = sum(one_client(port) != 0 for _ in range(100))
        base_threads = wait_threads(p)
        rss0 = p.memory_info().rss
        t0 = time.monotonic()
        for i in range(args.clients):
            failed += one_client(port) != 0
            if (i + 1) % 2000 == 0:
                print(f"  {i + 1:>6} clients: RSS {p.memory_info().rss / 2**20:,.1f} MB, "
                      f"{(time.monotonic() - t0) / (i + 1) * 1000:.1f} ms a client", flush=True)
        rss1 = p.memory_info().rss
        held = []
        for _ in range(args.held):
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            ask(s)
            held.append(s)
        threads_held = p.num_threads()
        for s in held:
            s.close()
        threads_after = wait_threads(p)
        rss2 = p.memory_info().rss
        print(f"clients: {args.clients:,} sequential processes, {failed} failed; RSS {rss0 / 2**20:,.1f} MB after "
              f"warm-up, {rss1 / 2**20:,.1f} MB after the clients, {rss2 / 2**20:,.1f} MB after {args.held:,} held "
              f"connections closed")
        print(f"threads: {base_threads} idle, {threads_held} with {args.held:,} connections held, "
              f"{threads_after} after they closed")
        print(f"proxy memory: +{(rss2 - rss0) / 2**20:.1f} MB after {args.clients} clients, "
              f"{threads_after} threads after close")
    finally:
        end(proxy, 60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
