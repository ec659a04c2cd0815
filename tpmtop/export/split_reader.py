"""The capture reader's side of splitting the events array between two processes (the
Chrome-trace exporter's fork protocol; the plain reader in tpmtop.capture knows nothing of it).

An exporter that spends microseconds per event can use a second core: when the events array
starts (``on_events_start``), it picks a line start S further on (one event per line, as
write_capture puts them), forks a helper that parses and converts the events from S to the
end of the array (:meth:`SplitReader.read_events_tail`), and calls ``split_events(S,
handler)``. This reader then reads no further than S. If it gets there between two events of
the array, ``handler.join(self)`` returns the helper's (events, end byte, newlines) and reading
resumes after the array; if the helper failed (e.g. an invalid event: this process then parses
it again and reports it with the right position) or the parser needs the text past S in any
other state, ``handler.abandon()`` is called and this process reads on by itself. So the
helper's result is used only where it is exactly what this process would compute.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import Any, Protocol

from tpmtop.capture.read import READ_CHUNK, CaptureReader


class SplitHandler(Protocol):
    """What ``split_events`` is given: the helper's side of the split."""

    def join(self, reader: SplitReader) -> tuple[int, int, int] | None: ...

    def abandon(self) -> None: ...


class SplitReader(CaptureReader):
    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.on_events_start: Callable[[SplitReader, int], None] | None = None
        self._limit: int | None = None  # no read goes past this byte offset while a split is on
        self._split: SplitHandler | None = None

    # -- the reader's hooks -------------------------------------------------------------------
    def _events_begin(self) -> None:
        if self.on_events_start is not None and self.on_event is not None:
            self.on_events_start(self, self._byte_offset())

    def _fill(self, want: int = READ_CHUNK) -> bool:
        if self._limit is not None and not self.eof:
            room = self._limit - self._bytes
            if room <= 0:
                # The parser needs text past the split point in some other state than "between
                # two events": the helper's work does not fit, go on alone.
                self._drop_split()
            else:
                want = min(want, room)
        return super()._fill(want)

    def _top_up(self, is_events: bool) -> int | None:
        if self._bytes != self._limit:
            self._fill()
        elif self.pos == len(self.buf) and is_events:
            # At the split point, between two events: the helper process has done the rest of
            # this array (or failed, and then this process goes on alone).
            done = self._join_split()
            if done is not None:
                return done
            self._fill()
        return None

    # -- the protocol -------------------------------------------------------------------------
    def _byte_offset(self) -> int:
        """The file offset of self.buf[self.pos]."""
        pending = len(self._udec.getstate()[0])  # bytes of a character cut by the last read
        return self._bytes - pending - len(self.buf[self.pos:].encode("utf-8"))

    def split_events(self, offset: int, handler: SplitHandler) -> bool:
        """Read no further than ``offset`` (see above); False if that is not possible."""
        here = self._byte_offset()
        if offset <= here:
            return False
        if offset < self._bytes:
            # Already read past it (a small file is read in one go): keep the text before it
            # and read the file from there.
            try:
                keep = self.buf[self.pos:].encode("utf-8")[:offset - here].decode("utf-8")
            except UnicodeDecodeError:  # not a character boundary, so not a line start either
                return False
            self.buf = self.buf[:self.pos] + keep
            self._f.seek(offset)
            self._udec = codecs.getincrementaldecoder("utf-8")("strict")
            self._bytes = offset
            self.eof = False
        self._limit = offset
        self._split = handler
        return True

    def _drop_split(self) -> None:
        handler, self._split, self._limit = self._split, None, None
        if handler is not None:
            handler.abandon()

    def _join_split(self) -> int | None:
        handler = self._split
        assert handler is not None  # called only at the split point (self._limit), set with it
        done = handler.join(self)
        if done is None:
            self._drop_split()
            return None
        n, end, newlines = done
        self._split = self._limit = None
        # Resume after the array the helper finished.
        self._line0 += self.buf.count("\n", 0, self.pos) + newlines
        self._f.seek(end)
        self._udec = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self._bytes = end
        return n

    def read_events_tail(self, offset: int) -> tuple[int, int, int]:
        """(The helper's part.) Parse the events from ``offset`` — the start of an element of
        the events array — through the array's ']'; returns (events, the byte offset after
        the array, newlines read)."""
        self._open()
        try:
            self._f.seek(offset)
            self._bytes = offset
            self.has_events = True
            self._fill()
            self._elements("events", None)
            newlines = self._line0 - 1 + self.buf.count("\n", 0, self.pos)
            return self.n_events, self._byte_offset(), newlines
        finally:
            self._f.close()
            self.buf = ""
