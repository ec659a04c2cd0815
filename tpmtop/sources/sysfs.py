"""What a running kernel tells without a single TPM command: sysfs and securityfs, read by
the same code as ``tpmtop boot``. ``--passive`` reads only this; beside a live TPM on a device
node it fills the System panel. No Textual here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

PCRS_SHOWN = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 16, 23)


@dataclass
class SysfsSnapshot:
    tpm_present: bool
    tpm_version: str | None = None
    hmac_compiled: bool | None = None  # /sys/class/tpm/tpm0/null_name exists
    disable_pcr_integrity: str | None = None  # Y/N, 6.12+
    ima_count: int | None = None
    ima_violations: int | None = None
    pcrs: dict[int, str] = field(default_factory=dict)
    kernel: str = ""
    notes: list[str] = field(default_factory=list)


class Sysfs:
    """The dashboard's view of sysfs/securityfs, read by the same code as ``tpmtop boot``
    (:func:`tpmtop.boot.facts.collect_kernelfs` through a :class:`RootReader`), so a fixture
    tree under ``root`` looks like a machine to both."""

    def __init__(self, root: str | os.PathLike[str] = "/", tpm: str = "tpm0") -> None:
        self.root = Path(root)
        self.tpm = tpm
        self.tpm_dir = self.root / "sys/class/tpm" / tpm
        self.ima_dir = self.root / "sys/kernel/security/ima"

    def read(self, with_pcrs: bool = True) -> SysfsSnapshot:
        from tpmtop.boot.facts import collect_kernelfs, read_pcrs
        from tpmtop.boot.rootfs import RootReader

        reader = RootReader(str(self.root))
        sf = collect_kernelfs(reader)
        present = self.tpm in sf.chips
        s = SysfsSnapshot(tpm_present=present,
                          kernel=sf.value("kernel.release") or (os.uname().release if reader.live else ""))
        if present:
            s.tpm_version = sf.value("tpm.version")
            s.hmac_compiled = sf.value("tpm.null_name")
            if with_pcrs:
                s.pcrs = read_pcrs(reader, self.tpm, PCRS_SHOWN)
        else:
            chips = sf.get("tpm.chips")
            why = chips.reason if chips is not None and chips.reason else f"no {self.tpm} among {sf.chips}"
            s.notes.append(f"{why} ({self.tpm_dir})")
        s.disable_pcr_integrity = sf.value("tpm.disable_pcr_integrity")
        s.ima_count = sf.value("ima.measurements")
        s.ima_violations = sf.value("ima.violations")
        if s.ima_count is None:
            ima = sf.get("ima.measurements")
            s.notes.append(ima.reason if ima is not None and ima.reason else f"no {self.ima_dir}")
        return s
