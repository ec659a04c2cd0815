"""Proxy benchmark: what `tpmtop proxy` adds to each TPM command a program sends.

    .venv/bin/python benchmarks/proxy.py [--rounds 400] [--blocks 8] [--baseline DIR] [--also-set busy_poll=on]

An ESAPI client (tpm2-pytss through tpm2-tss's own TCTIs, as any program would) issues
GetRandom(16) and PCR_Extend(PCR 16) interleaved, against one swtpm:
  direct  — swtpm: TCTI straight to the swtpm's TCP port
  proxied — swtpm: TCTI to `tpmtop proxy` in front of that swtpm (same protocol, so the
            difference is the proxy: accept, attribute, forward through the instrumented
            transport, account)
  mssim   — mssim: TCTI to `tpmtop proxy --protocol mssim` (one connection per context;
            no direct figure: swtpm does not speak mssim)
  abrmd   — tabrmd: TCTI to tpm2-abrmd, what a user would otherwise put in front of a TPM,
            started on a private D-Bus session bus (`dbus-daemon --session --fork`) with
            `--tcti=swtpm:` to the same swtpm (Debian packages tpm2-abrmd, dbus-daemon)
Every block runs each path once, in an order that rotates from block to block, so that the
machine's noise hits all alike. Latency is the client's: wall time around each ESAPI call.
  floor   — mssim: TCTI to benchmarks/floor_forwarder.py, a bare forwarder (one thread, epoll,
            no naming, recording or checks): what any user-space proxy's two extra hops cost
            on this machine, measured in the same blocks
Last line: `proxy: +<X> µs per command (abrmd +<Y> µs, bare forwarder +<F> µs)` (p50), X = mssim-through-the-proxy
minus swtpm-direct: what a program pays per command for being watched, with the TCTI that
suits a proxy (the swtpm: TCTI's per-command reconnect costs more through any proxy; that
figure is printed above it); Y = the same for tpm2-abrmd. Targets: X ≤ 40 and X < Y.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from machine import describe, end  # noqa: E402 - benchmarks/machine.py

from tests.helpers.processes import free_port_pair as free_pair  # noqa: E402 - the repository on the path above

TARGET_US = 40.0


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


class Abrmd:
    """tpm2-abrmd on a private D-Bus session bus, in front of the swtpm on ``port``."""

    def __init__(self, port: int):
        if not shutil.which("tpm2-abrmd") or not shutil.which("dbus-daemon"):
            raise SystemExit("tpm2-abrmd or dbus-daemon is not installed (scripts/bootstrap.sh --bench)")
        out = subprocess.run(["dbus-daemon", "--session", "--print-address=1", "--print-pid=1", "--fork"],
                             capture_output=True, text=True, check=True, timeout=30).stdout.split()
        self.address, self.bus_pid = out[0], int(out[1])
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=self.address)
        cmd = ["tpm2-abrmd", "--session", f"--tcti=swtpm:host=127.0.0.1,port={port}"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")  # it refuses root otherwise; this bus is private to the run
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.environ["DBUS_SESSION_BUS_ADDRESS"] = self.address  # for the tabrmd TCTI in this process
        from tpm2_pytss import TCTILdr

        deadline = time.monotonic() + 30
        while True:  # ready once it owns its name on the bus
            try:
                TCTILdr("tabrmd", "bus_type=session").close()
                return
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit("tpm2-abrmd did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            end(self.proc, 10)
        try:
            os.kill(self.bus_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _cpu_s(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        t = psutil.Process(pid).cpu_times()
        total += t.user + t.system
    return total


def cpu_per_client(server_pids: list[int], tcti: str, n: int) -> float:
    """CPU seconds the server processes spend per client *process*: ``n`` runs of
    ``tpm2_getrandom 8`` (each a new process: connect, identify, one command, leave), the
    servers' user+system time before and after."""
    env = dict(os.environ, TPM2TOOLS_TCTI=tcti, TSS2_LOG="all+NONE")
    subprocess.run(["tpm2_getrandom", "8"], env=env, check=True, capture_output=True, timeout=60)  # warm
    before = _cpu_s(server_pids)
    for _ in range(n):
        subprocess.run(["tpm2_getrandom", "8"], env=env, check=True, capture_output=True, timeout=60)
    return (_cpu_s(server_pids) - before) / n


