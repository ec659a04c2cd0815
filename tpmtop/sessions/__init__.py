"""The session engine: the four HMAC session strategies the kernel developers argued about,
run by two crypto engines (tpm2-pytss ESAPI, and tpmtop's own), with per-operation
accounting. No Textual here."""
