"""A saved capture as the dashboard's data source: no TPM, nothing changes. No Textual here.

Loaded with :func:`tpmtop.capture.load_capture`: schema validation, clear one-line errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpmtop.sources.protocol import (
    UNSET,
    Capabilities,
    CapturedStream,
    CaptureFacts,
    HeaderInfo,
    SourceBase,
    SourceKind,
    SourceState,
    TpmName,
)
from tpmtop.sources.runs import RunView, run_from_capture
from tpmtop.sources.timings import TimingsView

if TYPE_CHECKING:
    from tpmtop.capture import CaptureReader
    from tpmtop.capture.spec import EventLine

MAX_STREAM_ROWS = 100_000  # a capture's newest events shown (as many as the recorder's ring keeps live)


def rc_not_traced(e: dict[str, Any]) -> bool:
    """A capture event that was answered though nobody saw its response code (tpmtop kernel:
    a user-space command where tpm2_commit_space could not be probed)."""
    from tpmtop.importers.observed import RC_NOT_TRACED

    return e.get("rc") is None and e.get("rc_text") == RC_NOT_TRACED


def load(path: str | Path) -> dict[str, Any]:
    """Schema-checked; a bad file is one clear line (a UsageError), exit status 2. A file of
    recorded traffic (pcap, pcapng: tpmtop.importers.registry) is imported first. Only the
    newest MAX_STREAM_ROWS events are kept (a capture may hold a million), and every string
    is made safe for a terminal (tpmtop.textsafe): the capture may come from anyone."""
    from tpmtop.capture import CaptureReader
    from tpmtop.importers.registry import find_importer
    from tpmtop.textsafe import safe_tree

    importer = find_importer(path)  # recorded traffic (a tpm2-tss pcap: TCTI file, a tcpdump …)
    if importer is not None:
        from collections import deque

        doc = importer.read(path)[0]
        # an import's events may be spooled on disk (a million): the newest are what is shown
        doc["events"] = list(deque(doc.get("events") or (), maxlen=MAX_STREAM_ROWS))
    else:
        doc = _read_tail(CaptureReader, path)
    safe: dict[str, Any] = safe_tree(doc)
    return safe


def _read_tail(reader_cls: type[CaptureReader], path: str | Path) -> dict[str, Any]:
    from collections import deque

    tail: deque[Any] = deque(maxlen=MAX_STREAM_ROWS)
    r = reader_cls(path, on_event=tail.append, on_op=lambda op: None, typed=True)
    doc: dict[str, Any] = r.read()
    if r.has_events:
        doc["events"] = [_event_dict(e) for e in tail]
    return doc


def _event_dict(e: EventLine) -> dict[str, Any]:
    """A typed event (tpmtop.capture.spec.EventLine) back into a capture event."""
    import json

    import msgspec

    # a typed line with room for bytes and a client (EventBytesLine) leaves the absent ones UNSET
    d = {k: v for k, v in msgspec.structs.asdict(e).items() if v is not msgspec.UNSET}
    d.update(d.pop("extra", None) or {})  # command_hex/response_hex, client …
    d["handles"] = json.loads(bytes(e.handles))
    d["sessions"] = json.loads(bytes(e.sessions))
    return d


class ReplaySource(SourceBase):
    caps = Capabilities(SourceKind.REPLAY, timings=True, selects_runs=True,
                        why_not="replay shows a saved capture: nothing here runs or changes a TPM")

    def __init__(self, capture: dict[str, Any], path: str | Path = "capture", decode: bool = False) -> None:
        super().__init__()
        self.doc = capture  # the capture as loaded (capture() hands it back)
        self.path = Path(path)
        self.tpm = dict(capture.get("tpm") or {})
        self._runs: list[RunView] = [run_from_capture(r) for r in capture.get("runs") or [] if isinstance(r, dict)]
        for r in capture.get("runs") or []:  # a `none` run measured as the dashboard's interleaved baseline
            for pace in (r.get("pacing") or []) if isinstance(r, dict) and isinstance(r.get("pacing"), list) else []:
                n = pace.get("interleaved_ops") if isinstance(pace, dict) else None
                if isinstance(n, int) and n > 0:
                    self.baseline_ops[(str(r.get("engine")), str(r.get("op")))] = n
        events = capture.get("events") or []
        self._stream = CapturedStream(list(events[-MAX_STREAM_ROWS:]), decoded=decode)
        for e in events[-MAX_STREAM_ROWS:]:
            if isinstance(e, dict):
                rc = e.get("rc")
                rc = int(rc, 0) if isinstance(rc, str) and rc.strip().lower().startswith("0x") else rc
                if rc_not_traced(e) or e.get("expected") is True:
                    continue  # answered (its code unknown), or an error its sender expects
                if rc != 0 and (rc is None or isinstance(rc, int)):
                    from tpmtop.tpm import names

                    self.failures[(names.cc_from_name(str(e.get("command") or e.get("cc") or "")), rc)] += 1
        self.created = str(capture.get("created", ""))
        self.host = capture.get("host") or {}
        # A kernel capture opens on the kernel's extends (its operations, priced whole), not on
        # the per-command run that comes first
        first = next((r for r in self._runs if r.engine == "kernel" and r.op == "extend"), None) or \
            (self._runs[0] if self._runs else None)
        self.engine = first.engine if first else UNSET
        self.mode = first.mode if first else UNSET
        self.op = first.op if first else UNSET

    @property
    def tcti(self) -> str:
        return str(self.tpm.get("tcti", "?"))

    def runs(self) -> list[RunView]:
        return self._runs

    def current_run(self) -> RunView | None:
        for r in self._runs:
            if (r.engine, r.mode, r.op) == (self.engine, self.mode, self.op):
                return r
        return None

    def choose(self, engine: str | None = None, mode: str | None = None, op: str | None = None) -> bool:
        """Show another run of the capture; False (and nothing changes) if it has none."""
        want = (engine or self.engine, mode or self.mode, op or self.op)
        keys = [r.key for r in self._runs]
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
        return list(dict.fromkeys(r.key[i] for r in self._runs))

    def capture(self) -> dict[str, Any]:
        return self.doc

    def events(self) -> list[dict[str, Any]]:
        return list(self.doc.get("events") or [])

    def captured_stream(self) -> CapturedStream:
        return self._stream

    def timings(self, runs: list[RunView] | None = None) -> TimingsView:
        return TimingsView(self.current_run(), engine=self.engine, mode=self.mode, op=self.op)

    def header(self) -> HeaderInfo:
        t = self.tpm
        host = self.host
        pacing = self.doc.get("pacing")
        paced = isinstance(pacing, dict) and isinstance(pacing.get("rate_ops_per_s"), (int, float))
        rate = pacing["rate_ops_per_s"] if isinstance(pacing, dict) and paced else 0.0
        burst = pacing.get("burst") if isinstance(pacing, dict) else None
        facts = CaptureFacts(file=self.path.name, created=self.created, hostname=_said(host, "hostname"),
                             kernel=_said(host, "kernel"), paced=paced, rate=rate,
                             burst=burst if isinstance(burst, (int, float)) else None)
        name = TpmName(_said(t, "manufacturer"), _said(t, "vendor"), _said(t, "firmware"))
        return HeaderInfo(state=SourceState.REPLAY, tcti=self.tcti, simulated=bool(t.get("simulated")),
                          engine=self.engine, mode=self.mode, op=self.op, name=name,
                          profile=str(t["profile"]) if t.get("profile") else None, facts=facts)


def _said(d: dict[str, Any], key: str) -> str | None:
    """A capture's string as it has it; None where it has none."""
    return str(d[key]) if key in d else None
