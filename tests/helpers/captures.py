"""Captures the tests build: documents written in the test (from the sample capture or from
scratch), `tpmtop kernel --from-trace` of a trace, and the bench captures every room reads,
made once per test session by the ``bench_captures`` fixture (tests/conftest.py).

A bench capture is ``tpmtop bench --sim ... --json`` as a user runs it, made the first time a
test asks for its kind; ``BenchCaptures.copy`` hands each test its own copy, so a test may
change what it got without the next one seeing it. Under pytest-xdist the workers share one
set: the first worker to need a kind makes it, under a lock, the others read it."""

from __future__ import annotations

import copy
import fcntl
import json
import random
import shutil
import subprocess
from pathlib import Path

from tests.helpers.paths import SAMPLE_CAPTURE
from tests.helpers.processes import TPMTOP, run_tpmtop
from tpmtop.capture import load_capture, write_capture
from tpmtop.stats import LatencyHistogram

SAMPLE = SAMPLE_CAPTURE

# -- bench captures, one of each kind per session -----------------------------------------------

# kind -> the `tpmtop bench --sim` arguments that make it (--json FILE -q is added). A test
# asks for a kind by name; a new kind is a new line here.
BENCH_KINDS: dict[str, tuple[str, ...]] = {
    # both engines, extend, none and reuse: schema, compare and both exports read it back
    "extend-none-reuse": ("--op", "extend", "--modes", "none,reuse", "-n", "20", "--events"),
    # a reuse run with warm-up: its kept session's set-up and clean-up are in the events
    "reuse-warmup": ("--modes", "reuse", "--engine", "native", "-n", "4", "--warmup", "2", "--events"),
    # GetRandom in an encrypting session: decode's plaintext view of the response
    "get-random-reuse": ("--op", "get_random", "--modes", "reuse", "--engine", "native", "-n", "2",
                         "--warmup", "0", "--events"),
    # a StartAuthSession per operation: the session-churn pattern
    "per-command": ("--op", "extend", "--modes", "per-command", "--engine", "native", "-n", "12",
                    "--warmup", "0", "--events"),
    # none and per-command, for the pcapng export tshark dissects
    "none-per-command": ("--op", "extend", "--modes", "none,per-command", "--engine", "native", "-n", "10",
                         "--events"),
    # every mode under the slb9670 chip profile: the published figures, profile from-capture
    "slb9670": ("--profile", "slb9670", "--op", "extend", "--modes", "none,per-command,reuse,saved",
                "--engine", "native", "-n", "3", "--warmup", "0", "--events"),
}


class BenchCaptures:
    """The session's bench captures, in *where* (shared by the xdist workers of one run)."""

    def __init__(self, where: Path):
        self.where = where

    def path(self, kind: str) -> Path:
        """The shared capture of *kind*, made if no worker has made it yet. Read it, never
        write it: ``copy`` is for a test that changes what it got."""
        args = BENCH_KINDS[kind]  # a KeyError names a kind nobody defined
        out = self.where / f"{kind}.json"
        with open(self.where / f"{kind}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one maker; the others wait for its file
            if not out.exists():
                part = self.where / f"{kind}.part.json"
                r = run_tpmtop("bench", "--sim", *args, "--json", str(part), "-q", timeout=300)
                assert r.returncode == 0, f"bench capture {kind!r}: {r.stderr}"
                part.rename(out)  # whole or not at all, should a maker die half-way
        return out

    def copy(self, kind: str, dest: Path) -> Path:
        """A private copy of the capture of *kind* in the directory *dest*."""
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copyfile(self.path(kind), dest / f"{kind}.json"))


# -- documents built in the test ----------------------------------------------------------------

def capture_doc(runs):
    return {"schema": "tpmtop.capture/1", "created": "2025-01-01T00:00:00Z", "tool": {"version": "0.1.0"},
            "host": {"hostname": "h", "kernel": "6.12.9"},
            "tpm": {"manufacturer": "IBM", "vendor": "SW   TPM", "firmware": "1.2.3.4", "tcti": "swtpm:",
                    "simulated": True},
            "runs": runs}


def summary(samples_ns: list[int]) -> dict:
    h = LatencyHistogram()
    for v in samples_ns:
        h.record(v)
    return {**h.summary(), "histogram": h.buckets()}


