"""``tpmtop unlock``: every TPM-sealed LUKS2 token on this machine judged against the live PCRs
(read-only headers, the PolicyPCR digest computed in software; no unseal, no authorization)."""
