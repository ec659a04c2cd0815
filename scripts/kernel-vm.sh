#!/usr/bin/env bash
# Run tpmtop's live kernel-tracing path against a real kernel and a real (swtpm) TPM: boot
# Debian's kernel in a KVM guest whose root is this machine's own file system (9p, read-only),
# run a command there as root (default: the live kernel tests), power off, report.
#
#   scripts/kernel-vm.sh                         # the live tests on every kernel in $KERNELS
#   scripts/kernel-vm.sh --kernel 6.12           # one series
#   scripts/kernel-vm.sh --kernel 6.12-hmac      # the lab's HMAC kernel (make lab-kernels; also 6.12-percmd, 6.12-nohmac)
#   scripts/kernel-vm.sh --kernel 6.1 -- sh -c 'tpmtop kernel --duration 5'   # any command
#   scripts/kernel-vm.sh --keep                  # keep the run folder (console log, dmesg, output)
#   scripts/kernel-vm.sh --prepare               # only fetch the kernels and build their initramfs:
#                                                # one line per kernel, "SERIES VMLINUZ INITRD" (tpmtop lab)
#
# Needs root (apt, KVM, the 9p export of /). Installs what is missing from Debian's archive:
# qemu-system-x86 and busybox-static; the kernels are not installed into this system, only
# downloaded (apt-get download) and unpacked (dpkg-deb -x) into .cache/kernel-vm/.
# Environment: KERNELS (default "6.1 6.12"), KERNEL_VM_PYTHON (the interpreter the guest runs
# pytest with; default .venv/bin/python), KERNEL_VM_CPUS (2), KERNEL_VM_MEM (1536, MiB),
# KERNEL_VM_TIMEOUT (seconds one guest may run, 900), KERNEL_VM_APPEND (more kernel parameters),
# KERNEL_VM_BOOT_PROBES (1: boot with tpmtop's boot-time probes, `tpmtop kernel --boot-cmdline`; 0: without),
# KERNEL_VM_FIRMWARE (seabios: qemu's default; ovmf: Debian's OVMF, UEFI, with a private copy of
# its variable store — each measures the boot into the swtpm and leaves a TCG event log).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd -P)
CACHE=$REPO/.cache/kernel-vm
KERNELS=${KERNELS:-"6.1 6.12"}
CPUS=${KERNEL_VM_CPUS:-2}
MEM=${KERNEL_VM_MEM:-1536}
TIMEOUT=${KERNEL_VM_TIMEOUT:-900}
APPEND=${KERNEL_VM_APPEND:-}
PY=${KERNEL_VM_PYTHON:-$REPO/.venv/bin/python}
KEEP=0
PREPARE=0
CMD=()

die() { echo "kernel-vm: $*" >&2; exit 1; }
note() { echo "kernel-vm: $*" >&2; }

while (($#)); do
    case $1 in
        --kernel) KERNELS=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --prepare) PREPARE=1; shift ;;
        --) shift; CMD=("$@"); break ;;
        -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done

[ "$(id -u)" -eq 0 ] || die "needs root (apt-get, /dev/kvm, and a 9p export of / that root can read)"
[ -x "$PY" ] || die "no Python at $PY for the guest to run (make bootstrap, or set KERNEL_VM_PYTHON)"
"$PY" -c 'import pytest' 2>/dev/null || die "$PY has no pytest (make bootstrap)"

# ---- packages -------------------------------------------------------------------------------
apt_updated=0
apt_update_once() {
    ((apt_updated)) && return 0
    apt_updated=1
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || die "apt-get update failed"
}
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v swtpm >/dev/null || need+=(swtpm)
command -v tpm2_getrandom >/dev/null || need+=(tpm2-tools)
FIRMWARE=${KERNEL_VM_FIRMWARE:-seabios}
case $FIRMWARE in
    seabios) ;;
    ovmf) [ -f /usr/share/OVMF/OVMF_CODE_4M.fd ] || need+=(ovmf) ;;
    *) die "KERNEL_VM_FIRMWARE must be seabios or ovmf, not $FIRMWARE" ;;
