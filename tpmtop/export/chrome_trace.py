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
:class:`tpmtop.capture.CaptureReader`; the fork protocol below is in
:mod:`tpmtop.export.split_reader`), so a million events need neither 1 GB of dicts nor
1 GB of output strings in memory.

Speed: the work is a few microseconds of Python per event (regular-expression parse, then
formatting), so a million-event capture takes seconds. Two things keep it short: each event is
one ``%`` with a template cached per (command, handles, sessions, rc, origin, track) — only the
timestamps and op_seq vary — and, on a machine with a spare core, a forked helper process
converts the second half of the events array while this process does the first (see
:class:`_Helper`). The helper's output is used only if it is exactly what this process would
have written (same track numbers: when both parts meet tracks that were not known at the fork
— a capture without "ops" — they may not be); otherwise this process converts that part too.
So the trace never depends on the split; only derived operations may come in another order.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import tempfile
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from tpmtop.capture import CaptureError
from tpmtop.export.split_reader import SplitReader as CaptureReader

if TYPE_CHECKING:
    from tpmtop.output import Output

# A row of the capture reader: the JSON text of an element's members (see tpmtop.capture.read).
_Row = tuple[str, ...]

PID = 1
_BATCH = 8192
# A helper process pays off only for a big events array (fork, copying its output).
_SPLIT_MIN_BYTES = 16 * 1024 * 1024
# Where in the events array (by bytes) the helper takes over. This process also writes the
# metadata and copies the helper's part afterwards, so a bit less than half is left to it.
_SPLIT_AT = 0.48


def _us(ns: int) -> str:
    # µs with the ns as decimals: exact, and shorter than float repr.
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}" if r else str(q)


def _esc(json_text: str) -> str:
    """JSON text pasted into a %-template: a '%' in a string must not be read as a directive."""
    return json_text.replace("%", "%%")


# The templates: "%s.%s" is a timestamp in µs, written from the ns digits split before their
# last three (no int(), no float), "%s" op_seq as it stands in the capture.
_EVENT_TPL = ('{"name":%s,"cat":"tpm","ph":"X","ts":%%s.%%s,"dur":%%s.%%s,"pid":1,"tid":%d,%s"args":{'
              '"command":%s,"rc":%s,"rc_text":%s,"handles":%s,"sessions":%s,"op_seq":%%s,"origin":%s}}')
_OP_TPL = ('{"name":%s,"cat":"op","ph":"X","ts":%%s.%%s,"dur":%%s.%%s,"pid":1,"tid":%d,"args":{'
           '"op_seq":%%s,"ok":%s,"wire_us":%%s.%%s,"host_us":%%d.%%03d}}')
_MAX_TEMPLATES = 100_000  # a capture with ever-new rc_text strings must not grow memory


class _Writer:
    """Output lines joined with ",\\n", written in batches. ``prefix`` is written with the
    first flush: a capture refused before its events (not JSON, another schema) then leaves
    nothing at all on a stdout or pipe output (a file output is discarded anyway)."""

    def __init__(self, out: IO[bytes], prefix: bytes = b"") -> None:
        self.out = out
        self.batch: list[str] = []
        self.first = True
        self.prefix = prefix

    def add(self, line: str) -> None:
        self.batch.append(line)
        if len(self.batch) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        if self.prefix:
            self.out.write(self.prefix)
            self.prefix = b""
        if self.batch:
            text = ",\n".join(self.batch)
            self.out.write(((",\n" if not self.first else "") + text).encode("utf-8"))
            self.first = False
            self.batch.clear()  # in place: the event handlers hold this list


def _copy_file(src: IO[bytes], dst: IO[bytes]) -> None:
    """Append all of the (flushed) file ``src`` to the binary file ``dst``, in the kernel."""
    dst.flush()
    src_fd, dst_fd = src.fileno(), dst.fileno()
    size = os.fstat(src_fd).st_size
    off = 0
    while off < size:
        try:
            n = os.copy_file_range(src_fd, dst_fd, size - off, off)
        except OSError:  # e.g. a file system without it: plain reads and writes
            n = os.write(dst_fd, os.pread(src_fd, min(size - off, 1 << 22), off))
        if n <= 0:
            raise OSError(f"short copy of the helper's part ({off} of {size} bytes)")
        off += n
    dst.seek(0, os.SEEK_END)  # the buffered writer's idea of the position, after the raw writes


