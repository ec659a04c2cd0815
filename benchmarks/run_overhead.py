#!/usr/bin/env python3
"""What ``tpmtop run -- SCRIPT`` costs over running SCRIPT directly.

    .venv/bin/python benchmarks/run_overhead.py [--rounds 8] [--baseline DIR] [--keep-output]

One private swtpm on loopback TCP. SCRIPT is a shell script of tpm2-tools commands, the
kinds an integration test runs (random, PCRs, a primary key and a child key, sign and verify,
an NV index, a policy session, flushes, GetCapability, one command expected to fail): a
process per tool, a TCP connection per command (tpm2-tss's swtpm TCTI). Every round runs, in a rotating order:

  direct   SCRIPT with TPM2TOOLS_TCTI pointed at the swtpm;
  run      ``tpmtop run -T swtpm:… -- sh SCRIPT`` (tpmtop's start-up, its private proxy in
           front of the same swtpm, the report at the end);
  (with --baseline DIR, the same ``tpmtop run`` from another checkout, for a before/after).

The script leaves the TPM as it found it (flushes what it loads, undefines its NV index), so
the rounds are alike. Prints each variant's wall time (median, best, worst over the rounds),
the per-command share, and last ``run: x<R> over the script run directly`` (target ≤ x1.5).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # tests.helpers (the private swtpm)

from machine import describe  # noqa: E402 - benchmarks/machine.py

# PCR 16 (debug) only; NV index in the owner range, removed at the end. Transient objects are
# flushed after each step that leaves one loaded (tpm2-tools over a TCTI with no resource
# manager leaves them, and the swtpm has 3 slots).
SCRIPT = r"""set -e
tpm2_getrandom --hex 16 >/dev/null
tpm2_pcrread sha256:16 >/dev/null
tpm2_pcrextend 16:sha256=0000000000000000000000000000000000000000000000000000000000000001
tpm2_createprimary -Q -C o -G ecc -c primary.ctx
tpm2_create -Q -C primary.ctx -G ecc -u key.pub -r key.priv
tpm2_flushcontext -t
tpm2_load -Q -C primary.ctx -u key.pub -r key.priv -c key.ctx
echo 'tpmtop run overhead' > msg
tpm2_flushcontext -t
tpm2_sign -Q -c key.ctx -g sha256 -o sig msg
tpm2_flushcontext -t
tpm2_verifysignature -Q -c key.ctx -g sha256 -m msg -s sig
tpm2_flushcontext -t
tpm2_readpublic -Q -c key.ctx
tpm2_flushcontext -t
tpm2_nvdefine -Q 0x1500016 -C o -s 32 -a "ownerread|ownerwrite"
tpm2_nvwrite -Q 0x1500016 -C o -i msg
tpm2_nvread -Q 0x1500016 -C o -s 20 >/dev/null
tpm2_nvundefine -Q 0x1500016 -C o
tpm2_startauthsession -Q --policy-session -S session.ctx
tpm2_policypcr -Q -S session.ctx -l sha256:16
tpm2_flushcontext session.ctx
tpm2_getcap properties-variable >/dev/null
if tpm2_readpublic -Q -c 0x81000099 2>/dev/null; then exit 1; fi  # a test that expects a failure
tpm2_flushcontext -t
tpm2_flushcontext -s
"""
TOOLS_IN_SCRIPT = sum(1 for ln in SCRIPT.splitlines() if ln.startswith(("tpm2_", "if tpm2_")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--baseline", metavar="DIR", help="also `tpmtop run` from another checkout, in the same rounds")
    ap.add_argument("--keep-output", action="store_true", help="print tpmtop run's report of the last round")
    a = ap.parse_args()
    if not shutil.which("tpm2_createprimary"):
        print("tpm2-tools are not installed", file=sys.stderr)
        return 2
    from tests.helpers.processes import TcpSwtpm

    sw = TcpSwtpm()
    work = Path(tempfile.mkdtemp(prefix="tpmtop-run-overhead-"))
    (work / "t.sh").write_text(SCRIPT)
    env = dict(os.environ, TSS2_LOG="all+NONE", TPM2TOOLS_TCTI=sw.tcti)
    env.pop("TSS2_TCTI", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: byte-compiled once (the warm-up run), not every round
    variants: dict[str, tuple[list[str], Path]] = {
        "direct": (["sh", "t.sh"], HERE.parent),
        "run": ([sys.executable, "-m", "tpmtop", "run", "-T", sw.tcti, "--", "sh", "t.sh"], HERE.parent)}
    # the same run with the mssim protocol: one connection per tool instead of one per command
    variants["run --protocol mssim"] = ([sys.executable, "-m", "tpmtop", "run", "-T", sw.tcti, "--protocol", "mssim",
                                         "--", "sh", "t.sh"], HERE.parent)
    if a.baseline:
        variants["run (baseline)"] = (variants["run"][0], Path(a.baseline).resolve())
    walls: dict[str, list[float]] = {name: [] for name in variants}
    last_report = ""

    def once(name: str) -> float:
        nonlocal last_report
        cmd, src = variants[name]
        t = time.perf_counter()
        r = subprocess.run(cmd, cwd=work, env=dict(env, PYTHONPATH=str(src)), capture_output=True, text=True)
        dt = time.perf_counter() - t
        if r.returncode != 0:
            raise SystemExit(f"{name} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        if name == "run":
            last_report = r.stderr
        return dt

    try:
        names = list(variants)
        once("direct")
        once("run")  # byte-compiles whatever is stale, outside the rounds
        for r in range(a.rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                walls[name].append(once(name))
    finally:
        sw.stop()
        shutil.rmtree(work, ignore_errors=True)
    ms = 1000.0
    print(f"machine: {describe()}")
    print(f"{a.rounds} rounds of a script of {TOOLS_IN_SCRIPT} tpm2-tools commands; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    print(f"{'variant':<22}{'wall p50':>10}{'best':>9}{'worst':>9}{'per tool':>10}   ms   ratio")
    direct = statistics.median(walls["direct"])
    for name, xs in walls.items():
        p50 = statistics.median(xs)
        print(f"{name:<22}{p50 * ms:>10.1f}{min(xs) * ms:>9.1f}{max(xs) * ms:>9.1f}"
              f"{p50 * ms / TOOLS_IN_SCRIPT:>10.1f}        x{p50 / direct:.2f}")
    if a.keep_output:
        print(last_report, end="")
    ratio = statistics.median(walls["run"]) / direct
    print(f"run: x{ratio:.2f} over the script run directly (target ≤ x1.5)")
    return 0 if ratio <= 1.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
