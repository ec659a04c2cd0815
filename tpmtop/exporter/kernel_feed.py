"""The kernel's TPM traffic as Prometheus metrics: tpmtop's kprobes live, or a trace file.

A reader thread takes trace lines (tpmtop's own probe instance, or a file followed like
``tail -f`` — the dashboard's ``--kernel-trace``), parses them with
:class:`tpmtop.kernel.trace_pipe.Parser`, rebuilds operations where the trace has no
operation events (:class:`tpmtop.kernel.ops.Assembler`) and counts: per-command histograms,
response codes, per-operation cost split TPM/host, session set-ups, the session verdict
(:class:`tpmtop.kernel.ops.KernelAccounts`) and the failure patterns
(:class:`tpmtop.patterns.Detector`).

Memory is bounded whatever runs for how long: counters and fixed buckets per label set, and
every label comes from a closed set (:mod:`tpmtop.exporter.families`). No command is kept.
tpmtop sends no TPM command here. Layer: exporter; no Textual.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from tpmtop.exporter import families as fam
from tpmtop.exporter.families import Operation, Pattern, RcLabel, SessionMode
from tpmtop.kernel import ops as kops
from tpmtop.kernel.trace_pipe import KernelCommand, KernelOp, Parser, path_label
from tpmtop.patterns import Detector
from tpmtop.tpm import names

if TYPE_CHECKING:
    from tpmtop.kernel.probes import Probes

ORIGIN = "kernel"
_OPERATIONS = frozenset(o.value for o in Operation)


def command_label(cc: int | None) -> str:
    """A command's name as a label: from tpm2-pytss's table only, so a garbled code is one value."""
    if cc is None or cc not in names.CC_NAMES:
        return fam.UNKNOWN_COMMAND
    return names.cc_short(cc)


def rc_label(kc: KernelCommand) -> str:
    if not kc.answered:
        return RcLabel.NO_RESPONSE.value
    if kc.rc is None:
        return RcLabel.NOT_TRACED.value
    if not tpm_rc(kc.rc):
        return RcLabel.OTHER.value
    return f"0x{names.rc_base(kc.rc):03x}"


def tpm_rc(rc: int) -> bool:
    """A TPM 2.0 response code: 12 bits (format zero or one). A larger or negative value is a
    garbled header or an errno, one label value for all rather than a series each."""
    return 0 <= rc <= 0xFFF


def preload() -> None:
    """Import now what parsing will need, before the probes are armed: a lazy import later
    reads files while tracing, and under an IMA policy that measures files root reads
    (ima_policy=tcb) each one is a PCR_Extend the kernel sends on the exporter's behalf."""
    import tpmtop.kernel.live  # noqa: F401
    from tpmtop.tpm import wire

    wire.num_handles(0x182)  # tpm2-pytss's command tables: the session-handle offsets need them


