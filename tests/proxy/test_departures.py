"""A client process departs when its pidfd says it exited (an event for a pidfd number that
meanwhile belongs to a live client never reaches it: tests/unit/test_proxy_loop.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.processes import wait_until
from tpmtop.proxy import peers
from tpmtop.proxy.server import ProxyServer


def test_an_exited_client_departs_and_a_live_one_stays():
    srv = ProxyServer(None, port=None, log=lambda line: None)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        a = srv.accounts.client_for(peers.describe_pid(live.pid), "swtpm")
        b = srv.accounts.client_for(peers.describe_pid(gone.pid), "swtpm")
        srv.departures.watch_exit(a)
        srv.departures.watch_exit(b)
        (fd_a,) = [fd for fd, c in srv.state.pidfds.items() if c is a]
        (fd_b,) = [fd for fd, c in srv.state.pidfds.items() if c is b]
        gone.wait()
        # what a new client's arrival does: every exited one departs first (its pidfd polled)
        wait_until(lambda: (srv.departures.reap_exited(), b.departed_ns is not None)[1], "the exited client to depart")
        assert b.exited and fd_b not in srv.state.pidfds
        assert a.departed_ns is None and not a.exited and fd_a in srv.state.pidfds
    finally:
        live.kill()
        live.wait()
        srv.stop()
