#!/usr/bin/env bash
# Make the fixture trees of tests/fixtures/health/ from real guests: boot a Debian kernel under
# qemu with its TIS TPM (scripts/kernel-vm.sh), copy what `tpmtop health` reads into a tree laid
# out like the guest's root, and keep it. One guest as booted, one with tpm_tis.interrupts=0.
#
#   scripts/health-fixtures.sh [SERIES]        # default 6.12; needs root (kernel-vm.sh does)
set -euo pipefail
cd "$(dirname "$0")/.."
SERIES=${1:-6.12}
OUT=tests/fixtures/health
for variant in irq polling; do
    append=""
    [ $variant = polling ] && append="tpm_tis.interrupts=0"
    log=$(mktemp)
    KERNEL_VM_BOOT_PROBES=0 KERNEL_VM_APPEND="$append" scripts/kernel-vm.sh --keep --kernel "$SERIES" -- sh "$PWD/scripts/health-guest-collect.sh" 2>&1 | tee "$log"
    run=$(sed -n 's/^kernel-vm: kept \(\S*\) .*/\1/p' "$log" | tail -n1)
    rm -f "$log"
    [ -n "$run" ] && [ -d "$run/results/tree" ] || { echo "health-fixtures: no tree from the $variant guest" >&2; exit 1; }
    rm -rf "$OUT/debian-$SERIES-$variant"
    mkdir -p "$OUT"
    cp -r "$run/results/tree" "$OUT/debian-$SERIES-$variant"
    # the kernel's config is the Debian package's (the guest's /boot is the host's)
    cfg=$(ls .cache/kernel-vm/kernels/linux-image-$SERIES*/boot/config-* 2>/dev/null | head -n1)
    if [ -n "$cfg" ]; then
        mkdir -p "$OUT/debian-$SERIES-$variant/boot"
        grep -E '^(# )?CONFIG_(TCG_|HW_RANDOM_TPM|IMA)' "$cfg" > "$OUT/debian-$SERIES-$variant/boot/$(basename "$cfg")"
    fi
    rm -rf "$run"
    echo "health-fixtures: $OUT/debian-$SERIES-$variant"
done