class _Export:
    """The state of one export. A forked helper starts with a copy of it (see _Helper)."""

    def __init__(self, out: IO[bytes], out_dir: str, prefix: bytes = b"") -> None:
        from tpmtop.tpm import names  # rc wording for events written without rc_text

        self.rc_text = names.rc_text
        self.out_dir = out_dir
        self.w = _Writer(out, prefix)
        self.tracks: dict[tuple[str, ...], int] = {}  # key -> tid, numbered in order of appearance
        self.track_names: dict[int, str] = {}
        self.templates: dict[tuple[str, ...], str] = {}
        self.op_templates: dict[tuple[str, ...], str] = {}
        self.n_ops = 0
        self.covered = bytearray()  # covered[op_seq] == 1: the "ops" array has it
        self.covered_big: set[int] = set()
        # Operations derived from the events' op_seq, for events whose operation is not in the
        # "ops" array (the bench's uncounted warm-up, or a capture without "ops"). They are
        # spilled to a temporary file, one "op_seq<TAB>slice" line each, and added at the end
        # unless the "ops" array (if it came after the events) covers them after all.
        self.spill: IO[bytes] = tempfile.TemporaryFile(dir=out_dir)  # noqa: SIM115 - the export owns it
        self.spill_lines: list[str] = []
        self.open_ops: dict[int, list[Any]] = {}  # tid -> [op_seq, op_j, start_ns, end_ns, n, errors]
        self.heads: dict[int, list[Any]] | None = None  # the helper's first closed operation per track
        self.helper: _Helper | None = None

    # -- tracks and templates --------------------------------------------------------------

    def tid_for(self, origin_j: str, engine_j: str, mode_j: str) -> int:
        key: tuple[str, ...] = (engine_j, mode_j) if engine_j != "null" else (origin_j,)
        tid = self.tracks.get(key)
        if tid is None:
            tid = self.tracks[key] = len(self.tracks) + 1
            if len(key) == 2:
                label = f"{json.loads(engine_j)} / {json.loads(mode_j) if mode_j != 'null' else '?'}"
            else:
                label = {"poll": "tpmtop polling", "user": "operator commands"}.get(
                    json.loads(origin_j), json.loads(origin_j))
            self.track_names[tid] = label
        return tid

    def event_template(self, key: tuple[str, ...]) -> str:
        command_j, handles_j, sessions_j, rc, rc_text_j, origin_j, engine_j, mode_j = key
        tid = self.tid_for(origin_j, engine_j, mode_j)
        c = json.loads(command_j)
        name_j = json.dumps(c[8:] if c.startswith("TPM2_CC_") else c)
        code = None if rc == "null" else int(rc)
        if rc_text_j == "null":
            rc_text_j = json.dumps(self.rc_text(code))
        rc_hex = "null" if code is None else f'"0x{code:03x}"'
        # Errors get a red slice: the eye finds the one failing command in a million.
        cname = "" if code == 0 else '"cname":"terrible",'
        tpl = _EVENT_TPL % (_esc(name_j), tid, cname, _esc(command_j), rc_hex, _esc(rc_text_j), handles_j,
                            sessions_j, _esc(origin_j))
        if len(self.templates) >= _MAX_TEMPLATES:
            self.templates.clear()
        self.templates[key] = tpl
        return tpl

    def op_template(self, key: tuple[str, ...]) -> str:
        engine_j, mode_j, op_j, ok = key
        tid = self.tracks.get((engine_j, mode_j)) or self.tid_for('"workload"', engine_j, mode_j)
        tpl = _OP_TPL % (_esc(op_j), tid, ok)
        if len(self.op_templates) >= _MAX_TEMPLATES:
            self.op_templates.clear()
        self.op_templates[key] = tpl
        return tpl

    # -- per element: the hot paths (a million calls; locals, no helper calls) -------------

    def op_handler(self) -> Callable[[_Row], None]:
        templates = self.op_templates
        template = self.op_template
        w = self.w
        batch = w.batch
        append = batch.append
        covered = self.covered

        def on_op(row: _Row) -> None:
            seq, engine_j, mode_j, op_j, t_ns, total_ns, wire_ns, ok, _ = row
            tpl = templates.get((engine_j, mode_j, op_j, ok)) or template((engine_j, mode_j, op_j, ok))
            if len(t_ns) < 4 or len(total_ns) < 4 or len(wire_ns) < 4:
                t_ns, total_ns, wire_ns = t_ns.zfill(4), total_ns.zfill(4), wire_ns.zfill(4)
            host_q, host_r = divmod(max(int(total_ns) - int(wire_ns), 0), 1000)
            append(tpl % (t_ns[:-3], t_ns[-3:], total_ns[:-3], total_ns[-3:], seq, wire_ns[:-3], wire_ns[-3:],
                          host_q, host_r))
            if len(batch) >= _BATCH:
                w.flush()
            n = int(seq)
            if n < len(covered):
                covered[n] = 1
            else:
                self.cover(n)
            self.n_ops += 1

        return on_op

    def event_handler(self) -> Callable[[_Row], None]:
        templates = self.templates
        template = self.event_template
        w = self.w
        batch = w.batch
        append = batch.append
        is_covered = self.is_covered
        derive = self.derive
        tracks = self.tracks
        last_seq: str | None = None  # consecutive events mostly belong to the same operation
        last_derived = False

        def on_event(row: _Row) -> None:
            nonlocal last_seq, last_derived
            (t_ns, command_j, handles_j, sessions_j, rc, rc_text_j, wire_ns, origin_j, engine_j, mode_j,
             op_j, op_seq, _) = row
            key = (command_j, handles_j, sessions_j, rc, rc_text_j, origin_j, engine_j, mode_j)
            tpl = templates.get(key) or template(key)
            if len(t_ns) < 4 or len(wire_ns) < 4:
                t_ns, wire_ns = t_ns.zfill(4), wire_ns.zfill(4)
            append(tpl % (t_ns[:-3], t_ns[-3:], wire_ns[:-3], wire_ns[-3:], op_seq))
            if len(batch) >= _BATCH:
                w.flush()
            if op_seq != last_seq:
                last_seq = op_seq
                last_derived = op_seq != "null" and not is_covered(int(op_seq))
            if last_derived:
                tid = tracks[(engine_j, mode_j) if engine_j != "null" else (origin_j,)]
                derive(tid, int(op_seq), op_j, int(t_ns), int(wire_ns), rc != "0")

        return on_event

    # -- operations: the "ops" array and the derived ones ----------------------------------

    def cover(self, seq: int) -> None:
        if seq < 1 << 26:  # a byte per op_seq up to 64 M; beyond that a set
            covered = self.covered
            if seq >= len(covered):
                covered.extend(bytes(max(seq + 1 - len(covered), len(covered))))
            covered[seq] = 1
        else:
            self.covered_big.add(seq)

    def is_covered(self, seq: int) -> bool:
        return (self.covered[seq] == 1) if seq < len(self.covered) else seq in self.covered_big

    def derive(self, tid: int, op_seq: int, op_j: str, t_ns: int, wire_ns: int, failed: bool) -> None:
        st = self.open_ops.get(tid)
        end = t_ns + wire_ns
        if st is not None and st[0] == op_seq:
            st[3] = max(st[3], end)
            st[4] += 1
            st[5] += failed
        else:
            if st is not None:
                self.close_op(tid, st)
            self.open_ops[tid] = [op_seq, op_j if op_j != "null" else '"op"', t_ns, end, 1, int(failed)]

    def close_op(self, tid: int, st: list[Any]) -> None:
        if self.heads is not None and tid not in self.heads:
            # In the helper: the first operation of a track may have begun before the split,
            # in the parent's part; the parent completes and writes it.
            self.heads[tid] = st
            return
        seq, op_j, start, end, n, errors = st
        self.spill_lines.append(
            f'{seq}\t{{"name":{op_j},"cat":"op","ph":"X","ts":{_us(start)},"dur":{_us(end - start)},'
            f'"pid":{PID},"tid":{tid},"args":{{"op_seq":{seq},"commands":{n},'
            f'"ok":{"false" if errors else "true"},"derived":true}}}}\n')
        if len(self.spill_lines) >= _BATCH:
            self.flush_spill()

    def flush_spill(self) -> None:
        self.spill.write("".join(self.spill_lines).encode("utf-8"))
        self.spill_lines.clear()

    def merge_ops(self, heads: dict[int, list[Any]], open_ops: dict[int, list[Any]]) -> None:
        """The helper's derived-operation state joined to this process's at the split."""
        for tid in {**heads, **open_ops}:
            first = heads.get(tid) or open_ops[tid]  # the helper's earliest operation on the track
            mine = self.open_ops.pop(tid, None)
            if mine is not None:
                if mine[0] == first[0]:  # one operation across the split
                    first[1], first[2] = mine[1], mine[2]
                    first[3] = max(first[3], mine[3])
                    first[4] += mine[4]
                    first[5] += mine[5]
                else:
                    self.close_op(tid, mine)
            if tid in heads:
                self.close_op(tid, heads[tid])
        self.open_ops.update(open_ops)

    # -- the split (see CaptureReader.split_events) ----------------------------------------

    def on_events_start(self, reader: CaptureReader, offset: int) -> None:
        if not _have_spare_core():
            return
        try:
            size = os.path.getsize(reader.path)
            if size - offset < _SPLIT_MIN_BYTES:
                return
            split = _line_start(reader.path, offset + int((size - offset) * _SPLIT_AT))
        except OSError:
            return
        if split is not None:
            self.helper = _Helper.start(self, reader.path, split)
            if self.helper is not None and not reader.split_events(split, self.helper):
                self.helper.abandon()

    def run_helper(self, path: str, split: int, out_part: IO[bytes], spill_part: IO[bytes]) -> dict[str, Any]:
        """(In the forked helper.) Convert the events from ``split`` to the array's end."""
        n_tracks = len(self.tracks)
        self.w = _Writer(out_part)
        self.spill, self.spill_lines = spill_part, []
        self.open_ops, self.heads = {}, {}
        reader = CaptureReader(path, on_event=self.event_handler())
        n, end, newlines = reader.read_events_tail(split)
        self.w.flush()
        self.flush_spill()
        out_part.flush()
        spill_part.flush()
        new = list(self.tracks.items())[n_tracks:]
        return {"n": n, "end": end, "newlines": newlines, "tracks": list(self.tracks.items()),
                "labels": {tid: self.track_names[tid] for _, tid in new}, "wrote": not self.w.first,
                "heads": self.heads, "open_ops": self.open_ops}

    def join(self, res: dict[str, Any], out_part: IO[bytes], spill_part: IO[bytes]) -> bool:
        """Take the helper's part if its track numbers are the ones this process would give."""
        tracks = dict(self.tracks)
        for key, tid in res["tracks"]:
            have = tracks.get(key)
            if have is None:
                if tid != len(tracks) + 1:  # both parts met new tracks: numbered differently
                    return False
                tracks[key] = tid
            elif have != tid:
                return False
        for tid in tracks.values():
            if tid not in self.track_names:
                self.track_names[tid] = res["labels"][tid]
        self.tracks.update(tracks)
        self.w.flush()
        if res["wrote"]:
            self.w.out.write(b",\n" if not self.w.first else b"")
            self.w.first = False
            _copy_file(out_part, self.w.out)
        self.merge_ops(res["heads"], res["open_ops"])
        self.flush_spill()
        _copy_file(spill_part, self.spill)
        return True


