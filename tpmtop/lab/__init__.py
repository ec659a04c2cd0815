"""tpmtop lab: real kernels booted under qemu with their TPM served (and timed, and shaped) by tpmtop."""
