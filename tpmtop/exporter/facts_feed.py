"""What ``tpmtop boot`` reads (sysfs, securityfs, the kernel config, systemd) as gauges.

The whole set (dmesg, systemd-analyze, the journal) is read once when the exporter starts,
before it arms its probes: it does not change while the machine runs. The cheap part (sysfs,
securityfs, /proc: the IMA count, the PCR-integrity switch) is read again at a scrape when
the last read is older than ``refresh_s``. None of it talks to the TPM. Layer: exporter; no Textual.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from tpmtop.exporter import families as fam

if TYPE_CHECKING:
    from tpmtop.boot.facts import SystemFacts
    from tpmtop.boot.rootfs import RootReader

PHASES = ("firmware", "loader", "kernel", "initrd", "userspace")  # systemd-analyze's, in boot order


def _gauge(short: str, labels: Sequence[str] = (), value: float | None = None) -> GaugeMetricFamily:
    n = fam.name(short)
    return GaugeMetricFamily(n, fam.HELP[n], labels=labels or None, value=value)


def _yn(v: object) -> float | None:
    if v is None:
        return None
    s = str(v).strip().lower()
    if s in ("y", "1", "yes", "true", "m"):
        return 1.0
    if s in ("n", "0", "no", "false"):
        return 0.0
    return None


class FactsMetrics(Collector):
    def __init__(self, registry: CollectorRegistry, root: str = "/", refresh_s: float = 30.0) -> None:
        self.root = root
        self.refresh_s = refresh_s
        self.lock = threading.Lock()
        self._full: SystemFacts | None = None  # once read
        self._cheap: SystemFacts | None = None
        self._cheap_at = 0.0
        self.tpm_identity: dict[str, str] = {}  # manufacturer, firmware: from --probe
        registry.register(self)

    def read_all(self) -> FactsMetrics:
        """The whole set, now: before the kernel probes are armed, so that the programs it runs
        (systemd-analyze, journalctl, dmesg) are not measured into the exporter's trace."""
        self._read_all()
        return self

    def _reader(self) -> RootReader:
        from tpmtop.boot.rootfs import RootReader

        return RootReader(self.root)

    def _read_all(self) -> None:
        from tpmtop.boot.facts import collect

        try:
            sf = collect(self._reader())
        except Exception:  # a fact that cannot be read is absent from the scrape, not fatal
            return
        with self.lock:
            self._full = sf

    def _kernelfs(self) -> SystemFacts | None:
        from tpmtop.boot.facts import collect_kernelfs

        now = time.monotonic()
        if self._cheap is None or now - self._cheap_at >= self.refresh_s:
            try:
                self._cheap = collect_kernelfs(self._reader())
            except Exception:
                self._cheap = None
            self._cheap_at = now
        return self._cheap

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            full, cheap, ident = self._full, self._kernelfs(), dict(self.tpm_identity)
        sf = cheap or full
        if sf is None:
            return

        def value(name: str) -> Any:
            for s in (cheap, full):
                v = s.value(name) if s is not None else None
                if v is not None:
                    return v
            return None

        release = value("kernel.release")
        if release:
            g = _gauge("host_info", ("kernel_release",))
            g.add_metric((str(release),), 1.0)
            yield g
        if value("tpm.family") is not None or (full is not None and full.tpm_seen) or ident:
            g = _gauge("tpm_info", ("family", "driver", "vendor", "manufacturer", "firmware"))
            g.add_metric((str(value("tpm.family") or ""), str(value("tpm.driver") or ""),
                          str(value("tpm.vendor") or ""), ident.get("manufacturer", ""),
                          ident.get("firmware", "")), 1.0)
            yield g
        hmac = _yn(value("config.CONFIG_TCG_TPM2_HMAC"))
        if hmac is not None and value("kernel.config") is not None:
            yield _gauge("kernel_config_tpm2_hmac", value=hmac)
        dpi = _yn(value("tpm.disable_pcr_integrity"))
        if dpi is not None:
            yield _gauge("kernel_pcr_integrity_disabled", value=dpi)
        ima = value("ima.measurements")
        if isinstance(ima, int):
            yield _gauge("ima_measurements", value=float(ima))
        bt = full.boot_times if full is not None else None
        if bt is not None:
            g = _gauge("boot_phase_seconds", ("phase",))
            for ph in PHASES:
                if ph in bt.phases:
                    g.add_metric((ph,), float(bt.phases[ph]))
            yield g
            if bt.total is not None:
                yield _gauge("boot_duration_seconds", value=float(bt.total))
        units = full.units if full is not None else None
        if units is not None and full is not None and full.critical_chain is not None:  # units: from full
            on = sum(float(u.chain_took) for u in units if u.on_critical_path and u.chain_took is not None)
            yield _gauge("boot_tpm_units_critical_path_seconds", value=on)
