"""A real Prometheus (Debian's package) scrapes a fleet of ``tpmtop exporter`` processes.

Three hosts on loopback ports, each with its own ``instance`` label, each fed a real kernel
trace (``--kernel-trace``): ``plain`` a Debian 6.12 guest with tpm2-tools on /dev/tpmrm0 (no
HMAC session), ``old`` a Debian 6.1 guest, ``hmac`` a 6.10 kernel that sets up a salted
session for every IMA extend. Prometheus loads the rules fleets drop in
(contrib/prometheus/tpmtop-rules.yml) and the test asks its HTTP API:

- ``histogram_quantile(0.99, rate(…[1m]))`` of PCR_Extend on ``plain`` equals the p99 that
  Prometheus' own interpolation gives on the capture of the same traffic (``tpmtop kernel
  --from-trace``), bucketed with the exporter's documented buckets; the trace is written in
  two copies, the second after Prometheus scraped the first, so that the rate has an increase;
- the counters equal the capture's counts;
- the HMAC set-ups alert fires for ``hmac`` and for no other host.

Skipped, with the reason, where Prometheus is not installed or cannot start.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.captures import capture_of
from tests.helpers.exporter import KERNEL_TRACES, REPO, Exporter, shifted_copy, span_s
from tpmtop.exporter.families import BUCKETS

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus package is not installed "
                                "(scripts/bootstrap.sh --test installs it)")
PLAIN = KERNEL_TRACES / "trace-6.12-debian-qemu-tpmrm.txt"
OLD = KERNEL_TRACES / "trace-6.1-debian-qemu-tpmrm.txt"
HMAC = KERNEL_TRACES / "trace-6.10-ima-hmac.txt"
HMAC_COPIES = 6  # 2 set-ups per copy: 12, above the alert's 10 per boot
WAIT = 180  # seconds: generous, the machine is shared and loaded


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, tmp: Path, targets: dict[str, str]):
        self.port = free_port()
        cfg = tmp / "prometheus.yml"
        static = "\n".join(f"      - targets: ['{addr}']\n        labels: {{instance: {name}}}"
                           for name, addr in targets.items())
        cfg.write_text(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {REPO / 'contrib' / 'prometheus' / 'tpmtop-rules.yml'}
scrape_configs:
  - job_name: tpmtop
    static_configs:
{static}
""")
        self.log = open(tmp / "prometheus.log", "w+")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                lines = [ln for ln in self.log.read().splitlines() if ln.strip()]
                pytest.skip(f"Prometheus cannot run here: {lines[-1] if lines else f'exit {self.proc.returncode}'}")
            try:
                with urllib.request.urlopen(f"{self.base}/-/ready", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError("Prometheus did not get ready")

    def api(self, path: str, **params) -> dict:
        url = f"{self.base}/api/v1/{path}" + (("?" + urllib.parse.urlencode(params)) if params else "")
        with urllib.request.urlopen(url, timeout=30) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> dict[str, float]:
        """instance -> value (an instant vector), or {"": value} for a scalar-like single sample."""
        out = {}
        for s in self.api("query", query=expr)["result"]:
            out[s["metric"].get("instance", "")] = float(s["value"][1])
        return out

    def until(self, expr: str, cond, what: str) -> dict[str, float]:
        deadline = time.monotonic() + WAIT
        while True:
            got = self.query(expr)
            if cond(got):
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"Prometheus never answered {what}: {expr} -> {got}")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def prometheus_quantile(q: float, bounds: tuple[float, ...], counts: list[float]) -> float:
    """What PromQL's histogram_quantile returns for cumulative ``counts`` at ``bounds`` + +Inf
    (promql/quantile.go: linear interpolation inside the bucket the rank falls in; the lowest
    bucket starts at 0; a rank in +Inf gives the highest finite bound)."""
    total = counts[-1]
    rank = q * total
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if b == len(counts) - 1:
        return bounds[-1]
    start = 0.0 if b == 0 else bounds[b - 1]
    below = 0.0 if b == 0 else counts[b - 1]
    return start + (bounds[b] - start) * ((rank - below) / (counts[b] - below))


