"""Which TPM to talk to, following tpm2-tools' conventions.

Precedence: ``--sim`` › ``-T/--tcti`` › ``$TPM2TOOLS_TCTI`` › ``/dev/tpmrm0`` if usable › a
private swtpm (said in one line). TCTI strings are tpm2-tools' own: ``device:/dev/tpmrm0``,
``swtpm:host=127.0.0.1,port=2321``, ``mssim:host=…,port=…``, ``tabrmd:bus_name=…``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tpmtop.errors import UsageError

KNOWN = ("device", "swtpm", "mssim", "tabrmd", "abrmd", "libtpms", "cmd", "spi-helper", "spidev", "i2c-helper")
DEFAULT_DEVICE = "/dev/tpmrm0"


@dataclass(frozen=True)
class Target:
    kind: str  # "sim" or a TCTI name
    conf: str | None = None
    source: str = "default"  # "--sim", "-T", "TPM2TOOLS_TCTI", "default", "fallback"
    note: str | None = None  # one line to tell the user (e.g. why we fell back)

    @property
    def simulated(self) -> bool:
        return self.kind == "sim"

    @property
    def tcti(self) -> str:
        if self.kind == "sim":
            return "swtpm (private, embedded)"
        return f"{self.kind}:{self.conf}" if self.conf else self.kind

    @property
    def device_path(self) -> str | None:
        if self.kind == "device":
            return self.conf or "/dev/tpm0"
        return None


def parse_tcti(text: str, source: str) -> Target:
    text = text.strip()
    if not text:
        raise UsageError(f"empty TCTI string (from {source})")
    name, _, conf = text.partition(":")
    name = name.strip()
    if name == "abrmd":
        name = "tabrmd"
    if name not in KNOWN:
        if name.startswith("/dev/"):  # tpm2-tools accepts a bare device path
            return Target("device", name, source)
        raise UsageError(f"unknown TCTI '{name}' (from {source}): use device:, swtpm:, mssim: or tabrmd:")
    if name in ("swtpm", "mssim") and conf:
        parse_host_port(conf, default_port=2321)  # validate now: bad input is exit 2, not 1
    return Target(name, conf or None, source)


def parse_host_port(conf: str, default_port: int) -> tuple[str, int]:
    host, port = "127.0.0.1", default_port
    for part in filter(None, (p.strip() for p in conf.split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            raise UsageError(f"bad TCTI option '{part}': expected key=value")
        if key == "host":
            host = value
        elif key == "port":
            if not value.isdigit() or not 0 < int(value) < 65536:
                raise UsageError(f"bad TCTI port '{value}'")
            port = int(value)
        else:
            raise UsageError(f"unknown TCTI option '{key}' (expected host= or port=)")
    return host, port


def choose(tcti: str | None, sim: bool, env: dict | None = None, raw_device: bool = False,
           device: str = DEFAULT_DEVICE) -> Target:
    env = os.environ if env is None else env
    if sim and tcti:
        raise UsageError("--sim and -T/--tcti contradict each other: pick one")
    if sim:
        return Target("sim", source="--sim")
    if tcti:
        t = parse_tcti(tcti, "-T")
    elif env.get("TPM2TOOLS_TCTI"):
        t = parse_tcti(env["TPM2TOOLS_TCTI"], "TPM2TOOLS_TCTI")
    else:
        if os.path.exists(device):
            if os.access(device, os.R_OK | os.W_OK):
                return Target("device", device, "default")
            # Exists but not ours: say so rather than silently simulating.
            from tpmtop.tpm.transport import permission_hint

            return Target("sim", source="fallback", note=f"{permission_hint(device)}; using a private swtpm instead")
        return Target("sim", source="fallback", note=f"no {device} here: using a private swtpm (simulated TPM)")
    check_raw_device(t, raw_device)
    return t


def check_raw_device(t: Target, raw_device: bool) -> None:
    path = t.device_path
    if path and os.path.basename(path).startswith("tpm") and not os.path.basename(path).startswith("tpmrm") \
            and not raw_device:
        raise UsageError(
            f"{path} has no resource manager: tpmtop's handles and sessions would collide with the "
            f"kernel's and other programs'. Use {path.replace('/tpm', '/tpmrm')} or pass --raw-device")
