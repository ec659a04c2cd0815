"""The proxy's event loop: an event polled for one descriptor never reaches another that took
its number in the same batch (a departed client's pidfd closed, a new client's opened under the
same number: the old exit made the live client depart, its tpm2-abrmd connection closed under it,
found by a stress run)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.processes import wait_until
from tpmtop.proxy.loop import EVENT_READ, Loop


def test_an_exit_event_is_not_told_to_the_pidfd_that_took_its_number():
    errors: list[BaseException] = []
    loop = Loop(on_error=errors.append)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    fds: list[int] = []
    calls: list[str] = []
    try:
        old = os.pidfd_open(gone.pid)
        fds.append(old)
        gone.wait()  # its pidfd is readable now: the process has exited
        trigger_r, trigger_w = os.pipe()
        after_r, after_w = os.pipe()
        fds += [trigger_r, trigger_w, after_r, after_w]

        def on_trigger(_mask: int) -> None:
            # what a new client's look-up does: the exited client departs (its pidfd out of the
            # loop and closed), the new client's pidfd is watched under the same number
            loop.unregister(old)
            new = os.pidfd_open(live.pid)
            os.dup2(new, old)
            os.close(new)
            loop.register(old, EVENT_READ, lambda _m: calls.append("the live client told it exited"))
            os.read(trigger_r, 1)
            calls.append("trigger")

        os.write(trigger_w, b"x")
        loop.register(trigger_r, EVENT_READ, on_trigger)  # ready first, so served first in the batch
        loop.register(old, EVENT_READ, lambda _m: calls.append("the exited client"))
        loop.register(after_r, EVENT_READ, lambda _m: (os.read(after_r, 1), calls.append("next batch")))
        loop.start("test-loop")
        wait_until(lambda: "trigger" in calls, "the trigger's handler")
        os.write(after_w, b"x")  # a later batch: the stale event, if delivered, came before it
        wait_until(lambda: "next batch" in calls, "the next batch")
        assert calls[:2] == ["trigger", "next batch"], calls
        assert not errors
    finally:
        loop.close()
        live.kill()
        live.wait()
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
