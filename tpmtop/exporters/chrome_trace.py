"""A capture's events as Chrome Trace Event Format JSON (opens in Perfetto UI, chrome://tracing).

Layout: one process (the TPM), one thread ("track") per engine/mode session of the workload
plus one per other origin (the dashboard's polls, the operator's commands). Each TPM command is
a complete event (``ph: "X"``, µs timestamps with ns decimals) carrying the command name and the
decoded response code in ``args``; each operation is a complete event on the same track that
spans its commands, so the viewers draw it as their parent slice. Operations come from the
capture's ``ops`` array; a capture without one gets them derived from the events' ``op_seq``
(spanning first command start to last command end — host work after the last command is
then not visible).

Streaming: events are read from the capture and written out one by one (see
:class:`tpmtop.capture.CaptureReader`), so a million events need neither 1 GB of dicts nor
1 GB of output strings in memory.
"""

from __future__ import annotations

import json
import os
import tempfile

from tpmtop.capture import CaptureError, CaptureReader
from tpmtop.atomic import open_atomic

PID = 1
_BATCH = 8192


def _us(ns: int) -> str:
    # µs with the ns as decimals: exact, and shorter than float repr.
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}" if r else str(q)


def _us_text(digits: str) -> str:
    """ns as JSON digits -> µs as JSON number text, by moving the decimal point (no int())."""
    return digits[:-3] + "." + digits[-3:] if len(digits) > 3 else "0.%03d" % int(digits)


_EVENT_FMT = ('{"name":%s,"cat":"tpm","ph":"X","ts":%s,"dur":%s,"pid":1,"tid":%d,%s"args":{'
              '"command":%s,"rc":%s,"rc_text":%s,"handles":%s,"sessions":%s,"op_seq":%s,"origin":%s}}')
_OP_FMT = ('{"name":%s,"cat":"op","ph":"X","ts":%s,"dur":%s,"pid":1,"tid":%d,"args":{'
           '"op_seq":%s,"ok":%s,"wire_us":%s,"host_us":%s}}')


class _Writer:
    def __init__(self, out):
        self.out = out
        self.batch: list[str] = []
        self.first = True

    def add(self, line: str) -> None:
        self.batch.append(line)
        if len(self.batch) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        if self.batch:
            text = ",\n".join(self.batch)
            self.out.write(((",\n" if not self.first else "") + text).encode("utf-8"))
            self.first = False
            self.batch = []


