"""Trace import benchmark: a ~100 MB ftrace function_graph through `tpmtop boot --trace`
(target: under 20 s and under 200 MB peak RSS on a 2-core machine).

    .venv/bin/python benchmarks/trace_import.py [--mb 100] [--dir /tmp] [--keep]

Writes a synthetic function_graph trace built from the shapes of the shared fixtures
(tests/fixtures/traces/ftrace-graph-extend-{hmac,nohmac}-slb9670.txt: an HMAC-protected
tpm2_pcr_extend with its session setup, and an unprotected one) interleaved with ordinary
kernel calls around them, on 2 CPUs, with the TIME and TASK/PID columns (funcgraph-abstime,
funcgraph-proc) as `trace-cmd`/tracefs write them; every 50th extend migrates CPU between
its entry and its exit. Then runs `python -m tpmtop boot --trace FILE --json` as a separate
process and reports its wall time (process start to exit) and peak RSS (wait4's ru_maxrss).
Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import describe, measured

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
TARGET_S = 20.0
TARGET_MB = 200

# (depth, kind, name, µs): kind "{" entry, "}" exit, ";" leaf. µs None for entries.
HMAC_EXTEND = [
    (0, "{", "tpm2_pcr_extend", None),
    (1, "{", "tpm2_start_auth_session", None),
    (2, ";", "tpm_transmit_cmd", 36976.99),
    (2, ";", "tpm_transmit_cmd", 84746.51),
    (2, ";", "tpm_transmit_cmd", 3195.083),
    (1, "}", "tpm2_start_auth_session", 126795.1),
    (1, ";", "tpm_buf_append_hmac_session", 2.254),
    (1, ";", "tpm_buf_fill_hmac_session", 3.546),
    (1, ";", "tpm_transmit_cmd", 24356.46),
    (1, ";", "tpm_buf_check_hmac_response", 3.496),
    (0, "}", "tpm2_pcr_extend", 151171.0),
]
PLAIN_EXTEND = [
    (0, "{", "tpm2_pcr_extend", None),
    (1, ";", "tpm_buf_append_hmac_session", 1.112),
    (1, ";", "tpm_transmit_cmd", 6360.029),
    (0, "}", "tpm2_pcr_extend", 6415.012),
]
FILLER = [
    (0, "{", "ima_add_template_entry", None),
    (1, ";", "__kmalloc", 0.841),
    (1, "{", "ima_calc_field_array_hash", None),
    (2, ";", "crypto_shash_update", 1.203),
    (2, ";", "crypto_shash_final", 0.977),
    (1, "}", "ima_calc_field_array_hash", 3.512),
    (1, ";", "mutex_lock", 0.118),
    (1, ";", "mutex_unlock", 0.092),
    (0, "}", "ima_add_template_entry", 5.877),
]


def _mark(us: float) -> str:
    for limit, mark in ((1_000_000, "$"), (100_000, "@"), (10_000, "*"), (1_000, "#"), (100, "!"), (10, "+")):
        if us > limit:
            return mark
    return " "


def _row(t: float, cpu: int, task: str, depth: int, kind: str, name: str, us: float | None) -> str:
    dur = " " * 14 if us is None else f"{_mark(us)} {us:.3f} us".rjust(14)
    func = {"{": f"{name}() {{", ";": f"{name}();", "}": f"}} /* {name} */"}[kind]
    return f"{t:12.6f} | {cpu:>2})  {task:>12} | {dur} |  {'  ' * depth}{func}\n"


def write_trace(path: str, target_bytes: int, seed: int = 1) -> dict:
    rng = random.Random(seed)
    t = 1.0
    written = 0
    extends = migrated = 0
    with open(path, "w") as f:
        f.write("# tracer: function_graph\n#\n"
                "#     TIME        CPU  TASK/PID         DURATION                  FUNCTION CALLS\n"
                "#      |          |    |    |           |   |                     |   |   |   |\n")
        while written < target_bytes:
            task = f"systemd-{rng.randint(1, 9999)}"
            cpu = rng.randint(0, 1)
            block = HMAC_EXTEND if extends % 2 == 0 else PLAIN_EXTEND
            extends += 1
            move = extends % 50 == 0
            lines = []
            for _ in range(rng.randint(2, 6)):
                lines += [_row(t := t + 0.000002, cpu, task, *r) for r in FILLER]
            for i, r in enumerate(block):
                if move and i == len(block) - 1:
                    cpu = 1 - cpu  # the scheduler moved the task: its exit is under the other CPU
                    migrated += 1
                lines.append(_row(t := t + (r[3] or 1) / 1e6, cpu, task, *r))
            chunk = "".join(lines)
            f.write(chunk)
            written += len(chunk)
    return {"bytes": os.path.getsize(path), "extends": extends, "migrated": migrated}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=100.0, help="trace size in MB (default 100)")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--keep", action="store_true", help="keep the generated trace")
    a = ap.parse_args()
    path = os.path.join(a.dir, f"tpmtop-bench-trace-{os.getpid()}.txt")
    print(f"machine: {describe()}")
    try:
        info = write_trace(path, int(a.mb * 1e6))
        print(f"trace: {info['bytes'] / 1e6:.1f} MB, {info['extends']:,} extends "
              f"({info['migrated']:,} migrate CPU)")
        root = os.path.join(ROOT, "tests", "fixtures", "boot", "vm-no-tpm")
        cmd = [sys.executable, "-m", "tpmtop", "boot", "--root", root, "--trace", path, "--json"]
        m = measured(cmd, cwd=ROOT)
        if m.code != 0:
            print(f"tpmtop boot failed (exit {m.code}): {m.stderr}")
            return 1
        wall, rss_mb = m.wall_s, m.rss_mb
        ok_t, ok_m = wall < TARGET_S, rss_mb < TARGET_MB
        print(f"tpmtop boot --trace: {wall:.1f} s (target < {TARGET_S:.0f} s: {'ok' if ok_t else 'MISSED'}), "
              f"peak RSS {rss_mb:.0f} MB (target < {TARGET_MB} MB: {'ok' if ok_m else 'MISSED'}), "
              f"{info['bytes'] / 1e6 / wall:.1f} MB/s")
        return 0 if ok_t and ok_m else 1
    finally:
        if not a.keep and os.path.exists(path):
            os.unlink(path)
        elif a.keep:
            print(f"kept {path}")


if __name__ == "__main__":
    sys.exit(main())
