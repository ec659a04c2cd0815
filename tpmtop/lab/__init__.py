"""tpmtop lab: real kernels booted under qemu with their TPM served (and timed, and shaped) by tpmtop.

Light at import (the command line's help reads DEFAULT_KERNELS): the modules below import what
they need themselves."""

# The kernels `tpmtop lab` boots unless told: the two HMAC kernels built by `make lab-kernels`
# (a session per command as 6.10/6.11, and 6.12's kept session), and Debian's 6.12 and 6.1 (HMAC off).
DEFAULT_KERNELS = "6.12-percmd,6.12-hmac,6.12,6.1"
