#!/usr/bin/env bash
# Make the fixture trees of tests/fixtures/health/ from real guests: boot a Debian kernel under
# qemu with its TIS TPM (scripts/kernel-vm.sh), copy what `tpmtop health` reads into a tree laid
# out like the guest's root, and keep it. One guest as booted, one with tpm_tis.interrupts=0.
#
#   scripts/health-fixtures.sh [SERIES [VARIANT…]]   # default 6.12 default polling; needs root
#
# Variants: default (as booted), polling (tpm_tis.interrupts=0), irq-on (tpm_tis.interrupts=1),
# dead-tpm (the guest's swtpm is killed 2 s after qemu starts, before the kernel probes the TPM:
# the firmware still declares it, and the driver's probe fails), forced-irq and forced-polling
# (acpi=off tpm_tis.force=1: no firmware table, the driver's own platform device at the TIS
# address, which probes for an interrupt, with tpm_tis.interrupts=1 and =0).
# Each becomes tests/fixtures/health/debian-SERIES-VARIANT.
set -euo pipefail
cd "$(dirname "$0")/.."
SERIES=${1:-6.12}
shift || true
VARIANTS=("$@")
((${#VARIANTS[@]})) || VARIANTS=(default polling)
OUT=tests/fixtures/health
for variant in "${VARIANTS[@]}"; do
    case $variant in
        default) append="" ;;
        polling) append="tpm_tis.interrupts=0" ;;
        irq-on) append="tpm_tis.interrupts=1" ;;
        forced-irq) append="acpi=off tpm_tis.force=1 tpm_tis.interrupts=1" ;;
        forced-polling) append="acpi=off tpm_tis.force=1 tpm_tis.interrupts=0" ;;
        dead-tpm) append="" ;;
        *) echo "health-fixtures: unknown variant $variant" >&2; exit 2 ;;
    esac
    log=$(mktemp)
    killer=
    if [ "$variant" = dead-tpm ]; then
        # the swtpm kernel-vm.sh starts for this guest (its state folder is under our cache), by pid
        ( for _ in $(seq 600); do
              q=$(pgrep -n -f "qemu-system-x86_64 .*$PWD/.cache/kernel-vm/runs/" || true)
              s=$(pgrep -n -f "swtpm socket --tpm2 --tpmstate dir=$PWD/.cache/kernel-vm/runs/" || true)
              if [ -n "$q" ] && [ -n "$s" ]; then sleep 2; kill "$s"; exit 0; fi
              sleep 0.1
          done ) &
        killer=$!
    fi
    KERNEL_VM_BOOT_PROBES=0 KERNEL_VM_APPEND="$append" scripts/kernel-vm.sh --keep --kernel "$SERIES" -- sh "$PWD/scripts/health-guest-collect.sh" 2>&1 | tee "$log"
    [ -n "$killer" ] && wait "$killer"
    run=$(sed -n 's/^kernel-vm: kept \(\S*\) .*/\1/p' "$log" | tail -n1)
    rm -f "$log"
    [ -n "$run" ] && [ -d "$run/results/tree" ] || { echo "health-fixtures: no tree from the $variant guest" >&2; exit 1; }
    rm -rf "$OUT/debian-$SERIES-$variant"
    mkdir -p "$OUT"
    cp -r "$run/results/tree" "$OUT/debian-$SERIES-$variant"
    # git keeps no empty folder: a .keep holds each one the guest had (the collector makes
    # sys/firmware/acpi/tables itself, so without ACPI that one goes)
    rmdir "$OUT/debian-$SERIES-$variant/sys/firmware/acpi/tables" 2>/dev/null \
        && rmdir -p "$OUT/debian-$SERIES-$variant/sys/firmware/acpi" 2>/dev/null || true
    find "$OUT/debian-$SERIES-$variant" -type d -empty -exec touch {}/.keep \;
    # the kernel's config is the Debian package's (the guest's /boot is the host's)
    cfg=$(ls .cache/kernel-vm/kernels/linux-image-$SERIES*/boot/config-* 2>/dev/null | head -n1)
    if [ -n "$cfg" ]; then
        mkdir -p "$OUT/debian-$SERIES-$variant/boot"
        grep -E '^(# )?CONFIG_(TCG_|HW_RANDOM_TPM|IMA)' "$cfg" > "$OUT/debian-$SERIES-$variant/boot/$(basename "$cfg")"
    fi
    rm -rf "$run"
    echo "health-fixtures: $OUT/debian-$SERIES-$variant"
done
