"""A bounded ring of records that the cyclic garbage collector does not walk.

A ``deque(maxlen=N)`` is one container of N references, and every full collection (which
stops every thread) visits each of them, untracked records included: the recorder's ring of
100,000 events, its 16,384 events with bytes and the PCR watch's 4,096 extends were a fifth
of everything the dashboard's full collections visited (benchmarks/ui_load.py --gc-only).

:class:`Ring` keeps its items in tuples of :data:`CHUNK`. A tuple whose items the collector
does not track is untracked by CPython at its first collection, so a full ring costs a full
collection about ``N / CHUNK`` visits plus the chunk being filled. Only for records that hold
no reference cycle and are themselves untracked (msgspec ``gc=False`` structs, numbers,
strings): a tuple holding one tracked object stays tracked, and costs what a deque did.

Hand-written: collections.deque and list are each one tracked container of references, and so
is any ring buffer built on them; what keeps the items out of the walk is the untracked tuples.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Generic, TypeVar

T = TypeVar("T")

CHUNK = 1024  # items per tuple: a full collection visits ~N/CHUNK + CHUNK of a ring of N


class Ring(Generic[T]):
    """At most ``maxlen`` items (None: no bound), oldest first; :meth:`append` past ``maxlen``
    drops the oldest (``deque(maxlen=...)``'s order and bound). A dropped item is released with
    the rest of its chunk: it may outlive a deque's by up to CHUNK - 1 appends.

    Not thread-safe, as a deque's compound steps are not: callers that share one hold a lock."""

    __slots__ = ("_chunk", "_chunks", "_head", "_len", "_tail", "maxlen")

    def __init__(self, maxlen: int | None = None) -> None:
        if maxlen is not None and maxlen < 1:
            raise ValueError(f"a ring holds at least one item, not {maxlen}")
        self.maxlen = maxlen
        # never more than maxlen: past maxlen, a full chunk holds the oldest item
        self._chunk = CHUNK if maxlen is None else min(CHUNK, maxlen)
        self._chunks: deque[tuple[T, ...]] = deque()  # full chunks, oldest first
        self._tail: list[T] = []  # the newest items, fewer than _chunk
        self._head = 0  # items of _chunks[0] already dropped
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __repr__(self) -> str:
        return f"Ring({self._len} of at most {self.maxlen})"

    def append(self, item: T) -> T | None:
        """Add ``item`` as the newest; returns the item dropped to stay within ``maxlen``
        (None when none was)."""
        tail = self._tail
        tail.append(item)
        self._len += 1
        if len(tail) == self._chunk:
            self._chunks.append(tuple(tail))  # untracked at the next collection, if its items are
            self._tail = []
        return self.popleft() if self.maxlen is not None and self._len > self.maxlen else None

    def popleft(self) -> T:
        """Remove and return the oldest item (IndexError when empty)."""
        if not self._len:
            raise IndexError("pop from an empty ring")
        self._len -= 1
        if not self._chunks:
            return self._tail.pop(0)  # fewer than a chunk in all
        first = self._chunks[0]
        dropped = first[self._head]
        self._head += 1
        if self._head == len(first):
            self._chunks.popleft()
            self._head = 0
        return dropped

    def pop(self) -> T:
        """Remove and return the newest item (IndexError when empty), as ``deque.pop``: one item
        at a time, so a thread emptying a ring (recorder.free_later) lets others run between."""
        if not self._len:
            raise IndexError("pop from an empty ring")
        if not self._tail:
            last = self._chunks.pop()
            self._tail = list(last[self._head:] if not self._chunks else last)
            if not self._chunks:
                self._head = 0
        self._len -= 1
        return self._tail.pop()

    def clear(self) -> None:
        self._chunks = deque()
        self._tail = []
        self._head = 0
        self._len = 0

    def __iter__(self) -> Iterator[T]:
        """Oldest first, chained in C: ``list()`` of 100,000 items took 0.47 ms against a
        deque's 0.31 (a generator: 2.6 ms, under the recorder's lock)."""
        chunks = self._chunks
        parts: list[Iterable[T]] = list(chunks)
        if chunks and self._head:
            parts[0] = chunks[0][self._head:]
        parts.append(self._tail)
        return chain.from_iterable(parts)

    def __reversed__(self) -> Iterator[T]:
        """Newest first."""
        yield from reversed(self._tail)
        chunks = self._chunks
        for i in range(len(chunks) - 1, -1, -1):
            chunk = chunks[i]
            stop = self._head if i == 0 else 0
            for j in range(len(chunk) - 1, stop - 1, -1):
                yield chunk[j]

    def newest(self, n: int) -> list[T]:
        """The newest ``n`` items (all of them when fewer), oldest first."""
        if n <= 0:
            return []
        out: list[T] = []
        for item in reversed(self):
            out.append(item)
            if len(out) == n:
                break
        out.reverse()
        return out
