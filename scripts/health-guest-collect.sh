#!/bin/sh
# Run inside a kernel-vm guest (as root, busybox sh) by scripts/health-fixtures.sh: copy what
# `tpmtop health` reads into $KERNEL_VM_RESULTS/tree, laid out like the guest's root. dmesg goes
# where tpmtop's --root convention looks for a command's output (run/tpmtop/dmesg.txt). Device
# nodes and sysfs directories are kept as empty files/directories (their presence is the fact).
set -u
T=$KERNEL_VM_RESULTS/tree
mkdir -p "$T/run/tpmtop" "$T/dev" "$T/sys/class/tpm" "$T/sys/firmware/acpi/tables" "$T/sys/bus/platform/devices"
keep() {
    for f in "$@"; do
        [ -r "$f" ] || continue
        mkdir -p "$T$(dirname "$f")"
        cat "$f" > "$T$f" 2>/dev/null || rm -f "$T$f"
    done
}
dmesg > "$T/run/tpmtop/dmesg.txt"
keep /proc/interrupts /proc/cmdline /proc/uptime /proc/sys/kernel/osrelease
keep /sys/class/misc/hw_random/rng_current /sys/class/misc/hw_random/rng_available
keep /sys/module/tpm_tis/parameters/interrupts /sys/module/tpm/parameters/disable_pcr_integrity
keep /sys/class/tpm/tpm0/tpm_version_major /sys/class/tpm/tpm0/device/description
keep /sys/kernel/security/ima/runtime_measurements_count /sys/kernel/security/ima/policy
[ -e /sys/firmware/acpi/tables/TPM2 ] && head -c 76 /sys/firmware/acpi/tables/TPM2 > "$T/sys/firmware/acpi/tables/TPM2"
for d in /sys/bus/platform/devices/*; do
    case "${d##*/}" in MSFT0101*|tpm_tis*|tpm_crb*) mkdir -p "$T$d" ;; esac
done
for c in /sys/class/tpm/*; do [ -e "$c" ] && mkdir -p "$T$c"; done
[ -e /sys/class/tpm/tpm0/null_name ] && : > "$T/sys/class/tpm/tpm0/null_name"
for n in /dev/tpm0 /dev/tpmrm0; do [ -e "$n" ] && : > "$T$n"; done
# the kernel's build options, where the running kernel exports them
[ -r /proc/config.gz ] && keep /proc/config.gz
[ -r "/boot/config-$(uname -r)" ] || true
head -c 200000 /sys/kernel/security/ima/ascii_runtime_measurements \
    > "$T/sys/kernel/security/ima/ascii_runtime_measurements" 2>/dev/null || true
echo "collected $(find "$T" -type f | wc -l) files"
