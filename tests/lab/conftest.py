"""The lab room: `tpmtop lab`'s relay (part of `make test`) and the boots of real kernels under
qemu (only under `make test-lab`, TPMTOP_LAB=1; they skip elsewhere). No shared fixtures."""
