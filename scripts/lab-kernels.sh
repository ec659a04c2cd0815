#!/usr/bin/env bash
# Build the lab's kernels (tpmtop lab) from Debian's linux-source-6.12: a small guest
# configuration (defconfig + kvm_guest.config + what the lab needs: tpm_tis, IMA, securityfs,
# kprobe events, 9p root, IKCONFIG_PROC; no debug info) in three variants:
#
#   6.12-hmac     CONFIG_TCG_TPM2_HMAC=y: 6.12's kept session (lazy flush)
#   6.12-nohmac   CONFIG_TCG_TPM2_HMAC=n
#   6.12-percmd   6.12-hmac with scripts/lab-percmd-edit.sh applied to tpm2-sessions.c: a fresh
#                 session for every HMAC-protected command, as 6.10/6.11 did
#
#   scripts/lab-kernels.sh                # 6.12-hmac, 6.12-percmd, then 6.12-nohmac
#   scripts/lab-kernels.sh 6.12-hmac      # one
#   scripts/lab-kernels.sh --print 6.12-hmac   # the cached bzImage's path (exit 1 if not built)
#
# A build is cached under a hash of what makes its .config (the configure step, the options, the
# source package's version; for 6.12-percmd also the edit script and its build step) and skipped
# when that bzImage exists: $LAB_CACHE/kernels/<variant>-<hash>/{bzImage,config,build.log,time.txt,release}.
# The cache lives outside the repository (a kernel tree is ~1.5 GB and every clone and worktree
# shares it): LAB_CACHE, default /var/cache/tpmtop-lab as root, ~/.cache/tpmtop-lab otherwise.
# The compile runs at nice 19 with LAB_JOBS jobs (default: the number of CPUs), its log and
# /usr/bin/time -v figures kept beside the image. Needs root only to install Debian packages
# (flex bison libelf-dev bc libssl-dev time linux-source-6.12) when they are missing.
#
# 6.12-percmd is built incrementally, not from scratch: it differs from 6.12-hmac in one source
# file and its release name. It starts from a copy of 6.12-hmac's object directory (cp -a keeps
# the mtimes make compares; 6.12-hmac is built first, or waited for) and runs make in a private
# mount namespace (unshare -m) where that copy is bind-mounted at 6.12-hmac's own path (objtool's
# build records absolute paths: at another path it would be rebuilt, and with it every object)
# and the edited drivers/char/tpm/tpm2-sessions.c is bind-mounted over the source tree's file.
# make recompiles that file and the few that print the release, and links: minutes, not
# 6.12-hmac's 40-60. Nothing outside the namespace changes: the shared source tree and 6.12-hmac's
# objects stay as they were, and another build may run meanwhile. The copy is removed afterwards.
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then DEFAULT_CACHE=/var/cache/tpmtop-lab; else DEFAULT_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/tpmtop-lab; fi
LAB_CACHE=${LAB_CACHE:-$DEFAULT_CACHE}
JOBS=${LAB_JOBS:-$(nproc)}
SERIES=6.12

die() { echo "lab-kernels: $*" >&2; exit 1; }
note() { echo "lab-kernels: $*" >&2; }

PRINT=0
INSIDE=0
VARIANTS=()
while (($#)); do
    case $1 in
        --print) PRINT=1; shift ;;
        --in-namespace) INSIDE=1; shift ;;   # internal: build_percmd's step inside its mount namespace
        -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        6.12-hmac|6.12-nohmac|6.12-percmd) VARIANTS+=("$1"); shift ;;
        *) die "unknown argument $1 (variants: 6.12-hmac 6.12-percmd 6.12-nohmac; see --help)" ;;
    esac
