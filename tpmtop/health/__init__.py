"""``tpmtop health``: the TPM's dictionary-attack state, the driver's and the kernel's set-up,
and IMA's list, each as a verdict with its evidence. Core only: no Textual here."""
