"""``tpmtop exporter --probe``: the TPM's identity and free slots, read with GetCapability; and,
where the firmware's event log is readable, the PCRs (PCR_Read) to say per bank whether the log
replays to them (:mod:`tpmtop.pcrs.live`).

Off by default, because the exporter is passive: on Linux 6.12+ any command a user-space
program sends through /dev/tpm0 or /dev/tpmrm0 ends the HMAC session the kernel keeps, and
the kernel's next PCR extend pays a full set-up again (the observer effect, domain notes §5).
With --probe the exporter sends, every interval, TPM2_GetCapability(TPM_PROPERTIES) for the
variable properties (HR_*_AVAIL), and once the fixed ones (manufacturer, firmware): read-only
commands that change nothing in the TPM, whether --read-only was given or not. The same
variable properties carry the dictionary-attack state (``tpmtop_tpm_da_*``, as ``tpmtop health``
reads it): no authorization, nothing that could count as a failure. Its own
commands show in the kernel metrics under ``path="tpmtop"``. Layer: exporter; no Textual.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from tpmtop.exporter import families as fam
from tpmtop.exporter.families import SlotKind
from tpmtop.tpm.exchange import Origin

if TYPE_CHECKING:
    import argparse

    from tpmtop.exporter.facts_feed import FactsMetrics
    from tpmtop.health.lockout import DaState
    from tpmtop.tpm.connection import TpmConnection
    from tpmtop.tpm.status import ClockInfo

_SLOT_PROPS = {SlotKind.TRANSIENT: "HR_TRANSIENT_AVAIL", SlotKind.LOADED_SESSION: "HR_LOADED_AVAIL",
               SlotKind.ACTIVE_SESSION: "HR_ACTIVE_AVAIL"}


class TpmProbe(Collector):
    def __init__(self, registry: CollectorRegistry, args: argparse.Namespace, facts: FactsMetrics | None = None,
                 interval_s: float = 300.0) -> None:
        self.args = args
        self.facts = facts  # FactsMetrics: its tpm_info gains manufacturer and firmware
        self.interval_s = interval_s
        self.conn: TpmConnection | None = None
        self.keep_open = False  # tests look at the connection's recorder after a probe
        self.identified = False
        self.lock = threading.Lock()
        self.slots: dict[SlotKind, int] = {}
        self.replay: dict[str, bool] | None = None  # bank -> the event log replays to its PCRs
        self.da: DaState | None = None
        self.clock: ClockInfo | None = None
        self.nv_avail: int | None = None
        self.ok: bool | None = None
        self.error: str | None = None
        self._said: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        registry.register(self)

    def _open(self) -> TpmConnection:
        from tpmtop.connect import open_tpm
        from tpmtop.recorder import Recorder

        a = self.args
        # a small ring: the probe's own few GetCapability exchanges, never looked at again
        return open_tpm(tcti=getattr(a, "tcti", None), sim=getattr(a, "sim", False),
                        raw_device=getattr(a, "raw_device", False), recorder=Recorder(capacity=64, keep_buffers=False),
                        timeout=getattr(a, "timeout", None))

    def read_once(self) -> bool:
        """One probe: GetCapability and ReadClock, both read-only and without authorization.
        True when the TPM answered."""
        from tpmtop.errors import TpmError
        from tpmtop.pcrs.live import log_readable, replay_matches
        from tpmtop.pcrs.tpmread import read_all
        from tpmtop.tpm.identity import read_identity, read_variable
        from tpmtop.tpm.status import read_clock

        root = getattr(self.args, "root", "/") or "/"
        try:
            if self.conn is None:
                self.conn = self._open()
            if not self.identified:
                ident = self.conn.call(read_identity, origin=Origin.EXPORTER)
                if self.facts is not None:
                    with self.facts.lock:
                        self.facts.tpm_identity = {"manufacturer": ident.manufacturer, "firmware": ident.firmware}
                self.identified = True
            var = self.conn.call(read_variable, origin=Origin.EXPORTER)
            try:  # read-only, no authorization; a TPM that refuses it leaves the gauges out
                clock: ClockInfo | None = self.conn.call(read_clock, origin=Origin.EXPORTER)
            except TpmError:
                clock = None
            # PCR_Read (read-only, no authorization) only where an event log can explain the values
            tpm_pcrs = self.conn.call(read_all, origin=Origin.EXPORTER) if log_readable(root) else None
        except Exception as e:  # a TPM that went away: said once, tried again next time
            self._fail(str(e) or type(e).__name__)
            return False
        finally:
            # Not held between probes: a swtpm serves one client at a time, and a daemon that
            # keeps /dev/tpmrm0 open holds kernel memory for nothing. A private --sim swtpm
            # stays (closing it would end it).
            if self.conn is not None and not getattr(self.args, "sim", False) and not self.keep_open:
                self.conn.close()
                self.conn = None
        from tpmtop.health.lockout import DaState

        try:
            da: DaState | None = DaState.from_properties(var)
        except KeyError:  # a TPM that does not report them: no DA gauges rather than wrong ones
            da = None
        matches = replay_matches(tpm_pcrs, root) if tpm_pcrs is not None else None
        with self.lock:
            self.slots = {k: var[p] for k, p in _SLOT_PROPS.items() if p in var}
            self.replay = matches
            self.da = da
            self.clock = clock
            self.nv_avail = var.get("HR_PERSISTENT_AVAIL")
            self.ok, self.error = True, None
        return True

    def _fail(self, why: str) -> None:
        from tpmtop.textsafe import safe

        with self.lock:
            self.ok, self.error, self.slots, self.da = False, why, {}, None
            self.clock, self.nv_avail = None, None
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None
        if why != self._said:
            print(f"tpmtop: --probe: {safe(why)}", file=sys.stderr, flush=True)
            self._said = why

    def start(self) -> TpmProbe:
        self._thread = threading.Thread(target=self._run, name="tpmtop-exporter-probe", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.read_once()
            self._stop.wait(self.interval_s)

    def close(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(15)
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            ok, slots, replay, da = self.ok, dict(self.slots), self.replay, self.da
            clock, nv_avail = self.clock, self.nv_avail
        if ok is None:
            return
        if clock is not None:
            for short, v in (("tpm_clock_resets", clock.reset_count), ("tpm_clock_restarts", clock.restart_count)):
                yield GaugeMetricFamily(fam.name(short), fam.HELP[fam.name(short)], value=float(v))
        if nv_avail is not None:
            n = fam.name("tpm_nv_persistent_available")
            yield GaugeMetricFamily(n, fam.HELP[n], value=float(nv_avail))
        if da is not None:
            for short, v in (("tpm_da_lockout_counter", da.counter), ("tpm_da_max_auth_fail", da.max_tries),
                             ("tpm_da_lockout_interval_seconds", da.interval_s),
                             ("tpm_da_lockout_recovery_seconds", da.recovery_s),
                             ("tpm_da_in_lockout", 1 if da.in_lockout else 0)):
                yield GaugeMetricFamily(fam.name(short), fam.HELP[fam.name(short)], value=float(v))
        n = fam.name("tpm_slots_available")
        g = GaugeMetricFamily(n, fam.HELP[n], labels=("kind",))
        for k in SlotKind:
            if k in slots:
                g.add_metric((k.value,), float(slots[k]))
        yield g
        yield GaugeMetricFamily(fam.name("tpm_probe_success"), fam.HELP[fam.name("tpm_probe_success")],
                                value=1.0 if ok else 0.0)
        if replay:
            n = fam.name("pcr_replay_matches")
            r = GaugeMetricFamily(n, fam.HELP[n], labels=("bank",))
            for bank, matches in sorted(replay.items()):
                r.add_metric((bank,), 1.0 if matches else 0.0)
            yield r
