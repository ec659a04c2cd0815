"""Field-level decode: tpmtop's decoder against the two libraries it could have used, on a
10,000-command capture of real traffic. Prints the figures and the machine; not a test.

The capture: `tpmtop bench --sim --events` (both engines, all four modes; extend, get_random
and create_primary) plus the tpm2-tss integration-test pcaps that tpmstream ships (every
command tpm2-tss's test suite sends), cycled to N commands. For each decoder:

- coverage: pairs whose command and response decode without error (tpmtop: fully, no raw
  remainder);
- agreement: tpmtop against tpmstream (every leaf field, by path and value) and against
  tpm2-pytss (each parameter's bytes, re-marshalled by tpm2-pytss, equal to tpmtop's field);
- speed: the whole capture in one fresh process (tables loaded on first use included), and
  the p99 of a single pair's decode once warm (what Enter on a dashboard row costs), as wall
  time and as the decoding thread's CPU time (on a loaded machine the gap is time the core
  was given to others).

    .venv/bin/python benchmarks/decode.py [-n 10000] [--peer-sample 2000]

Last line: ``decode: <N> commands in <S> s, single p99 <P> ms``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from itertools import cycle, islice
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))  # tests.helpers.decode_peers
from machine import describe  # noqa: E402

TPMTOP = [sys.executable, "-m", "tpmtop"]


def corpus(ops_per_pair: int) -> list[tuple[bytes, bytes]]:
    from tpmstream.data import example_data_files
    from tpmstream.io.pcapng.marshal import tpm_pkgs_from_pcap_file

    from tpmtop.capture import load_capture

    pairs = []
    with tempfile.TemporaryDirectory() as d:
        for op in ("extend", "get_random", "create_primary"):
            cap = Path(d) / f"{op}.json"
            subprocess.run(TPMTOP + ["bench", "--sim", "--op", op, "-n", str(ops_per_pair), "--warmup", "0",
                                     "--events", "--json", str(cap), "-q"], check=True, capture_output=True,
                           timeout=3600, cwd=ROOT)
            pairs += [(bytes.fromhex(e["command_hex"]), bytes.fromhex(e["response_hex"]))
                      for e in load_capture(cap)["events"] if isinstance(e.get("response_hex"), str)]
    for f in example_data_files:
        with open(f, "rb") as fp:
            blobs = list(tpm_pkgs_from_pcap_file(fp))
        pairs += [(blobs[i], blobs[i + 1]) for i in range(0, len(blobs) - 1, 2)]
    return pairs


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def run_tpmstream(pairs):
    from tests.helpers.decode_peers import tpmstream_fields
    from tpmtop import decode

    ok = agree = 0
    times = []
    for c, r in pairs:
        d = decode.decode(c, r)
        enc = any(s.find(f"{s.path}.sessionAttributes").value & 0x40 for s in d.command.sessions)
        t = time.perf_counter()
        try:
            theirs_c, wc = tpmstream_fields(c)
            theirs_r, wr = tpmstream_fields(r, d.command.cc, enc)
        except Exception:
            times.append(time.perf_counter() - t)
            continue
        times.append(time.perf_counter() - t)
        ok += not wc and not wr
        from tests.helpers.decode_peers import tpmtop_fields

        agree += theirs_c == tpmtop_fields(d.command) and theirs_r == tpmtop_fields(d.response)
    return ok, agree, times


def run_pytss(pairs):
    import io

    from tpm2_pytss.command_parser import read_command, read_response

    from tpmtop import decode

    ok = params = params_agree = 0
    times = []
    for c, r in pairs:
        t = time.perf_counter()
        try:
            pc = read_command(io.BytesIO(c))
            pr = read_response(io.BytesIO(r), pc.command_code)
        except Exception:
            times.append(time.perf_counter() - t)
            continue
        times.append(time.perf_counter() - t)
        ok += 1
        d = decode.decode(c, r)
        for mine, theirs, buf in ((d.command, pc.parameters, c), (d.response, pr.parameters, r)):
            for f, v in zip(mine.parameters, theirs, strict=False):
                params += 1
                try:
                    b = v.marshal() if hasattr(v, "marshal") else bytes(v)
                except Exception:
                    continue
                params_agree += b == buf[f.offset:f.offset + f.size]
    return ok, params, params_agree, times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10_000, help="commands in the capture (default 10,000)")
    ap.add_argument("--ops", type=int, default=150, help="bench operations per (engine, mode) per op (default 150)")
    ap.add_argument("--peer-sample", type=int, default=2000, help="pairs the library decoders are timed on")
    args = ap.parse_args()

    pairs = corpus(args.ops)
    distinct = len({c[6:10] for c, _ in pairs})
    pairs = list(islice(cycle(pairs), args.n))
    print(f"machine: {describe()}")
    print(f"capture: {len(pairs)} commands with their responses, {distinct} distinct command codes "
          "(tpmtop bench --sim --events, all modes and engines, + tpm2-tss's integration pcaps)")

    # tpmtop, cold: a fresh process decodes the whole capture (the tables load on first use)
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "pairs.hex"
        f.write_text("\n".join(f"{c.hex()} {r.hex()}" for c, r in pairs))
        code = ("import sys,time;t=time.perf_counter();from tpmtop import decode;"
                "ps=[l.split() for l in open(sys.argv[1])];"
                "n=sum(decode.decode(bytes.fromhex(a),bytes.fromhex(b)).complete for a,b in ps);"
                "print(n,time.perf_counter()-t)")
        out = subprocess.run([sys.executable, "-c", code, str(f)], check=True, capture_output=True, text=True,
                             cwd=ROOT).stdout.split()
    complete, whole_s = int(out[0]), float(out[1])

    from tpmtop import decode

    for c, r in pairs[:200]:  # warm, as a dashboard is after its first decode
        decode.decode(c, r)
    single, cpu = [], []
    for c, r in pairs:
        t, u = time.perf_counter(), time.thread_time()
        decode.decode(c, r)
        single.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - u)
    print(f"tpmtop (tpmstream's tables, slice walker): {complete}/{len(pairs)} pairs decoded fully; "
          f"whole capture {whole_s:.2f} s in a fresh process (import and table loading included); "
          f"single pair warm p50 {pct(single, .5) * 1e3:.3f} ms, p99 {pct(single, .99) * 1e3:.3f} ms, "
          f"max {max(single) * 1e3:.1f} ms; CPU time of the decoding thread p50 {pct(cpu, .5) * 1e3:.3f} ms, "
          f"p99 {pct(cpu, .99) * 1e3:.3f} ms (wall minus CPU: time the loaded machine took the core away)")

    sample = pairs[:args.peer_sample]
    ok, agree, times = run_tpmstream(sample)
    print(f"tpmstream 0.1.10 decoder (byte-at-a-time coroutines): {ok}/{len(sample)} pairs without a warning; "
          f"tpmtop agrees field by field on {agree}/{len(sample)}; "
          f"per pair p50 {pct(times, .5) * 1e3:.2f} ms, p99 {pct(times, .99) * 1e3:.2f} ms "
          f"(~{sum(times) / len(sample) * len(pairs):.0f} s for the whole capture)")
    ok, params, params_agree, times = run_pytss(sample)
    print(f"tpm2-pytss command_parser: {ok}/{len(sample)} pairs without an error (no field names below the "
          f"parameter, no offsets); {params_agree}/{params} parameters byte-identical to tpmtop's fields; "
          f"per pair p50 {pct(times, .5) * 1e3:.2f} ms, p99 {pct(times, .99) * 1e3:.2f} ms")
    print(f"decode: {len(pairs)} commands in {whole_s:.2f} s, single p99 {pct(single, .99) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