done
((${#VARIANTS[@]})) || VARIANTS=(6.12-hmac 6.12-percmd 6.12-nohmac)

# The options the lab's guest needs, on top of defconfig + kvm_guest.config (=y, built in: the
# lab builds bzImage only, no modules).
LAB_OPTIONS="TCG_TPM TCG_TIS TCG_TIS_CORE IMA SECURITY SECURITYFS INTEGRITY KPROBES KPROBE_EVENTS
FTRACE FUNCTION_TRACER DYNAMIC_FTRACE NET_9P NET_9P_VIRTIO 9P_FS VIRTIO_PCI HW_RANDOM_TPM
IKCONFIG IKCONFIG_PROC DEVTMPFS TMPFS"

# 6.12-percmd: the variant it starts from and the file it edits
PERCMD_BASE=6.12-hmac
PERCMD_FILE=drivers/char/tpm/tpm2-sessions.c

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
# source package's version), so that finding a built kernel needs no configure run; for
# 6.12-percmd also the edit and the steps that apply it.
cache_key() {
    { declare -f configure; echo "$LAB_OPTIONS"; echo "$1"; echo "$PKGVER"; variant_inputs "$1"; } \
        | sha256sum | cut -c1-12
}
variant_inputs() {
    case $1 in
        *-percmd) cat scripts/lab-percmd-edit.sh; declare -f build_percmd percmd_in_namespace ;;
    esac
}

# ---- build ----------------------------------------------------------------------------------
make_image() {   # $1 variant, $2 object dir, $3 the cache entry being made ($3.tmp): timed make, image, release
    local variant=$1 obj=$2 out=$3 started ended
    note "$variant: building bzImage (nice 19, -j$JOBS; log $out.tmp/build.log)"
    started=$(date -u +%FT%TZ)
    echo "started $started on $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" > "$out.tmp/time.txt"
    if ! /usr/bin/time -v -a -o "$out.tmp/time.txt" nice -n 19 make -C "$SRC" O="$obj" -j"$JOBS" bzImage \
            > "$out.tmp/build.log" 2>&1; then
        tail -n 20 "$out.tmp/build.log" >&2
        return 1
    fi
    ended=$(date -u +%FT%TZ)
    echo "ended $ended, load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out.tmp/time.txt"
    cp "$obj/arch/x86/boot/bzImage" "$out.tmp/bzImage"
    make -s -C "$SRC" O="$obj" kernelrelease > "$out.tmp/release"
    echo "$PKGVER" > "$out.tmp/source-version"
}

variant_lock() {   # $1 variant, $2 fd, $3 the cache entry: 0 when the caller must build, 1 when it is cached now
    eval "exec $2>\"\$LAB_CACHE/build/\$1.lock\""
    if ! flock -n "$2"; then
        note "$1: another build is running; waiting for it"
        flock "$2"
        if [ -f "$3/bzImage" ]; then note "$1: cached, $3/bzImage"; eval "exec $2>&-"; return 1; fi
    fi
    return 0
}

# --print of a kernel that is not there: one line on stderr when it is being built or its last
# build did not finish (tpmtop lab says that line); nothing when no build was ever started.
print_state() {   # $1 variant, $2 the cache entry
    local lock=$LAB_CACHE/build/$1.lock base=$PERCMD_BASE
    if [ -d "$2.tmp" ]; then
        if [ -f "$lock" ] && ! flock -n "$lock" true; then
            note "$1 is being built now (log: $2.tmp/build.log)"
        else
            note "the build of $1 did not finish (log: $2.tmp/build.log)"
        fi
    elif [[ $1 == *-percmd ]] && [ -f "$LAB_CACHE/build/$base.lock" ] && ! flock -n "$LAB_CACHE/build/$base.lock" true; then
        note "$base, which $1 starts from, is being built now"
    fi
}

cached() {   # $1 variant, $2 the cache entry
    [ -f "$2/bzImage" ] || return 1
    if ((PRINT)); then echo "$2/bzImage"; else note "$1: cached, $2/bzImage"; fi
}

build() {
    local variant=$1 obj=$LAB_CACHE/build/$1 out
    case $variant in *-percmd) build_percmd "$variant"; return ;; esac
    out=$LAB_CACHE/kernels/$variant-$(cache_key "$variant")
    cached "$variant" "$out" && return 0
    ((PRINT)) && { print_state "$variant" "$out"; return 1; }
    mkdir -p "$LAB_CACHE/build"
    # one build of a variant at a time (a second caller waits, then finds it cached)
    variant_lock "$variant" 8 "$out" || return 0
    configure "$variant" "$obj"
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    cp "$obj/.config" "$out.tmp/config"
    make_image "$variant" "$obj" "$out" || die "$variant: the build failed (log: $out.tmp/build.log)"
    rm -rf "$out" && mv "$out.tmp" "$out"
    exec 8>&-
    note "$variant: built $out/bzImage ($(grep 'Elapsed (wall clock)' "$out/time.txt" | sed 's/.*: //') wall)"
}

# 6.12-percmd: 6.12-hmac's objects, tpm2-sessions.c edited, an incremental make (see the header).
build_percmd() {
    local variant=$1 base=$PERCMD_BASE obj=$LAB_CACHE/build/$1 out base_out
    out=$LAB_CACHE/kernels/$variant-$(cache_key "$variant")
    cached "$variant" "$out" && return 0
    ((PRINT)) && { print_state "$variant" "$out"; return 1; }
    command -v unshare >/dev/null || die "$variant: needs unshare (util-linux) for its private mount namespace"
    mkdir -p "$LAB_CACHE/build"
    variant_lock "$variant" 7 "$out" || return 0
    base_out=$LAB_CACHE/kernels/$base-$(cache_key "$base")
    [ -f "$base_out/bzImage" ] || note "$variant: starts from $base's objects; building $base first"
    build "$base"
    # the copy under 6.12-hmac's lock: no build of it changes its objects meanwhile
    exec 8>"$LAB_CACHE/build/$base.lock"
    flock -n 8 || { note "$variant: waiting for $base's lock to copy its objects"; flock 8; }
    [ -f "$LAB_CACHE/build/$base/vmlinux" ] || die "$variant: $base's object directory has no vmlinux (removed?): rebuild $base"
    note "$variant: copying $base's object directory (cp -a, mtimes kept)"
    rm -rf "$obj" && cp -a "$LAB_CACHE/build/$base" "$obj"
    exec 8>&-
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    # the edited file: a new mtime, newer than the object 6.12-hmac made from the original
    scripts/lab-percmd-edit.sh < "$SRC/$PERCMD_FILE" > "$out.tmp/tpm2-sessions.c" \
        || die "$variant: the edit does not apply to $SRC/$PERCMD_FILE"
    diff -u --label "a/$PERCMD_FILE" --label "b/$PERCMD_FILE" "$SRC/$PERCMD_FILE" "$out.tmp/tpm2-sessions.c" \
        > "$out.tmp/edit.diff" || true
    unshare -m --propagation private "$SELF" --in-namespace "$variant" \
        || die "$variant: the build failed (log: $out.tmp/build.log)"
    rm -f "$out.tmp/tpm2-sessions.c"
    grep -q 'CC *drivers/char/tpm/tpm2-sessions.o' "$out.tmp/build.log" \
        || die "$variant: make did not recompile $PERCMD_FILE (log: $out.tmp/build.log)"
    echo "built incrementally from $base's objects: $(grep -c '^  CC ' "$out.tmp/build.log") files compiled" \
        >> "$out.tmp/time.txt"
    rm -rf "$out" && mv "$out.tmp" "$out"
    rm -rf "$obj"
    exec 7>&-
    note "$variant: built $out/bzImage ($(grep 'Elapsed (wall clock)' "$out/time.txt" | sed 's/.*: //') wall)"
}

percmd_in_namespace() {   # in build_percmd's private mount namespace
    local variant=$1 hmac_obj=$LAB_CACHE/build/$PERCMD_BASE out
    out=$LAB_CACHE/kernels/$variant-$(cache_key "$variant")
    mount --bind "$LAB_CACHE/build/$variant" "$hmac_obj" || die "$variant: could not bind-mount its objects"
    mount --bind "$out.tmp/tpm2-sessions.c" "$SRC/$PERCMD_FILE" || die "$variant: could not bind-mount the edited file"
    configure "$variant" "$hmac_obj"   # 6.12-hmac's .config but for the release name (LOCALVERSION)
    cp "$hmac_obj/.config" "$out.tmp/config"
    make_image "$variant" "$hmac_obj" "$out"
}

if ((INSIDE)); then
    percmd_in_namespace "${VARIANTS[0]}"
    exit
fi

status=0
for v in "${VARIANTS[@]}"; do build "$v" || status=1; done
exit $status
