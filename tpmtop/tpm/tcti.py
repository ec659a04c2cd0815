"""Which TPM to talk to, following tpm2-tools' conventions.

Precedence: ``--sim`` › ``-T/--tcti`` › ``$TPM2TOOLS_TCTI`` › ``/dev/tpmrm0`` if usable (with
``--raw-device`` then ``/dev/tpm0``). Nothing usable is an error (exit 1) naming what was tried
and ``--sim``: an operator whose TPM driver did not load must not get a simulator's figures.
Only the dashboard, and only when nothing was selected explicitly, may open on a private swtpm
instead (``fallback=True``); the reason travels with the target (:attr:`Target.simulated_reason`)
to the first screen and into every capture. TCTI strings are tpm2-tools' own: ``device:/dev/tpmrm0``,
``swtpm:host=127.0.0.1,port=2321``, ``mssim:host=…,port=…``, ``tabrmd:bus_name=…``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from tpmtop.errors import NoTpm, UsageError


class TargetKind(StrEnum):
    """What a :class:`Target` is: tpmtop's private simulator, or a TCTI by tpm2-tss's name."""

    SIM = "sim"
    DEVICE = "device"
    SWTPM = "swtpm"
    MSSIM = "mssim"
    TABRMD = "tabrmd"
    LIBTPMS = "libtpms"
    CMD = "cmd"
    SPI_HELPER = "spi-helper"
    SPIDEV = "spidev"
    I2C_HELPER = "i2c-helper"


# The TCTI names a -T string may start with ("abrmd" is tpm2-tools' alias of tabrmd).
KNOWN = tuple(k.value for k in TargetKind if k is not TargetKind.SIM) + ("abrmd",)
DEFAULT_DEVICE = "/dev/tpmrm0"
RAW_DEVICE = "/dev/tpm0"


@dataclass(frozen=True)
class Target:
    kind: TargetKind
    conf: str | None = None
    source: str = "default"  # "--sim", "-T", "TPM2TOOLS_TCTI", "default", "fallback"
    note: str | None = None  # one line to tell the user (e.g. why we fell back)

    @property
    def simulated(self) -> bool:
        return self.kind is TargetKind.SIM

    @property
    def simulated_reason(self) -> str | None:
        """Why a simulator answers (None for a real TPM): "--sim", or why no TPM was usable."""
        if not self.simulated:
            return None
        return self.note if self.source == "fallback" and self.note else "--sim was given"

    @property
    def tcti(self) -> str:
        if self.kind is TargetKind.SIM:
            return "swtpm (private, embedded)"
        return f"{self.kind}:{self.conf}" if self.conf else self.kind

    @property
    def device_path(self) -> str | None:
        if self.kind is TargetKind.DEVICE:
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
            return Target(TargetKind.DEVICE, name, source)
        raise UsageError(f"unknown TCTI '{name}' (from {source}): use device:, swtpm:, mssim: or tabrmd:")
    if name in ("swtpm", "mssim") and conf:
        parse_host_port(conf, default_port=2321)  # validate now: bad input is exit 2, not 1
    return Target(TargetKind(name), conf or None, source)


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


def choose(tcti: str | None, sim: bool, env: Mapping[str, str] | None = None, raw_device: bool = False,
           device: str = DEFAULT_DEVICE, fallback: bool = False, raw: str = RAW_DEVICE) -> Target:
    """*fallback*: a private swtpm may stand in when nothing was selected and no TPM is usable
    (the dashboard, which says why on its first screen); otherwise that is an error."""
    environ: Mapping[str, str] = os.environ if env is None else env
    if sim and tcti:
        raise UsageError("--sim and -T/--tcti contradict each other: pick one")
    if sim:
        return Target(TargetKind.SIM, source="--sim")
    if tcti:
        t = parse_tcti(tcti, "-T")
    elif environ.get("TPM2TOOLS_TCTI"):
        t = parse_tcti(environ["TPM2TOOLS_TCTI"], "TPM2TOOLS_TCTI")
    else:
        tried: list[str] = []
        # --raw-device is a choice of a TPM device too: /dev/tpm0 when there is no tpmrm0
        for path in (device, raw) if raw_device else (device,):
            if os.path.exists(path):
                if os.access(path, os.R_OK | os.W_OK):
                    return Target(TargetKind.DEVICE, path, "--raw-device" if raw_device else "default")
                from tpmtop.tpm.transport import permission_hint

                tried.append(permission_hint(path))
            else:
                tried.append(f"no {path}")
        why = "; ".join(tried) + ("" if raw_device else ", no -T, no $TPM2TOOLS_TCTI")
        if fallback and not raw_device:
            return Target(TargetKind.SIM, source="fallback", note=f"{why}: using a private swtpm (simulated TPM)")
        raise NoTpm(f"no TPM to use: {why} (--sim runs on a private swtpm)")
    check_raw_device(t, raw_device)
    return t


# The kernel's TPM device numbers (drivers/char/tpm/tpm-chip.c): the first chip's /dev/tpm0 is
# the misc device 10:224 (TPM_MINOR); every other /dev/tpmN is N on the "tpm" major, and
# /dev/tpmrmN is N + TPM_NUM_DEVICES (65536) on the same major.
MISC_MAJOR, TPM_MINOR, TPM_NUM_DEVICES = 10, 224, 65536


def device_class(path: str, sysfs: str = "/sys/dev/char", proc_devices: str = "/proc/devices") -> str | None:
    """What the node at *path* really is, by its device number, whatever it or a symlink to
    it is called: "rm" (/dev/tpmrmN), "raw" (/dev/tpmN), "other" (another character device),
    "not-char" (a file, a directory…), or None when nothing is there."""
    import re
    import stat

    try:
        st = os.stat(path)  # follows symlinks: /dev/char/10:224 or a link named tpmrm0
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return "not-char"
    major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    # sysfs names the kernel's device for that number (tpm0, tpmrm0, null, vtpm0 …)
    entry = f"{sysfs}/{major}:{minor}"
    if os.path.exists(entry):
        name = os.path.basename(os.path.realpath(entry))
        return "rm" if re.fullmatch(r"tpmrm\d+", name) else "raw" if re.fullmatch(r"tpm\d+", name) else "other"
    # No sysfs entry (sysfs not mounted, or the node outlived its driver): the kernel's rules.
    if (major, minor) == (MISC_MAJOR, TPM_MINOR):
        return "raw"
    try:
        with open(proc_devices, encoding="ascii", errors="replace") as f:
            tpm_majors = {int(m) for m, n in re.findall(r"^\s*(\d+)\s+(\S+)$", f.read(), re.M) if n == "tpm"}
    except OSError:
        tpm_majors = set()
    if major in tpm_majors:
        return "rm" if minor >= TPM_NUM_DEVICES else "raw"
    return "other"


def check_raw_device(t: Target, raw_device: bool) -> None:
    """Only a resource-manager node (/dev/tpmrmN) is used without --raw-device. Decided by the
    device number, not the name: a symlink to /dev/tpm0, /dev/char/10:224 or a node
    renamed tpmrm0 is still the raw TPM whose handles collide with everyone else's."""
    path = t.device_path
    if not path or raw_device:
        return
    kind = device_class(path)
    base = os.path.basename(path)
    if kind is None:
        # Nothing there: opening it will say so (exit 1), unless the name alone shows a raw TPM.
        if re.fullmatch(r"tpm\d+", base):
            kind = "raw"
        else:
            return
    if kind == "rm":
        return
    if kind == "raw":
        rm = path.replace("/tpm", "/tpmrm") if re.fullmatch(r"tpm\d+", base) else "/dev/tpmrm0"
        real = os.path.realpath(path)
        shown = path if real == path else f"{path} (-> {real})"
        raise UsageError(
            f"{shown} is a raw TPM device with no resource manager: tpmtop's handles and sessions would "
            f"collide with the kernel's and other programs'. Use {rm} or pass --raw-device")
    what = "not a character device" if kind == "not-char" else "a character device that is not a TPM"
    raise UsageError(f"{path} is {what} (expected /dev/tpmrmN); pass --raw-device if it really is a TPM")
