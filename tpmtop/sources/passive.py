"""What a running kernel tells without a single TPM command: sysfs and securityfs.

This is all ``--passive`` reads. On Linux 6.12+ every user-space command to /dev/tpmrm0 ends
the kernel's kept HMAC session (the observer effect), so these files are the only way to
watch a kernel's TPM use without changing it. Reading ``pcr-sha256/N`` makes the kernel send
a PCR_Read, which uses no session; it is read rarely all the same. No Textual here.
"""

from __future__ import annotations

from tpmtop.sources.protocol import UNSET, Capabilities, HeaderInfo, PassiveFacts, SourceBase, SourceKind, SourceState
from tpmtop.sources.sysfs import Sysfs


class PassiveSource(SourceBase):
    """``--passive``: no TPM connection at all, only :class:`Sysfs`."""

    caps = Capabilities(SourceKind.PASSIVE, sysfs=True, health=True,
                        why_not="--passive sends nothing to the TPM: only sysfs and securityfs are read")

    mode = UNSET

    def __init__(self, sysfs: Sysfs | None = None, interval: float = 1.0, note: str | None = None) -> None:
        super().__init__()
        self.sysfs: Sysfs = sysfs or Sysfs()
        self.note = note  # why there is no more than sysfs (kept in the header: a notice goes away)
        self.poll_interval = interval
        self.tcti = "none"  # no TPM connection (the header says what is read instead)

    def header(self) -> HeaderInfo:
        # Say what sysfs says: "not contacted" only when there is a TPM not to contact.
        facts = PassiveFacts(str(self.sysfs.tpm_dir), self.sysfs.tpm_dir.is_dir(), self.note)
        # the note's reason alone beside the state: "sysfs only" is what the state says already
        return HeaderInfo(state=SourceState.PASSIVE, tcti=self.tcti, simulated=False, engine=UNSET, mode=UNSET,
                          op=UNSET, marker=self.note.removeprefix("sysfs only, ") if self.note else "", facts=facts)
