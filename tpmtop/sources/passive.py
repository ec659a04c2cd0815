"""What a running kernel tells without a single TPM command: sysfs and securityfs.

This is all ``--passive`` reads. On Linux 6.12+ every user-space command to /dev/tpmrm0 ends
the kernel's kept HMAC session (the observer effect), so these files are the only way to
watch a kernel's TPM use without changing it. Reading ``pcr-sha256/N`` makes the kernel send
a PCR_Read, which uses no session; it is read rarely all the same. No Textual here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tpmtop.sources.protocol import Capabilities, HeaderInfo, SourceBase

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


class PassiveSource(SourceBase):
    """``--passive``: no TPM connection at all, only :class:`Sysfs`."""

    caps = Capabilities("passive", sysfs=True,
                        why_not="--passive sends nothing to the TPM: only sysfs and securityfs are read")

    mode = "-"

    def __init__(self, sysfs: Sysfs | None = None, interval: float = 1.0, note: str | None = None) -> None:
        super().__init__()
        self.sysfs: Sysfs = sysfs or Sysfs()
        self.note = note  # why there is no more than sysfs (kept in the header: a notice goes away)
        self.poll_interval = interval
        self.tcti = f"none (--passive: {self.sysfs.tpm_dir} and securityfs only)"

    def header(self) -> HeaderInfo:
        # Say what sysfs says: "not contacted" only when there is a TPM not to contact.
        there = self.sysfs.tpm_dir.is_dir()
        return HeaderInfo(state="passive", identity="kernel TPM (not contacted)" if there else
                          f"no TPM here (no {self.sysfs.tpm_dir})", tcti=self.tcti, simulated=False,
                          engine="-", mode="-", op="-", extra="no TPM traffic: sysfs and securityfs only",
                          marker=self.note.removeprefix("sysfs only, ") if self.note else "",
                          tooltip=self.note)
