"""tpmtop.ring.Ring: a deque(maxlen)'s order and bound, kept where a full garbage collection
does not visit every item (the recorder's events, the PCR watch's extends)."""

from __future__ import annotations

import gc
import random
from collections import deque

import msgspec
import pytest

from tpmtop.ring import CHUNK, Ring


class Record(msgspec.Struct, gc=False):  # what the rings hold: untracked, no cycle possible
    n: int


@pytest.mark.parametrize("maxlen", [1, 2, 7, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5, None])
def test_a_ring_keeps_what_a_deque_with_the_same_maxlen_keeps(maxlen):
    rng = random.Random(maxlen or 0)
    ring: Ring[int] = Ring(maxlen)
    ref: deque[int] = deque(maxlen=maxlen)
    for n in range(8 * CHUNK):
        op = rng.random()
        if op < 0.9:
            oldest = ref[0] if maxlen is not None and len(ref) == maxlen else None
            assert ring.append(n) == oldest  # what the bound dropped, as a full deque drops it
            ref.append(n)
        elif op < 0.95 and ref:
            assert ring.pop() == ref.pop()
        elif ref:
            assert ring.popleft() == ref.popleft()
        if n % 61 == 0:
            assert list(ring) == list(ref) and list(reversed(ring)) == list(reversed(ref))
            k = rng.randint(0, len(ref) + 2)
            assert ring.newest(k) == list(ref)[max(0, len(ref) - k):]
    assert len(ring) == len(ref) and list(ring) == list(ref)
    while ref:
        assert ring.pop() == ref.pop()
    assert not ring and list(ring) == []
    with pytest.raises(IndexError):
        ring.pop()
    with pytest.raises(IndexError):
        ring.popleft()


def test_a_full_collection_visits_a_chunk_of_a_ring_not_every_item():
    """A deque of 10,000 untracked records: 10,000 references each full collection visits. The
    ring's full chunks are tuples of untracked records, which CPython stops tracking at their
    first collection: what is visited is the chunk being filled."""
    def visited(keep: object) -> int:
        gc.collect()
        return sum(isinstance(r, Record) for o in gc.get_objects() for r in gc.get_referents(o))

    ring: Ring[Record] = Ring(10_000)
    for n in range(25_000):
        ring.append(Record(n))
    assert [r.n for r in ring] == list(range(15_000, 25_000))
    assert visited(ring) < CHUNK
    ref = deque((Record(n) for n in range(10_000)), maxlen=10_000)
    assert visited(ref) >= 10_000  # the check can tell: a deque's items are all visited
