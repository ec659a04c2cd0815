"""One open TPM: the target, the simulator if any, the instrumented transport, the recorder.

``open_tpm()`` is what every subcommand and the dashboard call. Use it as a context manager:
leaving it flushes nothing by itself (the session engine owns its handles) but always closes
the transport and stops a private swtpm.
"""

from __future__ import annotations

from typing import Callable

from tpmtop.errors import TpmConnectionError
from tpmtop.recorder import Recorder
from tpmtop.tpm import tcti as tcti_mod
from tpmtop.tpm.identity import Identity, read_identity
from tpmtop.tpm.transport import (DEFAULT_TIMEOUT, DeviceBackend, InstrumentedTransport, SocketBackend,
                                  TctiLdrBackend, connect_tcp)


class TpmConnection:
    def __init__(self, target: tcti_mod.Target, recorder: Recorder | None = None,
                 timeout: float = DEFAULT_TIMEOUT):
        self.target = target
        self.timeout = timeout  # every backend's wait for the TPM (--timeout)
        self.recorder = recorder if recorder is not None else Recorder()
        self.sim = None
        self.transport: InstrumentedTransport | None = None
        self._identity: Identity | None = None
        self._esapi = None
        self.profile_name: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def open(self) -> "TpmConnection":
        try:
            self.transport = InstrumentedTransport(self._backend(), self.recorder)
        except BaseException:
            self.close()
            raise
        return self

    def _backend(self):
        t = self.target
        if t.kind == "sim":
            from tpmtop.tpm.sim import Swtpm

            self.sim = Swtpm().start()
            return self.sim.backend(self.timeout)
        if t.kind == "device":
            return DeviceBackend(t.device_path, self.timeout)
        if t.kind == "swtpm":
            # swtpm's data channel speaks raw TPM commands; keep one connection open.
            host, port = tcti_mod.parse_host_port(t.conf or "", 2321)
            return SocketBackend(connect_tcp(host, port, self.timeout), f"swtpm {host}:{port}", self.timeout)
        return TctiLdrBackend(t.kind, t.conf, self.timeout)

    def reconnect(self) -> None:
        """After the TPM went away: a new backend under the same transport and recorder."""
        if self.transport is None:
            raise TpmConnectionError("not connected")
        if self.sim is not None:
            self.sim.restart()
            self.transport.backend = self.sim.backend(self.timeout)
        else:
            self.transport.backend.close()
            self.transport.backend = self._backend()
        self._esapi = None

    def close(self) -> None:
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

    def __enter__(self) -> "TpmConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- what everyone asks --------------------------------------------------------------------
    @property
    def simulated(self) -> bool:
        return self.target.simulated

    @property
    def is_kernel_rm(self) -> bool:
        """Through /dev/tpmrm0 transient handles are virtualised and per-client."""
        p = self.target.device_path
        return bool(p) and tcti_mod.device_class(p) == "rm"  # by device number, not name

    def identity(self) -> Identity:
        if self._identity is None:
            self._identity = read_identity(self.transport)
        return self._identity

    def esapi(self):
        """An ESAPI context on the instrumented transport (created on first use)."""
        if self._esapi is None:
            from tpm2_pytss import ESAPI

            from tpmtop.tpm.esapi import EsapiOnTransport

            self._esapi = EsapiOnTransport(ESAPI(self.transport), self.transport)
        return self._esapi

    def tpm_json(self) -> dict:
        ident = self.identity()
        d = {"tcti": self.target.tcti, "manufacturer": ident.manufacturer, "vendor": ident.vendor,
             "firmware": ident.firmware, "simulated": self.simulated}
        if self.profile_name:
            d["profile"] = self.profile_name
        return d


def open_tpm(tcti: str | None = None, sim: bool = False, env: dict | None = None,
             raw_device: bool = False, recorder: Recorder | None = None,
             notice: Callable[[str], None] | None = None, timeout: float | None = None) -> TpmConnection:
    target = tcti_mod.choose(tcti, sim, env, raw_device)
    if target.note and notice:
        notice(target.note)
    return TpmConnection(target, recorder, DEFAULT_TIMEOUT if timeout is None else timeout).open()

