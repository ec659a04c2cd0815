"""One open TPM: the target, the simulator if any, the instrumented transport, its owner
thread, and the sink the transport reports to.

:func:`tpmtop.connect.open_tpm` (which adds a recorder as the sink) is what every subcommand
and the dashboard call. Use it as a context manager: leaving it flushes nothing by itself (the
session engine owns its handles) but always stops the owner, closes the transport and stops a
private swtpm. This module never imports the recorder: the sink is whatever the caller gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpmtop.errors import TpmConnectionError
from tpmtop.tpm import interrupts, wire
from tpmtop.tpm import tcti as tcti_mod
from tpmtop.tpm.exchange import ExchangeSink, Labels, Origin
from tpmtop.tpm.identity import Identity, read_identity
from tpmtop.tpm.owner import TpmOwner
from tpmtop.tpm.transport import (
    DEFAULT_TIMEOUT,
    Backend,
    Deadline,
    DeviceBackend,
    InstrumentedTransport,
    SocketBackend,
    TctiLdrBackend,
    connect_tcp,
)

if TYPE_CHECKING:
    from tpmtop.tpm.esapi import EsapiOnTransport
    from tpmtop.tpm.sim import Swtpm


class TpmConnection:
    def __init__(self, target: tcti_mod.Target, sink: ExchangeSink | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT) -> None:
        self.target = target
        # --timeout (one wait for every command), or None: the settings' deadline by command
        # (tpmtop.tpm.transport.Deadline). ``timeout`` is the wait for an ordinary command.
        self.fixed_timeout = timeout
        self.timeout: float = Deadline(timeout).ordinary
        # Named for what it is in tpmtop (tpmtop.recorder.Recorder); any ExchangeSink works.
        self.recorder = sink
        self.sim: Swtpm | None = None
        self.transport: InstrumentedTransport | None = None
        self.owner: TpmOwner | None = None
        self._identity: Identity | None = None
        self._esapi: EsapiOnTransport | None = None
        self.profile_name: str | None = None
        # command codes the applied profile does not cover: they ran at the simulator's own speed
        self.profile_unheld: set[int] = set()

    # -- lifecycle ---------------------------------------------------------------------------
    def open(self) -> TpmConnection:
        try:
            # Opened whole: a signal meanwhile is raised at the end (and closes what was
            # opened), never inside a thread's start or half way through starting a swtpm.
            with interrupts.closing():
                # The decoder's per-command caches are filled now, never inside the first
                # measured operation (cheap: tpm/cc_table.py, no tpm2-pytss import).
                wire.warm()
                self.transport = InstrumentedTransport(self._backend(), self.recorder)
                self.owner = TpmOwner(self.transport)
        except BaseException:
            self.close()
            raise
        return self

    def _backend(self) -> Backend:
        t = self.target
        if t.kind is tcti_mod.TargetKind.SIM:
            from tpmtop.tpm.sim import Swtpm

            sim = self.sim = Swtpm().start()
            return sim.backend(self.fixed_timeout)
        if t.kind is tcti_mod.TargetKind.DEVICE:
            return DeviceBackend(t.device_path or "/dev/tpm0", self.fixed_timeout)
        if t.kind is tcti_mod.TargetKind.SWTPM:
            # swtpm's data channel speaks raw TPM commands; keep one connection open.
            host, port = tcti_mod.parse_host_port(t.conf or "", 2321)
            return SocketBackend(connect_tcp(host, port, self.timeout), f"swtpm {host}:{port}", self.fixed_timeout)
        return TctiLdrBackend(t.kind, t.conf, self.fixed_timeout)

    def reconnect(self) -> str:
        """After the TPM went away: a new backend under the same transport and recorder.
        Returns what became of a private swtpm ("" for any other TPM)."""
        if self.transport is None:
            raise TpmConnectionError("not connected")
        note = ""
        if self.sim is not None:
            note = self.sim.exit_note()
            self.sim.restart()
            self.transport.backend = self.sim.backend(self.fixed_timeout)
        else:
            self.transport.backend.close()
            self.transport.backend = self._backend()
        self._esapi = None
        if self.owner is not None:
            self.owner.lost = None
        return note

    def call(self, fn: Callable[..., Any], *args: Any, origin: str = Origin.USER, labels: Labels | None = None,
             **kwargs: Any) -> Any:
        """Run ``fn(transport, *args, **kwargs)`` as one job on the TPM's owner thread."""
        if self.owner is None:
            raise TpmConnectionError("not connected")
        return self.owner.call(fn, self.transport, *args, labels=labels or Labels(origin), **kwargs)

    def close(self) -> None:
        # No signal breaks into closing (a second Ctrl-C is raised once it is done).
        with interrupts.closing():
            self._close()

    def _close(self) -> None:
        if self.owner is not None:
            # Jobs already queued (a clean-up) finish first; a job stuck on a silent TPM is
            # abandoned after the time-out (the thread is a daemon, the backend closes under it).
            self.owner.close(timeout=10.0)
            self.owner = None
        if self._esapi is not None:
            try:
                self._esapi.close()
            except Exception:
                pass
            self._esapi = None
        if self.transport is not None:
            self.transport.close()
        if self.sim is not None:
            self.sim.stop()
            self.sim = None

    def __enter__(self) -> TpmConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what everyone asks --------------------------------------------------------------------
    @property
    def simulated(self) -> bool:
        return self.target.simulated

    @property
    def simulated_reason(self) -> str | None:
        return self.target.simulated_reason

    @property
    def is_kernel_rm(self) -> bool:
        """Through /dev/tpmrm0 transient handles are virtualised and per-client."""
        p = self.target.device_path
        return p is not None and tcti_mod.device_class(p) == "rm"  # by device number, not name

    def identity(self) -> Identity:
        if self.transport is None:
            raise TpmConnectionError("not connected")
        if self._identity is None:
            self._identity = (self.owner.call(read_identity, self.transport) if self.owner is not None
                              else read_identity(self.transport))
        return self._identity

    def esapi(self) -> EsapiOnTransport:
        """An ESAPI context on the instrumented transport (created on first use)."""
        if self.transport is None:
            raise TpmConnectionError("not connected")
        if self._esapi is None:
            from tpm2_pytss import ESAPI

            from tpmtop.tpm.esapi import EsapiOnTransport, TransportTcti

            self._esapi = EsapiOnTransport(ESAPI(TransportTcti(self.transport)), self.transport)
        return self._esapi

    def tpm_json(self) -> dict[str, Any]:
        ident = self.identity()
        d = {"tcti": self.target.tcti, "manufacturer": ident.manufacturer, "vendor": ident.vendor,
             "firmware": ident.firmware, "simulated": self.simulated}
        if self.simulated_reason:
            d["simulated_reason"] = self.simulated_reason
        if self.profile_name:
            d["profile"] = self.profile_name
        return d
