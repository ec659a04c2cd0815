"""Captures (``tpmtop.capture/1``): the one place a capture is built, validated, read and written.

- :mod:`~tpmtop.capture.spec`: the schema, the keys of an event and an operation,
  validation (schema plus finite numbers and histogram counts).
- :mod:`~tpmtop.capture.build`: a run (accounts, recorder events, ops) as a capture document.
- :mod:`~tpmtop.capture.read`: the streaming reader (fast path for the canonical line form).
- :mod:`~tpmtop.capture.write`: the writer (validated, canonical lines, by the output rules
  of :mod:`tpmtop.output`).

Versioning: ``"schema": "tpmtop.capture/1"`` is the major version; an optional integer
``"minor"`` counts backwards-compatible additions (new optional members). A /1 reader loads
every minor and ignores members it does not know; an unknown major is refused.
"""

from tpmtop.capture.build import build_capture, events_json
from tpmtop.capture.read import CaptureReader, event_row, load_capture, load_summary, op_row
from tpmtop.capture.spec import MAJOR, MINOR, SCHEMA_ID, CaptureError, check_version, schema, validate_capture
from tpmtop.capture.write import write_capture

__all__ = ["MAJOR", "MINOR", "SCHEMA_ID", "CaptureError", "CaptureReader", "build_capture", "check_version",
           "event_row", "events_json", "load_capture", "load_summary", "op_row", "schema",
           "validate_capture", "write_capture"]
