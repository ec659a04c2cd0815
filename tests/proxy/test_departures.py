"""A client process departs when its pidfd says it exited, and only then: an event for a pidfd
number that meanwhile belongs to a live client (closed and reopened in one batch of the
loop's events) must not make that client depart."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.processes import wait_until
from tpmtop.proxy import peers
from tpmtop.proxy.server import ProxyServer


def test_a_stale_exit_event_leaves_a_live_client_alone():
    srv = ProxyServer(None, port=None, log=lambda line: None)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        a = srv.accounts.client_for(peers.describe_pid(live.pid), "swtpm")
        b = srv.accounts.client_for(peers.describe_pid(gone.pid), "swtpm")
        srv._watch_exit(a)
        srv._watch_exit(b)
        (fd_a,) = [fd for fd, c in srv._pidfds.items() if c is a]
        (fd_b,) = [fd for fd, c in srv._pidfds.items() if c is b]
        gone.wait()
        srv._process_exited(fd_a)  # an event the live process never caused
        assert a.departed_ns is None and not a.exited and fd_a in srv._pidfds
        wait_until(lambda: (srv._process_exited(fd_b), b.departed_ns is not None)[1], "the exited client to depart")
        assert b.exited and fd_b not in srv._pidfds
    finally:
        live.kill()
        live.wait()
        srv.stop()
