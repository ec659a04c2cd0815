"""The recorder shares one tuple among events with the same handles or sessions (issue 54:
what an event keeps sets the pace of the collector's young collections), within a bound."""

import struct

from tpmtop.recorder import SHAPES_KEPT, Recorder
from tpmtop.tpm.exchange import Labels

FLUSH = 0x165
OK = struct.pack(">HII", 0x8001, 10, 0)


def _flush(handle: int) -> bytes:
    """TPM2_FlushContext(handle) as it goes on the wire: no sessions, the handle a parameter."""
    return struct.pack(">HIII", 0x8001, 14, FLUSH, handle)


def _record(rec: Recorder, handles: list[int]) -> None:
    for i, h in enumerate(handles):
        rec.put((i, 1_000, _flush(h), OK, None, Labels()))
    rec.between_jobs()


def test_events_naming_the_same_handle_share_one_tuple():
    rec = Recorder()
    _record(rec, [0x80000001] * 500 + [0x80000002] * 500)
    events = rec.events()
    assert [e.handles for e in events] == [(0x80000001,)] * 500 + [(0x80000002,)] * 500
    assert len({id(e.handles) for e in events}) == 2


def test_ever_new_handles_keep_their_own_values_and_the_table_stays_bounded():
    """A workload of ever-new transient handles: each event still names its own handle, and the
    table of shared tuples starts over rather than growing with the run."""
    rec = Recorder()
    handles = [0x80000000 + i for i in range(3 * SHAPES_KEPT)]
    _record(rec, handles)
    assert [e.handles for e in rec.events()] == [(h,) for h in handles]
    assert len(rec._shapes) <= SHAPES_KEPT
