"""Proxy benchmark: what `tpmtop proxy` adds to each TPM command a program sends.

    .venv/bin/python benchmarks/proxy.py [--rounds 400] [--blocks 8]

An ESAPI client (tpm2-pytss through tpm2-tss's own TCTIs, as any program would) issues
GetRandom(16) and PCR_Extend(PCR 16) interleaved, against one swtpm:
  direct  — swtpm: TCTI straight to the swtpm's TCP port
  proxied — swtpm: TCTI to `tpmtop proxy` in front of that swtpm (same protocol, so the
            difference is the proxy: accept, attribute, forward through the instrumented
            transport, account)
  mssim   — mssim: TCTI to `tpmtop proxy --protocol mssim` (one connection per context;
            no direct figure: swtpm does not speak mssim)
Blocks alternate direct/proxied so that the machine's noise hits both alike. Latency is the
client's: wall time around each ESAPI call. Last line: `proxy: +<X> µs per command (p50)`,
X = mssim-through-the-proxy minus swtpm-direct: what a program pays per command for being
watched, with the TCTI that suits a proxy (the swtpm: TCTI's per-command reconnect costs
more through any proxy; that figure is printed on the line before).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from machine import describe  # noqa: E402 - benchmarks/machine.py

TARGET_US = 60.0


def free_pair() -> int:
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise SystemExit("no free port pair")


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def measure(tcti: str, rounds: int) -> list[int]:
    from tpm2_pytss import ESAPI, TCTILdr
    from tpm2_pytss.constants import ESYS_TR, TPM2_ALG
    from tpm2_pytss.types import TPML_DIGEST_VALUES, TPMT_HA

    name, _, conf = tcti.partition(":")
    ctx = TCTILdr(name, conf)
    esys = ESAPI(ctx)
    ha = TPMT_HA(hashAlg=TPM2_ALG.SHA256)
    ha.digest.sha256 = b"\x01" * 32
    digests = TPML_DIGEST_VALUES([ha])
    out = []
    try:
        esys.get_random(16)  # warm: first call pays the library's look-ups
        for _ in range(rounds):
            t = time.perf_counter_ns()
            esys.get_random(16)
            out.append(time.perf_counter_ns() - t)
            t = time.perf_counter_ns()
            esys.pcr_extend(ESYS_TR.PCR16, digests, session1=ESYS_TR.PASSWORD)
            out.append(time.perf_counter_ns() - t)
    finally:
        esys.close()
        ctx.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=400, help="GetRandom+PCR_Extend pairs per block")
    ap.add_argument("--blocks", type=int, default=8, help="alternating direct/proxied blocks")
    a = ap.parse_args()
    os.environ.setdefault("TSS2_LOG", "all+NONE")
    if not shutil.which("swtpm"):
        raise SystemExit("swtpm is not installed")
    state = tempfile.mkdtemp(prefix="tpmtop-bench-proxy-")
    sw_port = free_pair()
    procs = []
    try:
        procs.append(subprocess.Popen(
            ["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={state}", "--server", f"type=tcp,port={sw_port}",
             "--ctrl", f"type=tcp,port={sw_port + 1}", "--flags", "not-need-init,startup-clear"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(sw_port)
        tpmtop = [sys.executable, "-m", "tpmtop", "proxy", "-T", f"swtpm:host=127.0.0.1,port={sw_port}"]

        def through_proxy(protocol: str, rounds: int) -> list[int]:
            # swtpm serves one connection at a time: the proxy holds it only for its blocks
            port = free_pair()
            px = subprocess.Popen(tpmtop + ["--port", str(port), "--protocol", protocol],
                                  cwd=os.path.join(HERE, ".."), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(px)
            try:
                wait_port(port)
                return measure(f"{protocol}:host=127.0.0.1,port={port}", rounds)
            finally:
                px.send_signal(signal.SIGTERM)
                px.wait(30)
                procs.remove(px)

        direct, proxied, mssim = [], [], []
        for b in range(a.blocks):
            steps = [lambda: direct.extend(measure(f"swtpm:host=127.0.0.1,port={sw_port}", a.rounds)),
                     lambda: proxied.extend(through_proxy("swtpm", a.rounds))]
            if b % 2:
                steps.reverse()
            for step in steps:
                step()
            mssim.extend(through_proxy("mssim", a.rounds // 2))
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(state, ignore_errors=True)

    def p(xs, q):
        return statistics.quantiles(xs, n=100)[q - 1] / 1000

    print(f"machine: {describe()}")
    print(f"{len(direct)} commands per path (GetRandom + PCR_Extend(16), interleaved), {a.blocks} alternating blocks")
    print(f"{'path':<34} {'p50 µs':>9} {'p99 µs':>9}")
    for label, xs in (("direct   (swtpm: TCTI → swtpm)", direct), ("proxied  (swtpm: TCTI → tpmtop proxy)", proxied),
                      ("proxied  (mssim: TCTI → tpmtop proxy)", mssim)):
        print(f"{label:<34} {statistics.median(xs) / 1000:9.1f} {p(xs, 99):9.1f}")
    d_swtpm = (statistics.median(proxied) - statistics.median(direct)) / 1000
    delta = (statistics.median(mssim) - statistics.median(direct)) / 1000
    print(f"swtpm: TCTI through the proxy: {d_swtpm:+.0f} µs per command (p50): that TCTI opens a TCP connection "
          "for every command, so each one also pays an accept and a peer look-up in the proxy")
    print(f"mssim: TCTI through the proxy (one connection per context) vs swtpm: TCTI direct: "
          f"target ≤ +{TARGET_US:.0f} µs: {'within' if delta <= TARGET_US else 'OVER'}")
    print(f"proxy: {delta:+.0f} µs per command (p50)")
    return 0 if delta <= TARGET_US else 1


if __name__ == "__main__":
    sys.exit(main())
