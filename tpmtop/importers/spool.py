"""Events spooled to disk while a big import is read, and read back as often as asked.

An import builds each event once, but a capture's head (its runs: every command's latency
histogram) is written before its events, so the events must wait somewhere until the whole
file has been read. Held in memory, a million commands took 1.8 GB; here they wait in an
unlinked temporary file (gone with the process, whatever ends it), in pickled batches: pickle
is the standard library's fastest way to write and read back Python objects (an import's are
small tuples of an int and text: tpmtop.importers.observed), and nothing but this process
ever reads the file. Layer: importers; no Textual.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator
from typing import Any

BATCH = 4096  # items per pickle: small enough to be nothing in memory, big enough to be fast


class Spool:
    """Append items; iterate them, in order, any number of times (each iteration reads the file
    from its start; two iterations may interleave)."""

    def __init__(self) -> None:
        # unlinked at once on Linux; open for the spool's life (closed with it), not one block
        self._f = tempfile.TemporaryFile(prefix="tpmtop-spool-")  # noqa: SIM115
        self._batch: list[Any] = []
        self._ends: list[int] = []  # where each written batch ends in the file
        self.n = 0

    def append(self, item: Any) -> None:
        self._batch.append(item)
        self.n += 1
        if len(self._batch) >= BATCH:
            self._write()

    def _write(self) -> None:
        self._f.seek(0, 2)
        pickle.dump(self._batch, self._f, protocol=pickle.HIGHEST_PROTOCOL)
        self._ends.append(self._f.tell())
        self._batch = []

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Any]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[Any]]:
        """The items in the lists they were written in (a reader that works a batch at a time
        saves a generator step per item)."""
        if self._batch:
            self._write()
        pos = 0
        for end in list(self._ends):
            self._f.seek(pos)
            batch = pickle.load(self._f)
            pos = end
            yield batch