esac
if ((${#need[@]})); then
    note "installing ${need[*]} (Debian, no recommends)"
    apt_update_once
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
        || die "could not install ${need[*]} with apt-get"
fi
BUSYBOX=/bin/busybox
[ -x "$BUSYBOX" ] || die "busybox-static installed but /bin/busybox is missing"

# ---- KVM ------------------------------------------------------------------------------------
# KVM when /dev/kvm opens and is hardware virtualisation (kvm_intel / kvm_amd). A /dev/kvm
# from kvm_pvm (PVM: software nesting inside a cloud VM, as on Firecracker hosts) runs only
# PVM-enabled guest kernels: a stock Debian kernel crawls there (30 s to reach the memory
# set-up) and dies on an instruction PVM cannot emulate (lock cmpxchg16b), so TCG it is.
# KERNEL_VM_ACCEL=kvm|tcg overrides.
ACCEL_NAME=${KERNEL_VM_ACCEL:-}
if [ -z "$ACCEL_NAME" ]; then
    if ! { [ -c /dev/kvm ] && exec 9<>/dev/kvm; } 2>/dev/null; then
        note "/dev/kvm is not usable here: falling back to TCG (emulation, slower)"
        ACCEL_NAME=tcg
    else
        exec 9>&-
        if [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; then
            ACCEL_NAME=kvm
        elif [ -d /sys/module/kvm_pvm ]; then
            note "/dev/kvm here is kvm_pvm (PVM nesting), which boots only PVM guest kernels: using TCG (emulation)"
            ACCEL_NAME=tcg
        else
            ACCEL_NAME=kvm
        fi
    fi
fi
case $ACCEL_NAME in
    kvm) ACCEL=(-enable-kvm -cpu host) ;;
    tcg) ACCEL=(-accel tcg,thread=multi -cpu max); TIMEOUT=$((TIMEOUT * 2)) ;;
    *) die "KERNEL_VM_ACCEL must be kvm or tcg, not $ACCEL_NAME" ;;
esac

# ---- kernels --------------------------------------------------------------------------------
# The newest linux-image-<release>-amd64 of a series: the series' meta package's dependency
# (bookworm: linux-image-amd64 is 6.1, linux-image-6.12-amd64 is 6.12 LTS).
kernel_package() {
    local series=$1 meta dep
    for meta in "linux-image-$series-amd64" linux-image-amd64; do
        dep=$(apt-cache depends "$meta" 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n1)
        if [ -n "$dep" ] && [[ $dep == linux-image-$series.* || $dep == linux-image-$series-* ]]; then
            echo "$dep"
            return 0
        fi
    done
    return 1
}

# Prints the unpacked tree of a series' kernel (downloaded and unpacked once, then cached).
fetch_kernel() {
    local series=$1 pkg dir deb
    pkg=$(kernel_package "$series") || { apt_update_once; pkg=$(kernel_package "$series"); } \
        || die "Debian's archive has no linux-image for $series on this machine (apt-cache depends linux-image-$series-amd64)"
    dir=$CACHE/kernels/$pkg
    if [ ! -f "$dir/.unpacked" ]; then
        mkdir -p "$CACHE/debs" && rm -rf "$dir"
        note "downloading $pkg (not installed: unpacked into ${dir#"$REPO"/})"
        (cd "$CACHE/debs" && apt-get download "$pkg" >/dev/null 2>&1) || die "apt-get download $pkg failed"
        deb=$(ls "$CACHE/debs/${pkg}_"*.deb 2>/dev/null | head -n1)
        [ -n "$deb" ] || die "apt-get download $pkg left no .deb"
        mkdir -p "$dir" && dpkg-deb -x "$deb" "$dir" || die "dpkg-deb -x $deb failed"
        rm -f "$deb"
        touch "$dir/.unpacked"
    fi
    echo "$dir"
}

# ---- one guest ------------------------------------------------------------------------------
SWTPM_PID= QEMU_PID= RUN=
cleanup() {
    local pid
    for pid in $QEMU_PID $SWTPM_PID; do
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null
            for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -9 "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
        fi
    done
    QEMU_PID= SWTPM_PID=
    if [ -n "$RUN" ] && ((!KEEP)); then rm -rf "$RUN"; fi
}
trap cleanup EXIT
trap 'echo "kernel-vm: interrupted" >&2; exit 130' INT TERM HUP

# The default command: the live kernel tests, which must run (not skip) in the guest.
default_cmd() {
    local tests=(tests/kernel/test_kernel_trace.py)
    [ -f tests/kernel/test_kernel_live.py ] && tests+=(tests/kernel/test_kernel_live.py)
    echo "exec \"$PY\" -m pytest -q -p no:cacheprovider -o addopts=-ra ${tests[*]}"
}

VERDICTS=()
FAILED=0
# Fetches a series' kernel and builds its initramfs; sets KDIR, KVER, VMLINUZ, INITRD.
# 6.12-hmac / 6.12-nohmac / 6.12-percmd: the lab's kernels (scripts/lab-kernels.sh, everything built in, so
# the initramfs carries no modules).
prepare_kernel() {
    local series=$1 mods
    case $series in
        *-hmac|*-nohmac|*-percmd)
            VMLINUZ=$(scripts/lab-kernels.sh --print "$series") \
                || die "kernel $series is not built: make lab-kernels (scripts/lab-kernels.sh $series)"
            KDIR=$(dirname "$VMLINUZ")
            KVER=$(cat "$KDIR/release" 2>/dev/null || echo "$series")
            INITRD=$CACHE/initramfs-builtin-$(cat scripts/kernel-vm-init.sh scripts/kernel_vm_initramfs.py | sha256sum | cut -c1-12).cpio.gz
            if [ ! -f "$INITRD" ]; then
                mkdir -p "$CACHE"
                "$PY" scripts/kernel_vm_initramfs.py "$CACHE/no-modules" "$BUSYBOX" scripts/kernel-vm-init.sh "$INITRD" \
                    >/dev/null || die "could not build the initramfs for $series"
            fi
            return 0 ;;
    esac
    KDIR=$(fetch_kernel "$series") || exit 1
    VMLINUZ=$(ls "$KDIR"/boot/vmlinuz-* | head -n1)
    KVER=${VMLINUZ##*/vmlinuz-}
    # the initramfs, rebuilt when this script, the init or the module list change
    mods="9p 9pnet 9pnet_virtio netfs virtio_pci tpm tpm_tis tpm_tis_core"
    INITRD=$CACHE/initramfs-$KVER-$(cat scripts/kernel-vm-init.sh scripts/kernel_vm_initramfs.py <(echo "$mods") | sha256sum | cut -c1-12).cpio.gz
    if [ ! -f "$INITRD" ]; then
        rm -f "$CACHE/initramfs-$KVER-"*.cpio.gz
        "$PY" scripts/kernel_vm_initramfs.py "$KDIR/lib/modules/$KVER" "$BUSYBOX" scripts/kernel-vm-init.sh "$INITRD" $mods \
            >"$CACHE/initramfs-$KVER.modules" || die "could not build the initramfs for $KVER"
    fi
}

run_guest() {
    local series=$1 kdir kver vmlinuz initrd cmd started ended status release summary passed failed
    prepare_kernel "$series"
    kdir=$KDIR kver=$KVER vmlinuz=$VMLINUZ initrd=$INITRD
    mkdir -p "$CACHE/runs"
    RUN=$(mktemp -d "$CACHE/runs/$kver.XXXXXX")
    mkdir -p "$RUN/results" "$RUN/tpm"
    if ((${#CMD[@]})); then cmd=$(printf '%q ' "${CMD[@]}"); else cmd=$(default_cmd); fi
    # tpmtop's boot-time probes (tpmtop kernel --boot-cmdline, for this kernel's release): the
    # driver's start-up and IMA's first measurements are recorded in the top-level buffer
    local append=$APPEND
    if [ "${KERNEL_VM_BOOT_PROBES:-1}" = 1 ]; then
        append="$append $(PYTHONPATH=$REPO "$PY" -c 'import sys; from tpmtop.kernel.probes import boot_cmdline; print(boot_cmdline(release=sys.argv[1]))' "$kver")" \
            || die "tpmtop kernel --boot-cmdline failed"
    fi
    printf '%s\n' "$cmd" > "$RUN/results/cmd.sh"
    local venv_bin
    venv_bin=$(dirname "$PY")
    cat > "$RUN/results/vm.env" <<EOF
RESULTS='$RUN/results'
WORKDIR='$REPO'
RUN_AS_ENV='HOME=/root TERM=dumb LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$REPO KERNEL_VM=1 TPMTOP_KERNEL_LIVE=required KERNEL_VM_RESULTS=$RUN/results PATH=$venv_bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
EOF

    # the guest's TPM: a private swtpm on a unix socket in the run folder (qemu's tpm docs)
    swtpm socket --tpm2 --tpmstate dir="$RUN/tpm" --ctrl type=unixio,path="$RUN/swtpm.sock" \
        --log file="$RUN/swtpm.log",level=1 >/dev/null 2>&1 &
    SWTPM_PID=$!
    for _ in $(seq 50); do [ -S "$RUN/swtpm.sock" ] && break; kill -0 $SWTPM_PID 2>/dev/null || break; sleep 0.1; done
    [ -S "$RUN/swtpm.sock" ] || die "swtpm did not start (see $RUN/swtpm.log)"

    # UEFI: OVMF's code read-only, and a private copy of its variable store for this guest
    local fw=()
    if [ "$FIRMWARE" = ovmf ]; then
        cp /usr/share/OVMF/OVMF_VARS_4M.fd "$RUN/ovmf-vars.fd" || die "cannot copy OVMF's variable store"
        fw=(-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd
            -drive if=pflash,format=raw,unit=1,file="$RUN/ovmf-vars.fd")
    fi
    note "booting $kver ($ACCEL_NAME, $FIRMWARE, $CPUS vCPUs, $MEM MiB): ${cmd:0:120}"
    started=$(date +%s.%N)
    qemu-system-x86_64 "${ACCEL[@]}" "${fw[@]}" -smp "$CPUS" -m "$MEM" \
        -nographic -no-reboot -monitor none -serial "file:$RUN/console.log" \
        -kernel "$vmlinuz" -initrd "$initrd" \
        -append "console=ttyS0 loglevel=4 ima_policy=tcb panic=-1 rdinit=/init $append" \
        -chardev socket,id=chrtpm,path="$RUN/swtpm.sock" -tpmdev emulator,id=tpm0,chardev=chrtpm \
        -device tpm-tis,tpmdev=tpm0 \
        -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
        -virtfs local,path="$RUN/results",mount_tag=results,security_model=none,multidevs=remap \
        -nic none </dev/null >"$RUN/qemu.log" 2>&1 &
    QEMU_PID=$!
    # wait for it, but not for ever (a guest that hangs is stopped, and said so)
    local waited=0 timed_out=0
    while kill -0 "$QEMU_PID" 2>/dev/null; do
        if ((waited >= 2 * TIMEOUT)); then
            timed_out=1
            kill "$QEMU_PID" 2>/dev/null
            sleep 2
            kill -9 "$QEMU_PID" 2>/dev/null
            break
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
    wait "$QEMU_PID"
    status=$?
    QEMU_PID=
    ended=$(date +%s.%N)
    kill "$SWTPM_PID" 2>/dev/null; wait "$SWTPM_PID" 2>/dev/null; SWTPM_PID=

    local secs
    secs=$(awk -v a="$started" -v b="$ended" 'BEGIN { printf "%.0f", b - a }')
    if ((timed_out)); then
        note "$kver: the guest did not power off within ${TIMEOUT}s; last console lines:"
        tail -n 20 "$RUN/console.log" >&2
    elif [ "$status" -ne 0 ]; then
        note "$kver: qemu exited $status: $(tail -n 3 "$RUN/qemu.log" | tr '\n' ' ')"
    fi
    release=$(cat "$RUN/results/release" 2>/dev/null || echo "$kver")
    if [ ! -f "$RUN/results/status" ]; then
        note "$kver: the command did not finish (no exit status); last console lines:"
        tail -n 15 "$RUN/console.log" >&2
        VERDICTS+=("kernel-vm: $release: the guest failed before the command finished (${secs}s)")
        FAILED=1
        return
    fi
    status=$(cat "$RUN/results/status")
    if ((${#CMD[@]})); then
        cat "$RUN/results/output.log"
        VERDICTS+=("kernel-vm: $release: exit status $status (${secs}s)")
        [ "$status" -eq 0 ] || FAILED=1
    else
        # pytest's closing line: "N passed, M failed, K skipped in 12.3s"
        summary=$(grep -E '^=*.* (passed|failed|error|errors|skipped|no tests ran)( |,).* in [0-9.]+s' "$RUN/results/output.log" | tail -n1)
        passed=$(grep -oE '[0-9]+ passed' <<<"$summary" | cut -d' ' -f1)
        failed=0
        for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$summary" | cut -d' ' -f1); do failed=$((failed + n)); done
        grep -E '^(FAILED|ERROR|SKIPPED) ' "$RUN/results/output.log"
        VERDICTS+=("kernel-vm: $release: ${passed:-0} passed, ${failed:-0} failed (${secs}s, $ACCEL_NAME)")
        [ "$status" -eq 0 ] && [ "${failed:-0}" -eq 0 ] && [ "${passed:-0}" -gt 0 ] || FAILED=1
    fi
    if ((KEEP)); then note "kept $RUN (console.log, results/output.log, results/dmesg.txt)"; fi
    if ((!KEEP)); then rm -rf "$RUN"; fi
    RUN=
}

if ((PREPARE)); then
    for k in $KERNELS; do prepare_kernel "$k"; echo "$k $VMLINUZ $INITRD"; done
    exit 0
fi
for k in $KERNELS; do run_guest "$k"; done
printf '%s\n' "${VERDICTS[@]}"
exit $FAILED
