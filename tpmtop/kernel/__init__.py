"""The kernel's own TPM traffic through tracefs kprobe events (no Textual)."""
