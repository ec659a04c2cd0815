#!/bin/sh
# Run inside a kernel-vm guest (scripts/kernel-vm.sh --keep -- sh scripts/firmware-eventlog.sh):
# copy out what the firmware measured — its TCG event log, IMA's list, and the TPM's PCRs read
# through the guest kernel — into the run's results folder, for tests/fixtures/pcrs/.
# The guest's TPM is the private swtpm kernel-vm.sh started, so nothing real is read.
set -u
out=${KERNEL_VM_RESULTS:?run this inside scripts/kernel-vm.sh}
sec=/sys/kernel/security
mountpoint -q "$sec" 2>/dev/null || mount -t securityfs securityfs "$sec" 2>/dev/null
# PCRs first, then the lists, as tpmtop pcrs reads them: IMA's PCR 10 moves with every file
# measured (cp included), so the list read after holds the PCR's value as one of its prefixes.
tpm2_pcrread -T device:/dev/tpmrm0 > "$out/pcrs.yaml" 2>&1
cp "$sec/tpm0/binary_bios_measurements" "$out/binary_bios_measurements" || echo "no event log"
cp "$sec/ima/ascii_runtime_measurements" "$out/ascii_runtime_measurements" 2>/dev/null
cp "$sec/ima/binary_runtime_measurements" "$out/binary_runtime_measurements" 2>/dev/null
uname -r > "$out/kernel-release"
ls -l "$out"
