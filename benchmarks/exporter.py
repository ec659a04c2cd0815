"""What ``tpmtop exporter`` costs while it runs for a long time (issue 27).

Replays a real kernel trace (``tests/fixtures/kernel/trace-6.12-debian-qemu-tpmrm.txt``, a
Debian 6.12 guest booting and running tpm2-tools through /dev/tpmrm0, by default) into a
file that a ``tpmtop exporter --kernel-trace FILE`` follows, at ``--speed`` (default 10×) the
trace's own pace, looped (each loop's times shifted after the previous one, ``--gap`` seconds
of trace time apart) for ``--minutes`` (default 10). Meanwhile it scrapes /metrics once a
second for the first half and ten times a second for the second half, timing each scrape
(a whole HTTP GET with the Accept header Prometheus sends, so the answer is OpenMetrics), and
samples the exporter's RSS and CPU time.

Prints the traffic fed (commands per second), RSS (peak), CPU % in each half, the scrape
p50/p99 at 1 and 10 scrapes/s, whether the exporter kept up (commands counted = commands
written), and last:

    exporter: <R> MB RSS, <C> % CPU, scrape p99 <S> ms

R is the peak RSS, C the CPU share at 1 scrape/s (Prometheus scrapes every 15–60 s: one a
second is already more), S the worse of the two p99s. The exporter renders at most once a
second per format (tpmtop.exporter.server.RenderedOnceASecond), so at 10 scrapes/s most
scrapes get the second's rendering. Not a test.

    .venv/bin/python benchmarks/exporter.py --minutes 10
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from machine import describe  # noqa: E402 - benchmarks/machine.py

DEFAULT_TRACE = os.path.join(REPO, "tests", "fixtures", "kernel", "trace-6.12-debian-qemu-tpmrm.txt")
_TIME = re.compile(r"^(?P<head>.*?\s)(?P<secs>\d+)\.(?P<frac>\d{6}):(?P<tail>\s.*)$")


def load(path: str) -> tuple[list[str], list[tuple[float, str, str]]]:
    """The header lines and (trace time, text before the time, text after) of each event line."""
    header, events = [], []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            m = _TIME.match(line)
            if line.lstrip().startswith("#") or not m:
                if not events:
                    header.append(line)
                continue
            events.append((int(m["secs"]) + int(m["frac"]) / 1e6, m["head"], m["tail"]))
    return header, events


def writer(path: str, header, events, speed: float, gap: float, until: float, stats: dict) -> None:
    t0 = events[0][0]
    span = events[-1][0] - t0 + gap
    start = time.monotonic()
    loop = 0
    with open(path, "a", buffering=1) as f:
        f.write("\n".join(header) + "\n")
        while time.monotonic() < until:
            batch: list[str] = []
            for t, head, tail in events:
                tt = 1000.0 + loop * span + (t - t0)  # trace time of this copy
                due = start + (tt - 1000.0) / speed
                now = time.monotonic()
                if due > now:
                    if batch:
                        f.write("".join(batch))
                        batch = []
                    if due > until:
                        return
                    time.sleep(due - now)
                batch.append(f"{head}{tt:.6f}:{tail}\n")
                if " tx_ret: " in tail:
                    stats["commands"] += 1
            if batch:
                f.write("".join(batch))
            loop += 1
            stats["loops"] = loop


# What Prometheus 2.42 sends: it gets OpenMetrics, which prometheus_client takes about twice as
# long to write as the classic text format.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def scrape(url: str) -> tuple[float, bytes]:
    req = urllib.request.Request(url, headers={"Accept": PROMETHEUS_ACCEPT})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read()
    return (time.perf_counter() - t) * 1000.0, body


def counted(body: bytes) -> int:
    """Commands the exporter counted: the sum of its response counters."""
    n = 0.0
    for line in body.decode().splitlines():
        if line.startswith("tpmtop_kernel_command_responses_total{"):
            n += float(line.rsplit(" ", 1)[1])
    return int(n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="how long to run (default 10)")
    ap.add_argument("--speed", type=float, default=10.0, help="replay speed, × the trace's pace (default 10)")
    ap.add_argument("--gap", type=float, default=10.0,
                    help="seconds of trace time between two copies of the trace (default 10)")
    ap.add_argument("--trace", default=DEFAULT_TRACE, help="the kernel trace to replay")
    args = ap.parse_args(argv)

    header, events = load(args.trace)
    if not events:
        print(f"exporter: {args.trace} holds no trace events", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="tpmtop-bench-exporter-")
    trace = os.path.join(tmp, "trace.txt")
    open(trace, "w").close()
    tpmtop = os.path.join(os.path.dirname(sys.executable), "tpmtop")
    proc = subprocess.Popen([tpmtop, "exporter", "--kernel-trace", trace, "--listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        m = re.search(r"(http://\S+/metrics)", line)
        if not m:
            print(f"exporter: the exporter did not start: {line.strip()}", file=sys.stderr)
            return 1
        url = m.group(1)
        ps = psutil.Process(proc.pid)
        total_s = args.minutes * 60.0
        start = time.monotonic()
        half = start + total_s / 2
        until = start + total_s
        stats = {"commands": 0, "loops": 0}
        w = threading.Thread(target=writer, args=(trace, header, events, args.speed, args.gap, until, stats),
                             daemon=True)
        w.start()
        rss_peak = 0
        phases = {1: [], 10: []}
        cpu_at = {}
        load0 = os.getloadavg()[1]
        cpu0 = ps.cpu_times()
        cpu_at["start"] = (time.monotonic(), cpu0.user + cpu0.system)
        for rate, end in ((1, half), (10, until)):
            period = 1.0 / rate
            nxt = time.monotonic()
            while time.monotonic() < end:
                ms, _ = scrape(url)
                phases[rate].append(ms)
                rss_peak = max(rss_peak, ps.memory_info().rss)
                nxt += period
                time.sleep(max(0.0, nxt - time.monotonic()))
            c = ps.cpu_times()
            cpu_at[rate] = (time.monotonic(), c.user + c.system)
        w.join(5)
        time.sleep(2.0)  # let the exporter read the last lines
        _, body = scrape(url)
        got = counted(body)
        load1 = os.getloadavg()[1]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        try:
            os.unlink(trace)
            os.rmdir(tmp)
        except OSError:
            pass

    def cpu_pct(a, b) -> float:
        (t0, c0), (t1, c1) = cpu_at[a], cpu_at[b]
        return 100.0 * (c1 - c0) / (t1 - t0)

    def p(xs, q) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, round(q / 100.0 * (len(xs) - 1)))]

    wall = args.minutes * 60.0
    print(f"machine: {describe()}; shared with other jobs: 5-min load average {load0:.1f} at the start, "
          f"{load1:.1f} at the end, on {os.cpu_count()} CPUs")
    print(f"trace: {os.path.basename(args.trace)} ×{stats['loops']} at {args.speed:g}× speed, "
          f"{args.gap:g} s of trace time between copies: {stats['commands']:,} commands in {wall / 60:.1f} min "
          f"({stats['commands'] / wall:,.0f} commands/s, {args.speed * wall / 60:.0f} min of traffic)")
    print(f"kept up: counted {got:,} of {stats['commands']:,} commands written")
    print(f"cpu: {cpu_pct('start', 1):.2f} % at 1 scrape/s, {cpu_pct(1, 10):.2f} % at 10 scrapes/s")
    for rate in (1, 10):
        xs = phases[rate]
        print(f"scrape at {rate}/s: {len(xs)} scrapes, p50 {statistics.median(xs):.2f} ms, p99 {p(xs, 99):.2f} ms, "
              f"max {max(xs):.2f} ms, {len(body):,} bytes")
    worst = max(p(phases[1], 99), p(phases[10], 99))
    print(f"exporter: {rss_peak / 1e6:.0f} MB RSS, {cpu_pct('start', 1):.2f} % CPU, scrape p99 {worst:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
