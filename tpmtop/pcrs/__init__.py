"""Measured boot: the firmware's TCG event log and IMA's list replayed against the TPM's PCRs.

No Textual, no tpm2-pytss: ``tpmtop pcrs`` over SSH pays for neither. Modules:
:mod:`.events` (event types, decoded data), :mod:`.eventlog` (the bounded parser),
:mod:`.ima` (IMA's lists), :mod:`.replay` (per-bank replay), :mod:`.tpmread` (GetCapability
PCRS and PCR_Read), :mod:`.verdict` (match, mismatch, bank health), :mod:`.snapshot`
(--save/--diff), :mod:`.attribution` (the extend that broke a policy session).
"""
