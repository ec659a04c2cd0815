#!/usr/bin/env bash
# Build the lab's kernels (tpmtop lab) from Debian's linux-source-6.12: a small guest
# configuration (defconfig + kvm_guest.config + what the lab needs: tpm_tis, IMA, securityfs,
# kprobe events, 9p root, IKCONFIG_PROC; no debug info) in two variants that differ in one
# option, CONFIG_TCG_TPM2_HMAC:
#
#   scripts/lab-kernels.sh                # both variants: 6.12-hmac, then 6.12-nohmac
#   scripts/lab-kernels.sh 6.12-hmac      # one
#   scripts/lab-kernels.sh --print 6.12-hmac   # the cached bzImage's path (exit 1 if not built)
#
# A build is cached under a hash of what makes its .config (the configure step, the options, the
# source package's version) and skipped when that bzImage exists:
# $LAB_CACHE/kernels/<variant>-<hash>/{bzImage,config,build.log,time.txt,release}.
# The cache lives outside the repository (a kernel tree is ~1.5 GB and every clone and worktree
# shares it): LAB_CACHE, default /var/cache/tpmtop-lab as root, ~/.cache/tpmtop-lab otherwise.
# The compile runs at nice 19 with LAB_JOBS jobs (default: the number of CPUs), its log and
# /usr/bin/time -v figures kept beside the image. Needs root only to install Debian packages
# (flex bison libelf-dev bc libssl-dev time linux-source-6.12) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then DEFAULT_CACHE=/var/cache/tpmtop-lab; else DEFAULT_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/tpmtop-lab; fi
LAB_CACHE=${LAB_CACHE:-$DEFAULT_CACHE}
JOBS=${LAB_JOBS:-$(nproc)}
SERIES=6.12

die() { echo "lab-kernels: $*" >&2; exit 1; }
note() { echo "lab-kernels: $*" >&2; }

PRINT=0
VARIANTS=()
while (($#)); do
    case $1 in
        --print) PRINT=1; shift ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        6.12-hmac|6.12-nohmac) VARIANTS+=("$1"); shift ;;
        *) die "unknown argument $1 (variants: 6.12-hmac 6.12-nohmac; see --help)" ;;
    esac
