"""The proxy's upstream thread: over a resource manager (/dev/tpmrm0, tpm2-abrmd) each client
has its own upstream connection (:mod:`.session`), and its commands run here, one at a time,
in the order they came, with the opening and closing of those connections. Off the event
loop: a real TPM's command takes milliseconds (a key generation, seconds) and tpm2-abrmd's
connection set-up a D-Bus round trip, and meanwhile the loop goes on accepting, framing and
seeing clients leave. One thread is enough: the resource manager serves one command at a
time anyway. Layer: proxy; no Textual."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from tpmtop.tpm.owner import Job


class Upstream:
    def __init__(self) -> None:
        self._q: queue.SimpleQueue[tuple[Job, Callable[[], Any]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[[], Any]) -> Job:
        """Run ``fn()`` on the upstream thread; its future has the result or the exception."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="proxy-upstream", daemon=True)
            self._thread.start()
        job = Job()
        self._q.put((job, fn))
        return job

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            job, fn = item
            try:
                job.set_result(fn())
            except Exception as e:
                job.set_exception(e)

    def drain(self, timeout: float = 30.0) -> None:
        """Wait for what was submitted so far."""
        if self._thread is not None:
            try:
                self.submit(lambda: None).result(timeout)
            except Exception:
                pass

    def close(self, timeout: float = 30.0) -> None:
        """What was submitted runs first; then the thread ends."""
        if self._thread is not None:
            self._q.put(None)
            self._thread.join(timeout)
