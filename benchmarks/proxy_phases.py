"""Two phases of benchmarks/proxy.py (issue 50), each against a `tpmtop proxy` of its own:

  wrap  — CPU per client process before and after the pid counter wraps, and tpm2-abrmd +
          dbus-daemon's in the same blocks. Run in a private pid namespace (`unshare --pid
          --fork --mount-proc`, root), where the counter may be set
          (/proc/sys/kernel/ns_last_pid). WRAP_BLOCKS times: a block of clients with pids just
          below pid_max, processes until the counter wraps, a block after the wrap, and a block
          through tpm2-abrmd (on a swtpm of its own: the proxy holds the other), its place
          rotating. CPU is the servers' threads' run time (/proc/PID/task/*/schedstat, in ns:
          /proc/PID/stat counts 10 ms ticks, 15-20 % of a 50-client block). PROCS idle
          processes stand in for a machine's (a namespace's /proc is otherwise nearly empty,
          and a walk of it would cost nothing).
  flood — a bystander's `tpm2_getrandom` (wall time, p50) idle and while another process
          connects, sends a byte and closes RATE times a second; the proxy's CPU meanwhile.

    python benchmarks/proxy_phases.py wrap  SWTPM_PORT CLIENTS      (inside unshare; prints JSON;
                                      abrmd blocks where tpm2-abrmd and dbus-daemon are installed)
    python benchmarks/proxy_phases.py flood SWTPM_PORT CLIENTS RATE (prints JSON)

BENCH_PROXY_SRC=DIR runs the proxy from another checkout (benchmarks/proxy.py --baseline).

benchmarks/proxy.py runs both and prints their figures beside tpm2-abrmd's from the same run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from machine import end  # benchmarks/machine.py
from proxy import wait_port  # benchmarks/proxy.py: the same wait for a listener

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..")
PROCS = 300  # idle processes in the wrap phase's namespace
WRAP_BLOCKS = 3  # before / after / abrmd blocks in the wrap phase

_FLOODER = """
import socket, sys, time
port, rate = int(sys.argv[1]), float(sys.argv[2])
gap = 1.0 / rate
nxt = time.monotonic()
while True:
    try:
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"\\x80")
        s.close()
    except OSError:
        pass
    nxt += gap
    time.sleep(max(0.0, nxt - time.monotonic()))