def _have_spare_core() -> bool:
    from tpmtop.settings import current

    if not hasattr(os, "fork") or not current().export_split:  # a tuning knob: TPMTOP_EXPORT_SPLIT=0
        return False
    try:
        return len(os.sched_getaffinity(0)) > 1
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) > 1


def _die_with(parent: int) -> None:
    """(In the helper.) A killed export must not leave its helper converting for seconds."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before that
        os._exit(1)


def _line_start(path: str, at: int) -> int | None:
    """The offset of the first line at or after ``at`` that starts an event as write_capture
    writes it. Only a guess: the reader checks it is really between two events."""
    with open(path, "rb") as f:
        f.seek(at)
        window = f.read(1 << 20)
    i = window.find(b'\n{"t_ns":')
    return None if i < 0 else at + i + 1


class _Helper:
    """A forked process converting the second part of the events array into a temporary file
    (in the output's folder, unlinked: nothing is left behind if anything dies).

    It reports through a pipe: the events and newlines it read, where the array ended, the
    tracks it numbered and its derived-operation state at both ends. Any failure there (an
    invalid event, an exception, a signal) only means that the parent parses that part itself
    — and then reports an invalid event with its real index and line.
    """

    def __init__(self, pid: int, rfd: int, exp: _Export, out_part: IO[bytes], spill_part: IO[bytes]) -> None:
        self.pid: int | None = pid
        self.rfd: int | None = rfd
        self.exp = exp
        self.out_part, self.spill_part = out_part, spill_part

    @classmethod
    def start(cls, exp: _Export, path: str, split: int) -> _Helper | None:
        # both live as long as the helper process (closed by its join)
        out_part = tempfile.TemporaryFile(dir=exp.out_dir)  # noqa: SIM115
        spill_part = tempfile.TemporaryFile(dir=exp.out_dir)  # noqa: SIM115
        rfd, wfd = os.pipe()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError:
            for fd in (rfd, wfd):
                os.close(fd)
            out_part.close()
            spill_part.close()
            return None
        if pid == 0:  # the helper: never returns into the caller (os._exit, no cleanup of the parent's files)
            status = 1
            try:
                os.close(rfd)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _die_with(parent)
                data = pickle.dumps(exp.run_helper(path, split, out_part, spill_part))
                with os.fdopen(wfd, "wb") as f:
                    f.write(data)
                status = 0
            except BaseException:
                pass
            finally:
                os._exit(status)
        os.close(wfd)
        return cls(pid, rfd, exp, out_part, spill_part)

    def join(self, reader: CaptureReader) -> tuple[int, int, int] | None:
        """(Called by the reader at the split.) The helper's (events, end offset, newlines)."""
        chunks = []
        if self.rfd is None or self.pid is None:
            return None  # already joined
        while True:
            b = os.read(self.rfd, 1 << 16)
            if not b:
                break
            chunks.append(b)
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        try:
            if status != 0 or not chunks:
                return None
            res = pickle.loads(b"".join(chunks))
            if not self.exp.join(res, self.out_part, self.spill_part):
                return None
            return res["n"], res["end"], res["newlines"]
        finally:
            self.close()

    def abandon(self) -> None:
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.pid = None
        self.close()

    def close(self) -> None:
        if self.rfd is not None:
            os.close(self.rfd)
            self.rfd = None
        self.out_part.close()
        self.spill_part.close()


def export_chrome_trace(capture_path: str | os.PathLike[str],
                        out_path: str | os.PathLike[str] | Output) -> dict[str, int]:
    """Write the trace (``out_path``: a path or a checked :class:`tpmtop.output.Output`; a
    regular file is replaced atomically); returns counts ``{"events", "ops", "derived_ops",
    "tracks"}``.

    Raises :class:`CaptureError` (exit 2) for an invalid capture or one without events."""
    from tpmtop.output import Output

    dest = out_path if isinstance(out_path, Output) else Output(out_path, inputs=[capture_path])
    dest.check()
    # Temporary files (spilled operations, the helper's part) go beside a file output, else
    # to the temporary directory; the helper's part is copied into the output by offset, so
    # only a regular file output is split.
    out_dir = (os.path.dirname(os.path.realpath(dest.path)) or ".") if dest.is_file else tempfile.gettempdir()
    derived = 0
    with dest.open() as out:
        exp = _Export(out, out_dir, prefix=b'{"displayTimeUnit":"ms","traceEvents":[\n')
        reader = CaptureReader(capture_path, on_event=exp.event_handler(), on_op=exp.op_handler())
        if dest.is_file:
            reader.on_events_start = exp.on_events_start
        try:
            doc = reader.read()
            if not reader.has_events or reader.n_events == 0:
                raise CaptureError(f"{os.fspath(capture_path)}: the capture has no events, so there is "
                                   f"nothing to put on a timeline; record one with "
                                   f"`tpmtop bench ... --json FILE --events`")
            for tid, st in exp.open_ops.items():
                exp.close_op(tid, st)
            exp.flush_spill()
            exp.spill.seek(0)
            for line in exp.spill:
                seq_b, _, slice_b = line.partition(b"\t")
                if exp.is_covered(int(seq_b)):
                    continue  # the "ops" array, read after these events, has this operation
                exp.w.add(slice_b.rstrip(b"\n").decode("utf-8"))
                derived += 1
        finally:
            if exp.helper is not None:
                exp.helper.abandon()  # no-op once joined; else (an error before the split) stop it
            exp.spill.close()
        add = exp.w.add
        tpm = doc.get("tpm", {})
        host = doc.get("host", {})
        pname = (f"TPM {tpm.get('manufacturer', '?')} fw {tpm.get('firmware', '?')}"
                 f"{' (simulated)' if tpm.get('simulated') else ''} on {host.get('hostname', '?')}")
        add(json.dumps({"name": "process_name", "ph": "M", "pid": PID, "args": {"name": pname}}))
        for tid, label in sorted(exp.track_names.items()):
            add(json.dumps({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": label}}))
            add(json.dumps({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                            "args": {"sort_index": tid}}))
        for m in doc.get("marks", ()):
            add(json.dumps({"name": m["text"], "ph": "i", "s": "g", "ts": m["t_ns"] / 1000, "pid": PID, "tid": 0}))
        exp.w.flush()
        other = {"schema": doc.get("schema"), "created": doc.get("created"), "tpm": tpm, "host": host,
                 "tool": doc.get("tool")}
        out.write(b'\n],\n"otherData":' + json.dumps(other).encode("utf-8") + b"}\n")
    return {"events": reader.n_events, "ops": exp.n_ops, "derived_ops": derived, "tracks": len(exp.tracks)}