def test_a_real_prometheus_scrapes_a_fleet_and_alerts_on_the_hmac_host(tmp_path):
    cap = capture_of(PLAIN, tmp_path)
    extends_ns = [e["wire_ns"] for e in cap["events"] if e["command"] == "TPM2_CC_PCR_Extend" and e["rc"] is not None]
    assert len(extends_ns) > 50
    cumulative = [sum(1 for ns in extends_ns if ns / 1e9 <= le) for le in BUCKETS] + [len(extends_ns)]
    want_p99 = prometheus_quantile(0.99, BUCKETS, [float(c) for c in cumulative])

    plain = tmp_path / "plain.txt"
    plain.write_text(shifted_copy(PLAIN, 0.0))
    hmac = tmp_path / "hmac.txt"
    step = span_s(HMAC) + 1.0
    hmac.write_text("".join(shifted_copy(HMAC, i * step, header=i == 0) for i in range(HMAC_COPIES)))
    exporters: list[Exporter] = []
    prom = None
    try:
        for path in (plain, OLD, hmac):
            exporters.append(Exporter("--kernel-trace", str(path)))
        names = ("plain", "old", "hmac")
        prom = Prometheus(tmp_path, {n: e.address for n, e in zip(names, exporters, strict=True)})
        prom.wait_ready()

        count = 'sum by (instance) (tpmtop_kernel_command_duration_seconds_count{command="PCR_Extend"})'
        n = len(extends_ns)
        prom.until(count, lambda g: g.get("plain") == n, f"{n} PCR_Extends on plain")
        # the same traffic again, later in the trace, as a kernel would go on writing
        with open(plain, "a") as f:
            f.write(shifted_copy(PLAIN, span_s(PLAIN) + 1.0, header=False))
        prom.until(count, lambda g: g.get("plain") == 2 * n, f"{2 * n} PCR_Extends on plain")

        got = prom.query('histogram_quantile(0.99, sum by (instance, le) '
                         '(rate(tpmtop_kernel_command_duration_seconds_bucket{command="PCR_Extend"}[1m])))')
        assert got["plain"] == pytest.approx(want_p99, rel=1e-6), (got, want_p99)
        # counters against the capture of the same traffic (two copies of it)
        per_cmd = prom.query('sum by (instance) (tpmtop_kernel_command_responses_total)')
        assert per_cmd["plain"] == 2 * len(cap["events"])
        cap_old = capture_of(OLD, tmp_path)
        prom.until('sum by (instance) (tpmtop_kernel_command_responses_total)',
                   lambda g: g.get("old") == len(cap_old["events"]), "the old host's commands")

        # the fleet: HMAC set-ups per boot alert for the 6.10 host and no other
        setups = prom.until("instance:tpmtop_kernel_session_setups:sum",
                            lambda g: len(g) == 3 and g.get("hmac") == 2 * HMAC_COPIES,
                            "the set-ups of all three hosts")
        assert setups == {"plain": 0.0, "old": 0.0, "hmac": 2.0 * HMAC_COPIES}
        mode = prom.query("tpmtop_kernel_session_mode == 1")
        assert mode.keys() == {"plain", "old", "hmac"}

        deadline = time.monotonic() + WAIT
        while True:
            alerts = [a for a in prom.api("alerts")["alerts"]
                      if a["labels"]["alertname"] == "TPMKernelHMACSetupsPerBoot" and a["state"] == "firing"]
            if alerts or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert [a["labels"]["instance"] for a in alerts] == ["hmac"], alerts
        assert prom.query('tpmtop_kernel_session_mode{mode="per-command"} == 1').keys() == {"hmac"}
    finally:
        if prom is not None:
            prom.stop()
        for e in exporters:
            e.stop()