def export_chrome_trace(capture_path: str | os.PathLike, out_path: str | os.PathLike) -> dict:
    """Write the trace atomically; returns counts ``{"events", "ops", "tracks"}``.

    Raises :class:`CaptureError` (exit 2) for an invalid capture or one without events."""
    from tpmtop.tpm import names  # rc wording for events written without rc_text

    tracks: dict[tuple, int] = {}  # key -> tid
    track_names: dict[int, str] = {}
    name_cache: dict[str, str] = {}
    counts = {"events": 0, "ops": 0, "derived_ops": 0}

    def tid_for(origin_j: str, engine_j: str, mode_j: str) -> int:
        key = (engine_j, mode_j) if engine_j != "null" else (origin_j,)
        tid = tracks.get(key)
        if tid is None:
            tid = tracks[key] = len(tracks) + 1
            if len(key) == 2:
                label = f"{json.loads(engine_j)} / {json.loads(mode_j) if mode_j != 'null' else '?'}"
            else:
                label = {"poll": "tpmtop polling", "user": "operator commands"}.get(
                    json.loads(origin_j), json.loads(origin_j))
            track_names[tid] = label
        return tid

    out_dir = os.path.dirname(os.path.realpath(os.fspath(out_path))) or "."
    # Operations derived from the events' op_seq, for events whose operation is not in the
    # "ops" array (the bench's uncounted warm-up, or a capture without "ops"). They are
    # spilled to a temporary file, one "op_seq<TAB>slice" line each, and added at the end
    # unless the "ops" array (if it came after the events) covers them after all.
    spill = tempfile.TemporaryFile(dir=out_dir)
    spill_lines: list[str] = []
    open_ops: dict[int, list] = {}  # tid -> [op_seq, op_j, start_ns, end_ns, n, errors]
    covered = bytearray()  # covered[op_seq] == 1: the "ops" array has it
    covered_big: set[int] = set()

    def cover(seq: int) -> None:
        if seq < 1 << 26:  # a byte per op_seq up to 64 M; beyond that a set
            if seq >= len(covered):
                covered.extend(bytes(max(seq + 1 - len(covered), len(covered))))
            covered[seq] = 1
        else:
            covered_big.add(seq)

    def is_covered(seq: int) -> bool:
        return (covered[seq] == 1) if seq < len(covered) else seq in covered_big

    def close_op(tid: int, st: list) -> None:
        seq, op_j, start, end, n, errors = st
        spill_lines.append(f'{seq}\t{{"name":{op_j},"cat":"op","ph":"X","ts":{_us(start)},"dur":{_us(end - start)},'
                           f'"pid":{PID},"tid":{tid},"args":{{"op_seq":{seq},"commands":{n},'
                           f'"ok":{"false" if errors else "true"},"derived":true}}}}\n')
        if len(spill_lines) >= _BATCH:
            spill.write("".join(spill_lines).encode("utf-8"))
            spill_lines.clear()

    with open_atomic(out_path, text=False, background_sync=False) as out:
        out.write(b'{"displayTimeUnit":"ms","traceEvents":[\n')
        w = _Writer(out)
        add = w.add

        def on_op(row) -> None:
            seq, engine_j, mode_j, op_j, t_ns, total_ns, wire_ns, ok, _ = row
            tid = tracks.get((engine_j, mode_j)) or tid_for('"workload"', engine_j, mode_j)
            host = int(total_ns) - int(wire_ns)
            add(_OP_FMT % (op_j, _us_text(t_ns), _us_text(total_ns), tid, seq, ok, _us_text(wire_ns),
                           _us(max(host, 0))))
            cover(int(seq))
            counts["ops"] += 1

        rc_cache: dict[tuple, tuple] = {}

        def rc_info(rc: str, rc_text_j: str) -> tuple:
            v = rc_cache.get((rc, rc_text_j))
            if v is None:
                code = None if rc == "null" else int(rc)
                if rc_text_j == "null":
                    rc_text_j = json.dumps(names.rc_text(code))
                # Errors get a red slice: the eye finds the one failing command in a million.
                v = rc_cache[(rc, rc_text_j)] = ("null" if code is None else f'"0x{code:03x}"', rc_text_j,
                                                 "" if code == 0 else '"cname":"terrible",')
            return v

        def on_event(row) -> None:
            (t_ns, command_j, handles_j, sessions_j, rc, rc_text_j, wire_ns, origin_j, engine_j, mode_j,
             op_j, op_seq, _) = row
            key = (engine_j, mode_j) if engine_j != "null" else (origin_j,)
            tid = tracks.get(key) or tid_for(origin_j, engine_j, mode_j)
            name_j = name_cache.get(command_j)
            if name_j is None:
                c = json.loads(command_j)
                name_j = name_cache[command_j] = json.dumps(c[8:] if c.startswith("TPM2_CC_") else c)
            rc_hex, rc_text_j, cname = rc_info(rc, rc_text_j)
            add(_EVENT_FMT % (name_j, _us_text(t_ns), _us_text(wire_ns), tid, cname, command_j, rc_hex,
                              rc_text_j, handles_j, sessions_j, op_seq, origin_j))
            if op_seq != "null":
                seq = int(op_seq)
                if not is_covered(seq):
                    derive(tid, seq, op_j, int(t_ns), int(wire_ns), rc_hex != '"0x000"')

        def derive(tid, op_seq, op_j, t_ns, wire_ns, failed) -> None:
            st = open_ops.get(tid)
            end = t_ns + wire_ns
            if st is not None and st[0] == op_seq:
                st[3] = max(st[3], end)
                st[4] += 1
                st[5] += failed
            else:
                if st is not None:
                    close_op(tid, st)
                open_ops[tid] = [op_seq, op_j if op_j != "null" else '"op"', t_ns, end, 1, int(failed)]

        reader = CaptureReader(capture_path, on_event=on_event, on_op=on_op)
        try:
            doc = reader.read()
            if not reader.has_events or reader.n_events == 0:
                raise CaptureError(f"{os.fspath(capture_path)}: the capture has no events, so there is "
                                   f"nothing to put on a timeline; record one with "
                                   f"`tpmtop bench ... --json FILE --events`")
            for tid, st in open_ops.items():
                close_op(tid, st)
            spill.write("".join(spill_lines).encode("utf-8"))
            spill.seek(0)
            for line in spill:
                seq_b, _, slice_b = line.partition(b"\t")
                if is_covered(int(seq_b)):
                    continue  # the "ops" array, read after these events, has this operation
                w.add(slice_b.rstrip(b"\n").decode("utf-8"))
                counts["derived_ops"] += 1
        finally:
            spill.close()
        tpm = doc.get("tpm", {})
        host = doc.get("host", {})
        pname = (f"TPM {tpm.get('manufacturer', '?')} fw {tpm.get('firmware', '?')}"
                 f"{' (simulated)' if tpm.get('simulated') else ''} on {host.get('hostname', '?')}")
        add(json.dumps({"name": "process_name", "ph": "M", "pid": PID, "args": {"name": pname}}))
        for tid, label in sorted(track_names.items()):
            add(json.dumps({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": label}}))
            add(json.dumps({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                            "args": {"sort_index": tid}}))
        for m in doc.get("marks", ()):
            add(json.dumps({"name": m["text"], "ph": "i", "s": "g", "ts": m["t_ns"] / 1000, "pid": PID, "tid": 0}))
        w.flush()
        other = {"schema": doc.get("schema"), "created": doc.get("created"), "tpm": tpm, "host": host,
                 "tool": doc.get("tool")}
        out.write(b'\n],\n"otherData":' + json.dumps(other).encode("utf-8") + b"}\n")
    counts["tracks"] = len(tracks)
    counts["events"] = reader.n_events
    return counts