done
((${#VARIANTS[@]})) || VARIANTS=(6.12-hmac 6.12-nohmac)

# The options the lab's guest needs, on top of defconfig + kvm_guest.config (=y, built in: the
# lab builds bzImage only, no modules).
LAB_OPTIONS="TCG_TPM TCG_TIS TCG_TIS_CORE IMA SECURITY SECURITYFS INTEGRITY KPROBES KPROBE_EVENTS
FTRACE FUNCTION_TRACER DYNAMIC_FTRACE NET_9P NET_9P_VIRTIO 9P_FS VIRTIO_PCI HW_RANDOM_TPM
IKCONFIG IKCONFIG_PROC DEVTMPFS TMPFS"

# ---- packages -------------------------------------------------------------------------------
need=()
for c in flex bison bc; do command -v $c >/dev/null || need+=($c); done
[ -x /usr/bin/time ] || need+=(time)
dpkg -s libelf-dev >/dev/null 2>&1 || need+=(libelf-dev)
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
dpkg -s "linux-source-$SERIES" >/dev/null 2>&1 || need+=("linux-source-$SERIES")
if ((${#need[@]})); then
    ((PRINT)) && exit 1
    [ "$(id -u)" -eq 0 ] || die "missing Debian packages ${need[*]} (run as root, or apt-get install them)"
    note "installing ${need[*]} (Debian, no recommends)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
        || die "could not install ${need[*]} with apt-get"
fi
TARBALL=$(ls /usr/src/linux-source-$SERIES.tar.* 2>/dev/null | head -n1)
[ -n "$TARBALL" ] || die "linux-source-$SERIES is installed but /usr/src/linux-source-$SERIES.tar.* is missing"
PKGVER=$(dpkg-query -W -f '${Version}' "linux-source-$SERIES")

# ---- source tree (unpacked once per package version) ----------------------------------------
SRC=$LAB_CACHE/src/linux-source-$SERIES-$PKGVER
if [ ! -f "$SRC/.unpacked" ]; then
    ((PRINT)) && exit 1
    note "unpacking $TARBALL into $SRC"
    rm -rf "$SRC" && mkdir -p "$LAB_CACHE/src"
    tmp=$(mktemp -d "$LAB_CACHE/src/.unpack.XXXXXX")
    tar -xaf "$TARBALL" -C "$tmp"
    mv "$tmp/linux-source-$SERIES" "$SRC" && rmdir "$tmp"
    touch "$SRC/.unpacked"
fi

# ---- one variant ----------------------------------------------------------------------------
configure() {   # $1 variant, $2 object dir: writes $2/.config
    local variant=$1 obj=$2 opt hmac
    mkdir -p "$obj"
    make -s -C "$SRC" O="$obj" defconfig >/dev/null
    make -s -C "$SRC" O="$obj" kvm_guest.config >/dev/null
    local args=()
    for opt in $LAB_OPTIONS; do args+=(-e "$opt"); done
    case $variant in *-nohmac) hmac=-d ;; *) hmac=-e ;; esac
    args+=("$hmac" TCG_TPM2_HMAC)
    # no debug info (the build would not fit a small machine), a release name that says which
    args+=(-d DEBUG_INFO -d DEBUG_INFO_DWARF4 -d DEBUG_INFO_DWARF5 -d DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT
           -e DEBUG_INFO_NONE -d DEBUG_INFO_BTF --set-str LOCALVERSION "-tpmtop-${variant#*-}"
           -d LOCALVERSION_AUTO)
    "$SRC/scripts/config" --file "$obj/.config" "${args[@]}"
    make -s -C "$SRC" O="$obj" olddefconfig >/dev/null
    # olddefconfig drops what a dependency refuses: check that what the lab needs held
    for opt in $LAB_OPTIONS; do
        grep -q "^CONFIG_$opt=y" "$obj/.config" || die "$variant: CONFIG_$opt did not stay =y after olddefconfig"
    done
    if [ "$hmac" = -e ]; then
        grep -q '^CONFIG_TCG_TPM2_HMAC=y' "$obj/.config" || die "$variant: CONFIG_TCG_TPM2_HMAC did not stay =y"
    else
        ! grep -q '^CONFIG_TCG_TPM2_HMAC=y' "$obj/.config" || die "$variant: CONFIG_TCG_TPM2_HMAC is still =y"
    fi
}

# The cache key: what makes the .config (this configure step, the options, the variant, the
# source package's version), so that finding a built kernel needs no configure run.
cache_key() {
    { declare -f configure; echo "$LAB_OPTIONS"; echo "$1"; echo "$PKGVER"; } | sha256sum | cut -c1-12
}

build() {
    local variant=$1 obj=$LAB_CACHE/build/$1 out started ended
    out=$LAB_CACHE/kernels/$variant-$(cache_key "$variant")
    if [ -f "$out/bzImage" ]; then
        if ((PRINT)); then echo "$out/bzImage"; else note "$variant: cached, $out/bzImage"; fi
        return 0
    fi
    ((PRINT)) && return 1
    mkdir -p "$LAB_CACHE/build"
    # one build of a variant at a time (a second caller waits, then finds it cached)
    exec 8>"$LAB_CACHE/build/$variant.lock"
    if ! flock -n 8; then
        note "$variant: another build is running; waiting for it"
        flock 8
        if [ -f "$out/bzImage" ]; then note "$variant: cached, $out/bzImage"; exec 8>&-; return 0; fi
    fi
    configure "$variant" "$obj"
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    cp "$obj/.config" "$out.tmp/config"
    note "$variant: building bzImage (nice 19, -j$JOBS; log $out.tmp/build.log)"
    started=$(date -u +%FT%TZ)
    echo "started $started on $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" > "$out.tmp/time.txt"
    if ! /usr/bin/time -v -a -o "$out.tmp/time.txt" nice -n 19 make -C "$SRC" O="$obj" -j"$JOBS" bzImage \
            > "$out.tmp/build.log" 2>&1; then
        tail -n 20 "$out.tmp/build.log" >&2
        die "$variant: the build failed (log: $out.tmp/build.log)"
    fi
    ended=$(date -u +%FT%TZ)
    echo "ended $ended, load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out.tmp/time.txt"
    cp "$obj/arch/x86/boot/bzImage" "$out.tmp/bzImage"
    make -s -C "$SRC" O="$obj" kernelrelease > "$out.tmp/release"
    echo "$PKGVER" > "$out.tmp/source-version"
    rm -rf "$out" && mv "$out.tmp" "$out"
    exec 8>&-
    note "$variant: built $out/bzImage ($(grep 'Elapsed (wall clock)' "$out/time.txt" | sed 's/.*: //') wall)"
}

status=0
for v in "${VARIANTS[@]}"; do build "$v" || status=1; done
exit $status
