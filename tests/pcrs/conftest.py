"""The pcrs room: `tpmtop pcrs` on the real firmware logs in tests/fixtures/pcrs (held to
tpm2_eventlog and to the guest TPM's PCRs), on hostile logs, and against private swtpms whose
PCRs tpm2-tools extended (never tpmtop)."""