def run_phases(a: argparse.Namespace, sw_port: int) -> dict[str, dict[str, float]]:
    """Issue 50's phases (proxy_phases.py), each with a proxy of its own in front of the swtpm."""
    import json

    script = os.path.join(HERE, "proxy_phases.py")
    n = max(a.clients, 20)
    out: dict[str, dict[str, float]] = {}
    runs = [(phase, None) for phase in filter(None, a.phases.split(","))]
    runs += [(phase + " " + src, src) for phase, _ in list(runs) for src in a.baseline]
    for key, src in runs:
        phase = key.split()[0]
        if phase == "wrap":
            if os.geteuid() != 0 or not shutil.which("unshare"):
                print("wrap phase skipped: it needs root and unshare (a private pid namespace)")
                continue
            argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, script, "wrap", str(sw_port), str(n)]
        elif phase == "flood":
            argv = [sys.executable, script, "flood", str(sw_port), str(max(n // 4, 20)), str(a.flood_rate)]
        else:
            raise SystemExit(f"--phases: unknown phase {phase!r} (wrap, flood)")
        env = dict(os.environ, BENCH_PROXY_SRC=os.path.abspath(src)) if src else None
        r = subprocess.run(argv, capture_output=True, text=True, timeout=3600, env=env)
        if r.returncode != 0:
            raise SystemExit(f"phase {key} failed: {r.stderr.strip()[-500:]}")
        out[key] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def print_phases(phases: dict[str, dict[str, float]], abrmd_s: float | None) -> None:
    for key in sorted(phases):
        print_phase(key, phases[key], abrmd_s)


def print_phase(key: str, x: dict[str, float], abrmd_s: float | None) -> None:
    phase, _, src = key.partition(" ")
    who = f" [baseline {os.path.basename(os.path.abspath(src))}]" if src else ""
    w = x if phase == "wrap" else None
    if w:
        ratio = w["after_ms"] / w["before_ms"]
        blocks = f", {w['blocks']:.0f} blocks of {w['per_block']:.0f} each" if "blocks" in w else ""
        line = (f"pid wrap{who} (mssim: TCTI, private pid namespace, pid_max {w['pid_max']:.0f}{blocks}): CPU per "
                f"client {w['before_ms']:.2f} ms before, {w['after_ms']:.2f} ms after (x{ratio:.2f}; target ≤ x1.2: "
                f"{'within' if ratio <= 1.2 else 'OVER'})")
        print(line)
        # abrmd's from the phase's own blocks where it has them (the same minutes), else the run's
        ab = w["abrmd_ms"] if "abrmd_ms" in w else (abrmd_s * 1e3 if abrmd_s else None)
        if ab:
            where = "in the same blocks" if "abrmd_ms" in w else "earlier in the run"
            print(f"  after the wrap: x{w['after_ms'] / ab:.2f} of abrmd+dbus's {ab:.2f} ms, {where} (target ≤ "
                  f"x0.5: {'within' if w['after_ms'] <= ab / 2 else 'OVER'})")
    f = x if phase == "flood" else None
    if f:
        ratio = f["flood_p50_ms"] / f["idle_p50_ms"]
        print(f"flood{who} ({f['rate']:g} connect-send-close a second): bystander tpm2_getrandom p50 "
              f"{f['idle_p50_ms']:.1f} ms idle, {f['flood_p50_ms']:.1f} ms under the flood (x{ratio:.2f}; "
              f"target ≤ x3: {'within' if ratio <= 3 else 'OVER'}); proxy CPU {f['proxy_cpu_share'] * 100:.0f} % "
              "of a core meanwhile")


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
    ap.add_argument("--blocks", type=int, default=8, help="blocks; each runs every path once, in a rotating order")
    ap.add_argument("--clients", type=int, default=300,
                    help="tpm2_getrandom processes for the CPU-per-client figures (0: skip them)")
    ap.add_argument("--phases", default="wrap,flood",
                    help="issue 50's phases, comma-separated ('' to skip): wrap (CPU per client before and after "
                         "the pid counter wraps, in a private pid namespace: root and unshare), flood (a bystander's "
                         "tpm2_getrandom idle and under a connect-and-close flood); see proxy_phases.py")
    ap.add_argument("--flood-rate", type=float, default=100.0, help="flood connections a second")
    ap.add_argument("--baseline", metavar="DIR", action="append", default=[],
                    help="also the mssim and swtpm paths through a proxy run from another checkout of tpmtop "
                         "(a before/after in one run, e.g. from `git archive <commit> | tar -x -C DIR`); repeatable")
    ap.add_argument("--also-set", metavar="NAME=VALUE", action="append", default=[],
                    help="also the mssim path through a proxy run with this setting (TPMTOP_NAME=VALUE, e.g. "
                         "busy_poll=on): a knob's effect on the per-command figure, in the same run; repeatable")
    a = ap.parse_args()
    os.environ.setdefault("TSS2_LOG", "all+NONE")
    if not shutil.which("swtpm"):
        raise SystemExit("swtpm is not installed")
    state = tempfile.mkdtemp(prefix="tpmtop-bench-proxy-")
    sw_port = free_pair()
    procs = []
    abrmd = None
    try:
        procs.append(subprocess.Popen(
            ["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={state}", "--server", f"type=tcp,port={sw_port}",
             "--ctrl", f"type=tcp,port={sw_port + 1}", "--flags", "not-need-init,startup-clear"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(sw_port)
        abrmd = Abrmd(sw_port)
        tpmtop = [sys.executable, "-m", "tpmtop", "proxy", "-T", f"swtpm:host=127.0.0.1,port={sw_port}"]

        def through(argv: list[str], port: int, tcti: str, rounds: int, **popen: Any) -> list[int]:
            """``rounds`` measured through a server started for them (``argv``, listening on
            ``port``) and stopped after: swtpm serves one connection at a time, so a proxy holds
            it only for its blocks (tpm2-abrmd's swtpm: TCTI connects for each command, so it can
            stay up throughout)."""
            px = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **popen)
            procs.append(px)
            try:
                wait_port(port)
                return measure(f"{tcti}:host=127.0.0.1,port={port}", rounds)
            finally:
                px.send_signal(signal.SIGTERM)
                px.wait(30)
                procs.remove(px)

        def through_proxy(protocol: str, rounds: int, src: str = os.path.join(HERE, ".."),
                          knob: str | None = None) -> list[int]:
            port = free_pair()
            env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
            if knob:
                name, _, value = knob.partition("=")
                env["TPMTOP_" + name.upper()] = value
            return through(tpmtop + ["--port", str(port), "--protocol", protocol], port, protocol, rounds,
                           cwd=src, env=env)

        def through_floor(rounds: int) -> list[int]:
            # the floor: a bare forwarder, mssim in, swtpm out (floor_forwarder.py)
            port = free_pair()
            return through([sys.executable, os.path.join(HERE, "floor_forwarder.py"), str(port), str(sw_port)],
                           port, "mssim", rounds)

        paths = {"direct": [], "proxied": [], "mssim": [], "abrmd": [], "floor": []}
        steps = [("direct", lambda: measure(f"swtpm:host=127.0.0.1,port={sw_port}", a.rounds)),
                 ("floor", lambda: through_floor(a.rounds)),
                 ("proxied", lambda: through_proxy("swtpm", a.rounds)),
                 ("mssim", lambda: through_proxy("mssim", a.rounds)),
                 ("abrmd", lambda: measure("tabrmd:bus_type=session", a.rounds))]
        for knob in a.also_set:
            paths["set " + knob] = []
            steps.append(("set " + knob, functools.partial(through_proxy, "mssim", a.rounds, knob=knob)))
        for src in a.baseline:
            paths[src] = []
            paths[src + " swtpm"] = []
            steps.append((src, functools.partial(through_proxy, "mssim", a.rounds, src)))
            steps.append((src + " swtpm", functools.partial(through_proxy, "swtpm", a.rounds, src)))
        for b in range(a.blocks):
            for name, step in steps[b % len(steps):] + steps[:b % len(steps)]:
                paths[name].extend(step())
        cpu = {}
        if a.clients:
            # One long-running proxy per TCTI, then tpm2-abrmd (+ its dbus-daemon), alternating
            # in two halves so that the machine's noise hits both alike.
            # A --baseline checkout's proxy (mssim) takes its turn in each half too.
            proxies = [("mssim", "mssim", HERE + "/.."), ("swtpm", "swtpm", HERE + "/..")]
            proxies += [(src, "mssim", src) for src in a.baseline]
            for _half in range(2):
                for key, protocol, src in proxies:
                    port = free_pair()
                    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
                    px = subprocess.Popen(tpmtop + ["--port", str(port), "--protocol", protocol], cwd=src, env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    procs.append(px)
                    try:
                        wait_port(port)
                        cpu.setdefault(key, []).append(
                            cpu_per_client([px.pid], f"{protocol}:host=127.0.0.1,port={port}", a.clients // 2))
                    finally:
                        px.send_signal(signal.SIGTERM)
                        px.wait(30)
                        procs.remove(px)
                cpu.setdefault("abrmd", []).append(
                    cpu_per_client([abrmd.proc.pid, abrmd.bus_pid], "tabrmd:bus_type=session", a.clients // 2))
        phases = run_phases(a, sw_port)
    finally:
        if abrmd is not None:
            abrmd.stop()
        for p in reversed(procs):
            end(p, 10)
        shutil.rmtree(state, ignore_errors=True)
    direct, proxied, mssim, via_abrmd = paths["direct"], paths["proxied"], paths["mssim"], paths["abrmd"]

    def p(xs, q):
        return statistics.quantiles(xs, n=100)[q - 1] / 1000

    print(f"machine: {describe()}")
    print(f"{len(direct)} commands per path (GetRandom + PCR_Extend(16), interleaved), {a.blocks} blocks, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    print(f"{'path':<40} {'p50 µs':>9} {'p99 µs':>9}")
    for label, xs in (("direct   (swtpm: TCTI → swtpm)", direct), ("proxied  (swtpm: TCTI → tpmtop proxy)", proxied),
                      ("proxied  (mssim: TCTI → tpmtop proxy)", mssim),
                      ("abrmd    (tabrmd: TCTI → tpm2-abrmd)", via_abrmd)):
        print(f"{label:<40} {statistics.median(xs) / 1000:9.1f} {p(xs, 99):9.1f}")
    for src in a.baseline:
        for tcti, key in (("mssim", src), ("swtpm", src + " swtpm")):
            xs = paths[key]
            print(f"{'baseline (' + tcti + ': TCTI → ' + os.path.basename(os.path.abspath(src)) + ')':<40} "
                  f"{statistics.median(xs) / 1000:9.1f} {p(xs, 99):9.1f}   "
                  f"{(statistics.median(xs) - statistics.median(direct)) / 1000:+.0f} µs over direct")
    for knob in a.also_set:
        xs = paths["set " + knob]
        print(f"{'proxied  (mssim, ' + knob + ')':<40} {statistics.median(xs) / 1000:9.1f} {p(xs, 99):9.1f}   "
              f"{(statistics.median(xs) - statistics.median(direct)) / 1000:+.0f} µs over direct")
    floor = paths["floor"]
    d_floor = (statistics.median(floor) - statistics.median(direct)) / 1000
    print(f"{'floor    (mssim: TCTI → bare forwarder)':<40} {statistics.median(floor) / 1000:9.1f} "
          f"{p(floor, 99):9.1f}   {d_floor:+.0f} µs over direct: two more hops, nothing else (floor_forwarder.py)")
    d_swtpm = (statistics.median(proxied) - statistics.median(direct)) / 1000
    delta = (statistics.median(mssim) - statistics.median(direct)) / 1000
    d_abrmd = (statistics.median(via_abrmd) - statistics.median(direct)) / 1000
    if cpu:
        ab = statistics.mean(cpu["abrmd"])
        print(f"CPU per client process (tpm2_getrandom 8, {a.clients} processes per server, two halves):")
        print(f"  tpm2-abrmd + dbus-daemon:        {ab * 1e3:6.2f} ms")
        for protocol in ("mssim", "swtpm"):
            x = statistics.mean(cpu[protocol])
            print(f"  tpmtop proxy ({protocol}: TCTI):{' ' * (12 - len(protocol))}{x * 1e3:6.2f} ms  "
                  f"x{x / ab:.2f} of abrmd+dbus (target ≤ x0.5: {'within' if x <= ab / 2 else 'OVER'})")
        for src in a.baseline:
            x = statistics.mean(cpu[src])
            print(f"  baseline {os.path.basename(os.path.abspath(src))} (mssim: TCTI): {x * 1e3:6.2f} ms  "
                  f"x{x / ab:.2f} of abrmd+dbus")
    print_phases(phases, statistics.mean(cpu["abrmd"]) if cpu else None)
    print(f"swtpm: TCTI through the proxy: {d_swtpm:+.0f} µs per command (p50): that TCTI opens a TCP connection "
          "for every command, so each one also pays an accept and a peer look-up in the proxy")
    ok = delta <= TARGET_US and delta < d_abrmd
    print(f"mssim: TCTI through the proxy (one connection per context) vs swtpm: TCTI direct: "
          f"target ≤ +{TARGET_US:.0f} µs and below tpm2-abrmd: {'within' if ok else 'OVER'}")
    print(f"tpmtop's own work per command (mssim, over the bare forwarder): {delta - d_floor:+.0f} µs")
    print(f"proxy: {delta:+.0f} µs per command (abrmd {d_abrmd:+.0f} µs, bare forwarder {d_floor:+.0f} µs)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
