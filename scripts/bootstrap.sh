#!/usr/bin/env bash
# Installs what tpmtop needs and is missing, and nothing else. Fast when all is there:
# it only checks for commands/headers and compares a stamp with pyproject.toml and constraints.txt.
# Python packages come at the versions constraints.txt pins (the ones the suite last passed
# with; `make upgrade` refreshes it), so a fresh clone tests what was tested.
set -euo pipefail
cd "$(dirname "$0")/.."
# --test: also what only the test suite needs (tshark, to check the pcapng export; prometheus;
#         man, zsh and fish for the man pages and completions). The Python side (pytest,
#         mkdocs-material for the docs build, ...) is the [test] extra, which every run installs.
# --bench: also what only benchmarks/ need (tpm2-abrmd and dbus-daemon, the comparison in
#          benchmarks/proxy.py; py-spy, the sampling profiler) — implies --test
for_tests=0
for_bench=0
[ "${1:-}" = "--test" ] && for_tests=1
[ "${1:-}" = "--bench" ] && for_tests=1 && for_bench=1

need_pkgs=()
command -v swtpm >/dev/null 2>&1 || need_pkgs+=(swtpm)
command -v swtpm_setup >/dev/null 2>&1 || need_pkgs+=(swtpm-tools)
command -v pkg-config >/dev/null 2>&1 || need_pkgs+=(pkg-config)
command -v tpm2_getcap >/dev/null 2>&1 || need_pkgs+=(tpm2-tools)
command -v tmux >/dev/null 2>&1 || need_pkgs+=(tmux)
if ! pkg-config --exists tss2-esys 2>/dev/null; then need_pkgs+=(libtss2-dev); fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then need_pkgs+=(python3-venv); fi
# tpm2-tss's pcap: TCTI (tests record tpm2-tools traffic with it)
if ((for_tests)) && ! ls /usr/lib/*/libtss2-tcti-pcap.so.0 >/dev/null 2>&1; then need_pkgs+=(libtss2-tcti-pcap0); fi
# tpm2-abrmd on a private D-Bus (the proxy's tests over a resource-managed upstream, and benchmarks/proxy.py)
if ((for_tests || for_bench)) && [ ! -x /usr/sbin/tpm2-abrmd ]; then need_pkgs+=(tpm2-abrmd); fi
if ((for_tests || for_bench)) && ! command -v dbus-daemon >/dev/null 2>&1; then need_pkgs+=(dbus-daemon); fi
if ((for_tests || for_bench)) && ! ls /usr/lib/*/libtss2-tcti-tabrmd.so.0 >/dev/null 2>&1; then need_pkgs+=(libtss2-tcti-tabrmd0); fi
# Prometheus and promtool: the exporter's tests scrape it with a real Prometheus and check the
# rules (the Debian package installs a prometheus.service; the tests never start it)
if ((for_tests)) && ! command -v promtool >/dev/null 2>&1; then need_pkgs+=(prometheus); fi
# man, zsh and fish: tests/cli/test_packaging.py renders each man page and checks each completion
# script with its own shell (bash is there already); git lists the files the wheel is built from
if ((for_tests)) && ! command -v man >/dev/null 2>&1; then need_pkgs+=(man-db); fi
if ((for_tests)) && ! command -v zsh >/dev/null 2>&1; then need_pkgs+=(zsh); fi
if ((for_tests)) && ! command -v fish >/dev/null 2>&1; then need_pkgs+=(fish); fi
if ((for_tests)) && ! command -v git >/dev/null 2>&1; then need_pkgs+=(git); fi
# cryptsetup, systemd-cryptenroll (Debian's systemd) and clevis: tests/unlock enrolls real LUKS2
# tokens into image files against a private swtpm; openssl makes a signed policy's key there
if ((for_tests)) && ! command -v cryptsetup >/dev/null 2>&1; then need_pkgs+=(cryptsetup-bin); fi
if ((for_tests)) && ! command -v systemd-cryptenroll >/dev/null 2>&1; then need_pkgs+=(systemd); fi
if ((for_tests)) && ! command -v clevis-luks-bind >/dev/null 2>&1; then need_pkgs+=(clevis clevis-luks clevis-tpm2); fi
if ((for_tests)) && ! command -v openssl >/dev/null 2>&1; then need_pkgs+=(openssl); fi
if ((for_tests)) && ! command -v tshark >/dev/null 2>&1; then
    need_pkgs+=(tshark)
    # wireshark-common asks whether non-root users may capture: answer no, non-interactively
    echo "wireshark-common wireshark-common/install-setuid boolean false" | \
        { if [ "$(id -u)" -eq 0 ]; then debconf-set-selections; else sudo debconf-set-selections; fi; }
fi

if ((${#need_pkgs[@]})); then
    echo "bootstrap: installing Debian packages: ${need_pkgs[*]}" >&2
    if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi
    # Another apt or dpkg (unattended-upgrades, a second bootstrap) may hold the lock: wait
    # for it, up to 10 minutes, rather than fail at once — and say so, or it looks hung.
    apt_wait=(-o DPkg::Lock::Timeout=600)
    # (apt locks with fcntl, so the check does too: flock(1) would not see apt's lock)
    if ! "${SUDO[@]}" python3 -c 'import fcntl, sys
try:
    fcntl.lockf(open("/var/lib/dpkg/lock-frontend", "w"), fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(1)
except OSError:
    pass' 2>/dev/null; then
        echo "bootstrap: another apt/dpkg holds its lock: waiting for it (up to 10 minutes)" >&2
    fi
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_wait[@]}" update -qq
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_wait[@]}" install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
    # Debian's prometheus package enables and starts a system Prometheus on :9090; the tests
    # run their own, so the service that came with the package is stopped and disabled
    if [[ " ${need_pkgs[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
        echo "bootstrap: disabling the prometheus.service Debian's package started (the tests run their own)" >&2
        "${SUDO[@]}" systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv" >&2
    "$PY" -m venv .venv
fi
stamp=.venv/.tpmtop-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    echo "bootstrap: installing tpmtop (editable) and its dependencies into .venv, at the versions constraints.txt pins" >&2
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -c constraints.txt -e '.[test]'
    touch "$stamp"
fi
if ((for_bench)) && [ ! -x .venv/bin/py-spy ]; then
    echo "bootstrap: installing the benchmarks' extras (py-spy) into .venv" >&2
    .venv/bin/python -m pip install -q -c constraints.txt -e '.[test,bench]'
fi
