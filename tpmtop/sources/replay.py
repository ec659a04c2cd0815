"""A saved capture as the dashboard's data source: no TPM, nothing changes. No Textual here.

Loaded with :func:`tpmtop.capture.load_capture`: schema validation, clear one-line errors.
"""

from __future__ import annotations

from pathlib import Path

from tpmtop.sources.model import RunView, StreamRow, run_from_capture, stream_row_from_dict

MAX_STREAM_ROWS = 2000


def load(path: str | Path) -> dict:
    """Schema-checked; a bad file is one clear line (a UsageError), exit status 2. A pcap or
    pcapng file is imported first (tpmtop.importers.pcap). Only the
    newest MAX_STREAM_ROWS events are kept (a capture may hold a million), and every string
    is made safe for a terminal (tpmtop.textsafe): the capture may come from anyone."""
    from tpmtop.capture import CaptureReader
    from tpmtop.importers.pcap import import_pcap, is_pcap
    from tpmtop.textsafe import safe_tree

    if is_pcap(path):  # a tpm2-tss pcap: TCTI file, or tcpdump of a simulator's port
        return safe_tree(import_pcap(path)[0])
    return safe_tree(_read_tail(CaptureReader, path))


def _read_tail(reader_cls, path) -> dict:
    from collections import deque

    tail: deque = deque(maxlen=MAX_STREAM_ROWS)
    r = reader_cls(path, on_event=tail.append, on_op=lambda op: None, typed=True)
    doc = r.read()
    if r.has_events:
        doc["events"] = [_event_dict(e) for e in tail]
    return doc


def _event_dict(e) -> dict:
    """A typed event (tpmtop.capture.model.EventLine) back into a capture event."""
    import json

    import msgspec

    d = msgspec.structs.asdict(e)
    d["handles"] = json.loads(bytes(e.handles))
    d["sessions"] = json.loads(bytes(e.sessions))
    return d


class ReplaySource:
    kind = "replay"
    needs_tpm = False
    read_only = True
    simulated = False
    kernel_device = False
    connected = True

    def __init__(self, capture: dict, path: str | Path = "capture"):
        self.capture = capture
        self.path = Path(path)
        self.tpm = dict(capture.get("tpm") or {})
        self.runs: list[RunView] = [run_from_capture(r) for r in capture.get("runs") or [] if isinstance(r, dict)]
        events = capture.get("events") or []
        self.stream: list[StreamRow] = [stream_row_from_dict(i, e) for i, e in
                                        enumerate(events[-MAX_STREAM_ROWS:]) if isinstance(e, dict)]
        self.created = str(capture.get("created", ""))
        self.host = capture.get("host") or {}
        first = self.runs[0] if self.runs else None
        self.engine = first.engine if first else "-"
        self.mode = first.mode if first else "-"
        self.op = first.op if first else "-"

    @property
    def tcti(self) -> str:
        return str(self.tpm.get("tcti", "?"))

    def current_run(self) -> RunView | None:
        for r in self.runs:
            if (r.engine, r.mode, r.op) == (self.engine, self.mode, self.op):
                return r
        return None

    def choose(self, engine: str | None = None, mode: str | None = None, op: str | None = None) -> bool:
        """Show another run of the capture; False (and nothing changes) if it has none."""
        want = (engine or self.engine, mode or self.mode, op or self.op)
        keys = [r.key for r in self.runs]
        if want not in keys:
            # keep what was asked for and take the first run that matches it
            asked = {"engine": engine, "mode": mode, "op": op}
            for k in keys:
                if all(v is None or k[i] == v for i, v in enumerate(asked.values())):
                    want = k
                    break
            else:
                return False
        self.engine, self.mode, self.op = want
        return True

    def values(self, what: str) -> list[str]:
        """The engines/modes/ops present in the capture, in order of appearance."""
        i = {"engine": 0, "mode": 1, "op": 2}[what]
        return list(dict.fromkeys(r.key[i] for r in self.runs))