class KernelMetrics(Collector):
    """The counts, updated by :meth:`feed` (the reader thread), read by a scrape."""

    def __init__(self, registry: CollectorRegistry, *, mark_own: bool = True):
        h = fam.HELP
        self._cmd_hist = Histogram(fam.name("kernel_command_duration_seconds"),
                                   h[fam.name("kernel_command_duration_seconds")], ("command", "path"),
                                   buckets=fam.BUCKETS, registry=registry)
        self._responses = Counter(fam.name("kernel_command_responses"),
                                  h[fam.name("kernel_command_responses_total")], ("command", "rc"), registry=registry)
        self._op_hist = self._histogram(registry, "kernel_operation_duration_seconds")
        self._op_tpm = self._histogram(registry, "kernel_operation_tpm_duration_seconds")
        self._op_host = self._histogram(registry, "kernel_operation_host_duration_seconds")
        self._op_failed = Counter(fam.name("kernel_operation_failures"), h[fam.name("kernel_operation_failures_total")],
                                  ("operation",), registry=registry)
        self._setups = Counter(fam.name("kernel_session_setups"), h[fam.name("kernel_session_setups_total")],
                               ("operation",), registry=registry)
        for op in Operation:  # zero from the start: an alert's increase() needs the series before the first set-up
            self._setups.labels(op.value)
            self._op_failed.labels(op.value)
        self.parser = Parser()
        self.assembler = kops.Assembler()
        self.accounts = kops.KernelAccounts()
        self.detector = Detector()
        self.lock = threading.Lock()  # feed() against a scrape's collect()
        self.up = False
        self.error: str | None = None
        self.commands = 0
        self._mark_own = mark_own
        registry.register(self)

    @staticmethod
    def _histogram(registry: CollectorRegistry, short: str) -> Histogram:
        n = fam.name(short)
        return Histogram(n, fam.HELP[n], ("operation",), buckets=fam.BUCKETS, registry=registry)

    # -- feeding ---------------------------------------------------------------------------------
    def feed(self, lines: Iterable[str]) -> int:
        """Parse ``lines`` and count what they complete; returns the commands completed."""
        with self.lock:
            done, seen = kops.parse_in_order(self.parser, lines)
            kops.route(seen, self.parser, self.assembler, self._command, self._op)
        return len(done)

    def finish(self) -> int:
        """The commands still waiting for a return that will not come (the trace ended)."""
        with self.lock:
            done = self.parser.flush()
            for kc in done:
                self._command(kc)
        return len(done)

    def _command(self, kc: KernelCommand) -> None:
        if self._mark_own and os.path.exists(f"/proc/self/task/{kc.pid}"):
            # --probe's own GetCapability through /dev/tpmrm0: shown as tpmtop's, not a user's
            kc.path = f"tpmtop's own: {kc.path}"
        self.commands += 1
        cmd = command_label(kc.cc)
        if kc.answered:
            self._cmd_hist.labels(cmd, path_label(kc.path)).observe(kc.wire_ns / 1e9)
        self._responses.labels(cmd, rc_label(kc)).inc()
        self.accounts.add_command(kc)
        # the detector keeps one count per (command, rc): only table names and TPM codes reach it
        if kc.rc is None or tpm_rc(kc.rc):
            cmd_name = names.cc_name(kc.cc) if kc.cc in names.CC_NAMES else "(unknown command)"
            self.detector.add(({"command": cmd_name, "rc": kc.rc, "t_ns": kc.t_ns, "wire_ns": kc.wire_ns,
                                "origin": ORIGIN, "expected": kc.expected_error},))

    def _op(self, op: KernelOp) -> None:
        if op.kind not in _OPERATIONS:
            return
        self.accounts.add_op(op)
        self._op_hist.labels(op.kind).observe(op.total_ns / 1e9)
        self._op_tpm.labels(op.kind).observe(op.wire_ns / 1e9)
        if not (op.estimated and len(op.commands) == 1):  # a one-command estimate shows no host time
            self._op_host.labels(op.kind).observe(op.host_ns / 1e9)
        if op.ret not in (None, 0) and not (op.kind == Operation.GET_RANDOM.value and op.ret > 0):
            self._op_failed.labels(op.kind).inc()
        if kops.started_session(op):
            self._setups.labels(op.kind).inc()

    # -- a scrape ----------------------------------------------------------------------------------
    def describe(self) -> list[Metric]:
        return []  # collected at every scrape; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            mode = self.accounts.mode()[0] or SessionMode.UNKNOWN.value
            pats = self.detector.patterns()
            by_pcr = dict(self.detector.pcr_watch.by_pcr)
            lost = self.parser.lost
        g = GaugeMetricFamily(fam.name("kernel_session_mode"), fam.HELP[fam.name("kernel_session_mode")],
                              labels=("mode",))
        for m in SessionMode:
            g.add_metric((m.value,), 1.0 if m.value == mode else 0.0)
        yield g
        cmds = CounterMetricFamily(fam.name("kernel_pattern_commands"),
                                   fam.HELP[fam.name("kernel_pattern_commands_total")], labels=("pattern",))
        secs = CounterMetricFamily(fam.name("kernel_pattern_lost_seconds"),
                                   fam.HELP[fam.name("kernel_pattern_lost_seconds_total")], labels=("pattern",))
        for kind in Pattern:
            mine = [p for p in pats if p.kind == kind.value]
            cmds.add_metric((kind.value,), sum(p.count for p in mine))
            secs.add_metric((kind.value,), sum(p.lost_ns for p in mine) / 1e9)
        yield cmds
        yield secs
        changed = CounterMetricFamily(fam.name("kernel_pcr_changed"), fam.HELP[fam.name("kernel_pcr_changed_total")],
                                      labels=("pcr",))
        for pcr, n in sorted(by_pcr.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            changed.add_metric(("unknown" if pcr is None else str(pcr),), n)
        yield changed
        yield CounterMetricFamily(fam.name("kernel_trace_lost_events"),
                                  fam.HELP[fam.name("kernel_trace_lost_events_total")], value=lost)
        yield GaugeMetricFamily(fam.name("kernel_trace_up"), fam.HELP[fam.name("kernel_trace_up")],
                                value=1.0 if self.up else 0.0)


class KernelReader:
    """Reads a trace source into :class:`KernelMetrics` on a thread of its own.

    ``source`` is a path (a trace file, followed as it grows; a FIFO) or tpmtop's armed
    :class:`~tpmtop.kernel.probes.Probes` (their trace_pipe)."""

    def __init__(self, metrics: KernelMetrics, *, path: str | None = None, probes: Probes | None = None,
                 poll_s: float = 0.2) -> None:
        if (path is None) == (probes is None):
            raise ValueError("a KernelReader reads either a trace file or its probes")
        self.metrics = metrics
        self.path = path
        self.probes = probes
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def source_text(self) -> str:
        if self.probes is not None:
            return f"kprobes on tpm_transmit (group {self.probes.group})"
        return f"trace file {self.path}"

    def start(self) -> KernelReader:
        self.metrics.up = True
        self._thread = threading.Thread(target=self._run, name="tpmtop-exporter-kernel", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        from tpmtop.kernel.live import read_lines

        src: str | int
        if self.path is not None:
            src = self.path
        else:
            assert self.probes is not None  # __init__ took a path or probes
            src = self.probes.pipe_fd if self.probes.pipe_fd is not None else self.probes.pipe_path()
        try:
            for lines in read_lines(src, self._stop.is_set, self._poll_s):
                self.metrics.feed(lines)
        except OSError as e:
            self.metrics.error = f"reading {src} failed: {e.strerror or e}"
        except Exception as e:  # a parser bug must not pass silently: trace_up goes to 0, stderr says why
            self.metrics.error = f"{type(e).__name__}: {e}"
        finally:
            self.metrics.up = False

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(self._poll_s * 10 + 2)
        if self.probes is not None:
            self.probes.close()