"""


def _free_pair() -> int:
    from proxy import free_pair  # benchmarks/proxy.py (this script runs from benchmarks/)

    return free_pair()


@contextmanager
def _proxy(sw_port: int) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = _free_pair()
    src = os.environ.get("BENCH_PROXY_SRC", REPO)  # another checkout's proxy (a before/after in one run)
    px = subprocess.Popen([sys.executable, "-m", "tpmtop", "proxy", "-T", f"swtpm:host=127.0.0.1,port={sw_port}",
                           "--port", str(port), "--protocol", "mssim"], cwd=src,
                          env=dict(os.environ, PYTHONPATH=os.path.abspath(src)),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, timeout=60)
        yield px, port
    finally:
        end(px, 30)


def _cpu_s(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _run_s(pids: list[int]) -> float:
    """The run time of every thread of ``pids``, in seconds (schedstat: nanoseconds)."""
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # a thread that ended meanwhile
    return total / 1e9


def _getrandom(port: int) -> float:
    """One client process: wall seconds of `tpm2_getrandom 8` through the proxy."""
    env = dict(os.environ, TPM2TOOLS_TCTI=f"mssim:host=127.0.0.1,port={port}", TSS2_LOG="all+NONE")
    t = time.perf_counter()
    subprocess.run(["tpm2_getrandom", "8"], env=env, check=True, capture_output=True, timeout=120)
    return time.perf_counter() - t


def _per_client(pids: list[int], tcti: str, n: int) -> float:
    """Run seconds of the servers ``pids`` per client: ``n`` `tpm2_getrandom 8` processes."""
    env = dict(os.environ, TPM2TOOLS_TCTI=tcti, TSS2_LOG="all+NONE")
    before = _run_s(pids)
    for _ in range(n):
        subprocess.run(["tpm2_getrandom", "8"], env=env, check=True, capture_output=True, timeout=120)
    return (_run_s(pids) - before) / n


@contextmanager
def _abrmd() -> Iterator[list[int] | None]:
    """tpm2-abrmd + dbus-daemon in this namespace, on a swtpm of their own: their pids, or
    None where they are not installed."""
    import shutil
    import tempfile

    from proxy import Abrmd, free_pair

    if not (shutil.which("tpm2-abrmd") and shutil.which("dbus-daemon")):
        yield None
        return
    state = tempfile.mkdtemp(prefix="tpmtop-bench-wrap-")
    port = free_pair()
    sw = subprocess.Popen(["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={state}", "--server",
                           f"type=tcp,port={port}", "--ctrl", f"type=tcp,port={port + 1}", "--flags",
                           "not-need-init,startup-clear"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ab = None
    try:
        wait_port(port)
        ab = Abrmd(port)
        yield [ab.proc.pid, ab.bus_pid]
    finally:
        if ab is not None:
            ab.stop()
        sw.terminate()
        sw.wait()
        shutil.rmtree(state, ignore_errors=True)


def _wrap_now(top: int) -> int:
    """Processes until the counter wraps on its own; the first pid after the wrap."""
    while True:
        p = subprocess.Popen(["true"])
        p.wait()
        if p.pid < top // 2:
            return p.pid


def wrap(sw_port: int, clients: int) -> dict[str, float]:
    if os.getpid() > 10:
        raise SystemExit("the wrap phase runs in a private pid namespace: unshare --pid --fork --mount-proc")
    idle = [subprocess.Popen(["sleep", "3600"]) for _ in range(PROCS)]
    m = max(clients // (2 * WRAP_BLOCKS), 5)  # clients per block
    runs: dict[str, list[float]] = {"before": [], "after": [], "abrmd": []}
    try:
        with _abrmd() as abrmd, _proxy(sw_port) as (px, port):
            tcti = f"mssim:host=127.0.0.1,port={port}"
            _getrandom(port)  # warm
            if abrmd:
                _per_client(abrmd, "tabrmd:bus_type=session", 1)  # warm
            with open("/proc/sys/kernel/pid_max") as f:
                top = int(f.read())
            pid_after = 0
            for b in range(WRAP_BLOCKS):
                def across() -> None:
                    nonlocal pid_after
                    # this block's pids end just below pid_max (each client one pid, a few spare)
                    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                        f.write(str(top - m - 40))
                    runs["before"].append(_per_client([px.pid], tcti, m))
                    pid_after = _wrap_now(top)
                    runs["after"].append(_per_client([px.pid], tcti, m))  # low pids now

                steps = [across]
                if abrmd:
                    steps.append(lambda: runs["abrmd"].append(_per_client(abrmd, "tabrmd:bus_type=session", m)))
                for step in steps[b % len(steps):] + steps[:b % len(steps)]:
                    step()
            out = {"before_ms": statistics.mean(runs["before"]) * 1e3, "after_ms": statistics.mean(runs["after"]) * 1e3,
                   "pid_after": float(pid_after), "pid_max": float(top), "blocks": float(WRAP_BLOCKS),
                   "per_block": float(m)}
            if runs["abrmd"]:
                out["abrmd_ms"] = statistics.mean(runs["abrmd"]) * 1e3
            return out
    finally:
        for p in idle:
            p.kill()
            p.wait()


def flood(sw_port: int, clients: int, rate: float) -> dict[str, float]:
    """Idle and flooded blocks alternate (two of each), so the machine's noise hits both alike."""
    with _proxy(sw_port) as (px, port):
        _getrandom(port)  # warm
        idle: list[float] = []
        busy: list[float] = []
        cpu = wall = 0.0
        for _half in range(2):
            idle += [_getrandom(port) for _ in range(clients // 2)]
            fl = subprocess.Popen([sys.executable, "-c", _FLOODER, str(port), str(rate)])
            try:
                time.sleep(1)  # under way
                cpu0, t0 = _cpu_s(px.pid), time.monotonic()
                busy += [_getrandom(port) for _ in range(clients // 2)]
                cpu += _cpu_s(px.pid) - cpu0
                wall += time.monotonic() - t0
            finally:
                fl.kill()
                fl.wait()
        return {"idle_p50_ms": statistics.median(idle) * 1e3, "flood_p50_ms": statistics.median(busy) * 1e3,
                "proxy_cpu_share": cpu / wall, "rate": rate}


def main() -> int:
    phase = sys.argv[1]
    if phase == "wrap":
        out = wrap(int(sys.argv[2]), int(sys.argv[3]))
    elif phase == "flood":
        out = flood(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        raise SystemExit(f"unknown phase {phase!r}: wrap or flood")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
