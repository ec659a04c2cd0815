"""Writing a ``tpmtop.capture/1`` file: validated first, then atomically, one element per line.

Every capture tpmtop writes goes through :func:`write_capture` (``bench --json``, the
dashboard's export key), so ``tpmtop replay``/``compare``/``export`` read what was written, and
the canonical line form lets the reader take its fast path on every element. A producer that
makes the lines itself (an import) hands them over as :class:`CheckedLines`, checked as made.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from tpmtop.capture.spec import EVENT_KEYS, OP_KEYS, SCHEMA_ID, check_element, validate_head

Progress = Callable[[int, "int | None"], None]  # (elements written, of how many)

_J = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _canonical(d: dict[str, Any], keys: tuple[Any, ...]) -> str:
    # The reader's fast path needs exactly this key order; unknown keys (a newer minor) are
    # kept after them, which only sends that element down the general path.
    out = {k: d[k] for k in keys if k in d}  # an absent optional member stays absent
    for k, v in d.items():
        if k not in out:
            out[k] = v
    return _J(out)


class CheckedLines(ABC):
    """``events`` or ``ops`` given as their canonical lines, already checked: the writer pastes
    them as they are. For a producer that makes each line itself, from values that can only be
    valid (an import builds a million events from decoded bytes: the event dicts, their check,
    their JSON encoding and their pickling were over a third of its time); it must check what
    it cannot vouch for with :func:`checked_line`. Sized; :meth:`line_batches` may be asked for more than once."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def line_batches(self) -> Iterator[list[str]]:
        """The lines (without the separating comma and newline), in batches of any size."""


def checked_line(key: str, item: dict[str, Any], i: int) -> str:
    """Element ``i`` of ``events`` (key "events") or ``ops``, checked (CaptureError) and in its
    canonical line form: what :func:`capture_chunks` writes for it."""
    check_element(key, item, i)
    return _canonical(item, EVENT_KEYS if key == "events" else OP_KEYS)


def _checked_batches(key: str, items: Any) -> Iterator[list[str]]:
    """The canonical lines of ``items`` (any iterable of dicts), each checked, 4096 a batch."""
    batch: list[str] = []
    for i, item in enumerate(items):
        batch.append(checked_line(key, item, i))
        if len(batch) >= 4096:
            yield batch
            batch = []
    if batch:
        yield batch


def capture_chunks(capture: dict[str, Any], progress: Progress | None = None) -> Iterator[bytes]:
    """The capture's text in pieces (bytes), each element checked as it goes. ``events`` and
    ``ops`` may be any iterable (a generator streams a big capture without holding it twice),
    or :class:`CheckedLines`. ``progress(done, total)``: elements written so far, of how many
    (None for a generator)."""
    sized = [capture[k] for k in ("ops", "events") if capture.get(k) is not None]
    total = sum(len(x) for x in sized) if all(isinstance(x, (list, tuple)) for x in sized) else None
    done = 0
    head = {k: v for k, v in capture.items() if k not in ("events", "ops")}
    head.setdefault("schema", SCHEMA_ID)
    validate_head(head)
    head_text = json.dumps(head, indent=1, ensure_ascii=False, allow_nan=False)
    yield head_text[:-1].rstrip().encode("utf-8")
    # ops before events: an exporter streaming the file then knows the operations before
    # it meets their commands.
    for key in ("ops", "events"):
        items = capture.get(key)
        if items is None:
            continue
        yield f',\n "{key}": [\n'.encode()
        batches = items.line_batches() if isinstance(items, CheckedLines) else _checked_batches(key, items)
        first = True
        for batch in batches:
            if not batch:
                continue
            yield ((",\n" if not first else "") + ",\n".join(batch)).encode("utf-8")
            first = False
            done += len(batch)
            if progress is not None:
                progress(done, total)
        yield b"\n ]"
    yield b"\n}\n"


def write_capture(path: Any, capture: dict[str, Any], *, keep: bool = False,
                  progress: Progress | None = None) -> None:
    """Validate ``capture`` and write it by the output rules of :mod:`tpmtop.output` (atomic
    for a regular file, write-through for a pipe or device, ``-`` for stdout); ``path`` may
    be an already checked :class:`tpmtop.output.Output`. A capture that fails validation leaves
    no file behind. ``keep``: if the write fails, keep the capture in a fallback file (named
    in the error); ``events``/``ops`` must then be lists, not generators."""
    from tpmtop.output import Output

    out = path if isinstance(path, Output) else Output(path, big=True)
    if keep:
        for key in ("events", "ops"):
            if capture.get(key) is not None and not isinstance(capture[key], (list, tuple)):
                raise TypeError(f"write_capture(keep=True) needs {key} as a list")
        out.write_keeping(lambda: capture_chunks(capture, progress), label="capture")
    else:
        out.write_chunks(capture_chunks(capture, progress))