def lognormal(n: int, median_us: float, seed: int, sigma: float = 0.3) -> list[int]:
    rng = random.Random(seed)
    return [int(median_us * 1000 * rng.lognormvariate(0, sigma)) for _ in range(n)]


def capture_pair(tmp_path):
    """A baseline and a copy where 'reuse' got 2x slower and its PCR_Extend 3x."""
    a = load_capture(SAMPLE)
    b = copy.deepcopy(a)
    for r in b["runs"]:
        if r["mode"] == "reuse":
            r["op_us"] = summary([int(x * 2) for x in lognormal(30, r["op_us"]["p50"] / 2 * 2, 9, 0.05)])
            extend = r["commands"]["TPM2_CC_PCR_Extend"]
            r["commands"]["TPM2_CC_PCR_Extend"] = summary(lognormal(30, extend["p50"] * 3, 9, 0.05))
    b["host"]["kernel"] = "6.10.0"
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    write_capture(pa, a)
    write_capture(pb, b)
    return a, b, pa, pb


# the splitting chrome-trace export's synthetic capture
MODES = ("none", "per-command", "reuse")


def make_capture(path: Path, n_ops: int = 120, with_ops: bool = True, modes_from: int = 0,
                 late_mode: str | None = None) -> Path:
    """Operations of 1–3 commands each, cycling through MODES (from the op ``modes_from`` on:
    before it all are "none"); ``late_mode`` for the last quarter; every 25th fails."""
    head = {k: v for k, v in json.loads(SAMPLE.read_text()).items() if k not in ("ops", "events", "marks")}
    events, ops = [], []
    t = 0
    for seq in range(1, n_ops + 1):
        mode = MODES[seq % 3] if seq >= modes_from else "none"
        if late_mode and seq > n_ops * 3 // 4:
            mode = late_mode
        t0, wire = t, 0
        for j in range(1 + seq % 3):
            w = 100_000 + 7 * seq + j
            t += 5_000
            events.append({"t_ns": t, "command": "TPM2_CC_PCR_Extend", "handles": ["0x00000010"],
                           "sessions": [{"handle": "0x02000000", "attrs": 1}],
                           "rc": 0x98e if seq % 25 == 0 and j == 0 else 0, "rc_text": "50% done" if j == 2 else "ok",
                           "wire_ns": w, "origin": "workload", "engine": "native", "mode": mode,
                           "op": "extend", "op_seq": seq})
            t += w
            wire += w
        t += 30_000
        ops.append({"op_seq": seq, "engine": "native", "mode": mode, "op": "extend", "t_ns": t0,
                    "total_ns": t - t0, "wire_ns": wire, "ok": seq % 25 != 0})
    events.append({"t_ns": t + 10, "command": "TPM2_CC_GetCapability", "handles": [], "sessions": [],
                   "rc": 0, "rc_text": "success", "wire_ns": 50_000, "origin": "poll", "engine": None,
                   "mode": None, "op": None, "op_seq": None})
    cap = {**head, "events": events}
    if with_ops:
        cap["ops"] = ops
    write_capture(path, cap)
    return path


# Window title (OSC 0), clear screen (CSI 2 J), an 8-bit CSI (C1 0x9b), a bidi override.
EVIL = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202e"


def write_evil_capture(tmp_path: Path, names: bool) -> Path:
    """The sample capture with EVIL (terminal controls) in every string a user sees."""
    doc = json.loads(SAMPLE.read_text())
    doc["tpm"]["manufacturer"] = "IBM" + EVIL
    doc["tpm"]["vendor"] = EVIL
    doc["host"]["kernel"] = "6.12" + EVIL
    doc["host"]["hostname"] = EVIL
    if names:  # command names no TPM knows: fine for compare and replay, not for a profile
        for r in doc["runs"]:
            r["engine"] = "native" + EVIL[:8]
            cmds = r["commands"]
            cmds["TPM2_CC_PCR_Extend" + EVIL] = cmds.pop(next(iter(cmds)))
        for e in doc["events"]:
            e["command"] += EVIL
    p = tmp_path / "evil.json"
    p.write_text(json.dumps(doc, ensure_ascii=False))
    return p


def capture_of(trace: Path, tmp_path: Path) -> dict:
    """`tpmtop kernel --from-trace` of the same traffic: what the exporter must agree with."""
    out = tmp_path / f"{trace.stem}.json"
    r = subprocess.run(TPMTOP + ["kernel", "--from-trace", str(trace), "--json", str(out), "-q"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())
