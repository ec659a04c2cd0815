"""One boot of one kernel under qemu, with its TPM served by tpmtop (:mod:`tpmtop.lab.guest_tpm`).

The guest is the kernel VM's (``scripts/kernel-vm.sh``): a busybox initramfs whose /init
mounts this machine's root read-only over 9p, chroots into it and runs a command from a
results share (9p, read-write), then powers off. The lab's command is a fixed workload that
makes IMA's tcb policy measure a known number of files: files on the results share (a 9p
file system, which IMA measures — tmpfs and the initramfs it does not), each opened once for
reading by root with the shell's ``read`` built-in, so no program runs between the two
readings of IMA's measurement count.

Clocks: every console line is stamped on arrival with the host's ``perf_counter_ns`` (qemu's
serial port writes through at once), the same clock the TPM relay stamps commands with. The
guest prints its own uptime at /init and around the workload. Under TCG the guest's CPU is
emulated (slower than hardware): its times are the emulated machine's, reported as such.

Layer: lab; no Textual.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tpmtop.errors import TpmtopError
from tpmtop.lab.guest_tpm import ControlLog, GuestTpm, Wire

if TYPE_CHECKING:
    from tpmtop.profiles.profile import Profile

MARK = "tpmtop-lab:"
INIT_MARK = re.compile(r"kernel-vm\(init\): started at (\d+\.\d+)")
LAB_MARK = re.compile(r"tpmtop-lab: (\S+)(?: (.*))?$")
KERNEL_FIRST = re.compile(r"Linux version (\S+)")


@dataclass
class KernelSpec:
    """A kernel to boot: its image, its initramfs, what to call it."""

    name: str  # as the user named it: 6.12-hmac, 6.1, or a path
    image: str
    initrd: str
    hmac_built: bool | None = None  # CONFIG_TCG_TPM2_HMAC, when the lab knows it from the build
    release: str | None = None  # uname -r, when known before the boot (the probes' argument layout)
    note: str = ""


@dataclass
class Boot:
    """What one boot showed: the console with host times, the TPM traffic, the guest's marks."""

    kernel: KernelSpec
    index: int
    console: list[tuple[int, str]] = field(default_factory=list)  # (perf_counter_ns, line)
    wire: list[Wire] = field(default_factory=list)
    control: ControlLog = field(default_factory=ControlLog)
    qemu_start_ns: int = 0
    qemu_end_ns: int = 0
    qemu_status: int | None = None
    timed_out: bool = False
    marks: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (host perf_counter_ns, text)
    release: str | None = None
    results_dir: str | None = None
    problems: list[str] = field(default_factory=list)
    ima_paths: list[str] | None = None  # IMA's measurement list in order (the file names), as the guest saved it

    def host_s(self, mark: str) -> float | None:
        """Seconds from qemu's start to a mark's line on the console."""
        m = self.marks.get(mark)
        return None if m is None else (m[0] - self.qemu_start_ns) / 1e9

    def guest_s(self, mark: str) -> float | None:
        """The guest's uptime at a mark (its first number)."""
        m = self.marks.get(mark)
        if m is None or not m[1]:
            return None
        try:
            return float(m[1].split()[0])
        except ValueError:
            return None

    def mark_value(self, mark: str, i: int) -> str | None:
        m = self.marks.get(mark)
        parts = (m[1] or "").split() if m else []
        return parts[i] if i < len(parts) else None


def workload_script(files: int) -> str:
    """The guest's command (run by /bin/sh in the chroot, in the results share's path)."""
    return f"""# tpmtop lab's guest workload: IMA measures {files} files, each read once by root
R=$(dirname "$0")
count() {{ cat /sys/kernel/security/ima/runtime_measurements_count 2>/dev/null || echo -1; }}
up() {{ cut -d' ' -f1 /proc/uptime; }}
echo "{MARK} release $(uname -r)"
[ -e /sys/class/tpm/tpm0/null_name ] && echo "{MARK} null_name $(cat /sys/class/tpm/tpm0/null_name)"
hmac=$( (zcat /proc/config.gz 2>/dev/null || echo) \\
    | grep -E '^CONFIG_TCG_TPM2_HMAC=|TCG_TPM2_HMAC is not set' | tr ' ' _)
echo "{MARK} hmac_config ${{hmac:-unknown}}"
# cat and cut run once before the first reading, so that IMA has measured them already
count >/dev/null; up >/dev/null
c0=$(count); t0=$(up)
echo "{MARK} workload-start $t0 $c0"
for f in "$R"/workload/file-*; do read -r _ < "$f"; done
t1=$(up); c1=$(count)
echo "{MARK} workload-end $t1 $c1"
cat /sys/kernel/security/ima/ascii_runtime_measurements > "$R/ima.txt" 2>/dev/null
# what tpmtop's boot-time kprobes recorded (tpmtop kernel --boot-cmdline), read after the workload
[ -r /sys/kernel/tracing/trace ] && cat /sys/kernel/tracing/trace > "$R/trace.txt" 2>/dev/null
echo "{MARK} done $(up)"
"""


def write_workload(results: str, files: int) -> None:
    d = os.path.join(results, "workload")
    os.makedirs(d, exist_ok=True)
    for i in range(files):
        with open(os.path.join(d, f"file-{i:05d}"), "w") as f:
            f.write(f"tpmtop lab workload file {i}\n")
    with open(os.path.join(results, "cmd.sh"), "w") as f:
        f.write(workload_script(files))


def qemu_command(
    spec: KernelSpec, ctrl_path: str, results: str, accel: str, cpus: int, mem_mib: int, append: str
) -> list[str]:
    accel_args = ["-accel", "tcg,thread=multi", "-cpu", "max"] if accel == "tcg" else ["-enable-kvm", "-cpu", "host"]
    cmdline = (
        "console=ttyS0 earlycon=uart8250,io,0x3f8,115200 loglevel=5 ima_policy=tcb panic=-1 "
        f"rdinit=/init initcall_debug {append}"
    ).strip()
    return [
        "qemu-system-x86_64",
        *accel_args,
        "-smp",
        str(cpus),
        "-m",
        str(mem_mib),
        "-display",
        "none",
        "-no-reboot",
        "-monitor",
        "none",
        "-serial",
        "stdio",
        "-kernel",
        spec.image,
        "-initrd",
        spec.initrd,
        "-append",
        cmdline,
        "-chardev",
        f"socket,id=chrtpm,path={ctrl_path}",
        "-tpmdev",
        "emulator,id=tpm0,chardev=chrtpm",
        "-device",
        "tpm-tis,tpmdev=tpm0",
        "-virtfs",
        "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        "-virtfs",
        f"local,path={results},mount_tag=results,security_model=none,multidevs=remap",
        "-nic",
        "none",
    ]


# The guest mounts its own tmpfs on these (kernel-vm-init.sh): a results share below them
# would be hidden from it.
HIDDEN_IN_GUEST = ("/tmp", "/run", "/dev", "/proc", "/sys")


def boot_once(
    spec: KernelSpec,
    index: int,
    *,
    run_dir: str,
    share_parent: str,
    repo: str,
    python: str,
    files: int,
    profile: Profile | None,
    seed: int | None,
    accel: str = "tcg",
    cpus: int = 2,
    mem_mib: int = 1024,
    append: str = "",
    timeout_s: float = 900.0,
    log: Callable[[str], None] = lambda s: None,
) -> Boot:
    """Boot ``spec`` once; return what was seen. qemu and swtpm are stopped on every path.

    ``run_dir`` gets the console log, qemu's command line, the guest's dmesg and IMA list;
    the guest's results share (workload files, its output) is made below ``share_parent``
    (a folder the guest sees at the same path: not under /tmp or /run) and removed after."""
    b = Boot(spec, index)
    real = os.path.realpath(share_parent)
    if any(real == h or real.startswith(h + "/") for h in HIDDEN_IN_GUEST):
        raise TpmtopError(
            f"{share_parent}: the guest mounts its own file systems on {', '.join(HIDDEN_IN_GUEST)}; "
            "its share must be elsewhere"
        )
    os.makedirs(share_parent, exist_ok=True)
    results = tempfile.mkdtemp(prefix="share-", dir=share_parent)
    try:
        return _boot(
            b, spec, run_dir, results, repo, python, files, profile, seed, accel, cpus, mem_mib, append, timeout_s
        )
    finally:
        for name in ("dmesg.txt", "ima.txt", "output.log", "trace.txt"):
            try:
                shutil.copyfile(os.path.join(results, name), os.path.join(run_dir, name))
            except OSError:
                pass
        shutil.rmtree(results, ignore_errors=True)
        b.ima_paths = read_ima_paths(os.path.join(run_dir, "ima.txt"))


def read_ima_paths(path: str) -> list[str] | None:
    """The file name of each entry of IMA's ascii_runtime_measurements (``PCR template-hash
    template digest name``), in order; None when the guest saved none."""
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n").split(" ", 4)[-1] for line in f if line.strip()]
    except OSError:
        return None


def _boot(
    b: Boot,
    spec: KernelSpec,
    run_dir: str,
    results: str,
    repo: str,
    python: str,
    files: int,
    profile: Profile | None,
    seed: int | None,
    accel: str,
    cpus: int,
    mem_mib: int,
    append: str,
    timeout_s: float,
) -> Boot:
    from tpmtop.tpm.sim import Swtpm
    from tpmtop.tpm.transport import InstrumentedTransport

    b.results_dir = results
    write_workload(results, files)
    venv_bin = os.path.dirname(python)
    with open(os.path.join(results, "vm.env"), "w") as f:
        env = (
            f"HOME=/root TERM=dumb LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH={repo} KERNEL_VM=1 "
            f"KERNEL_VM_RESULTS={results} PATH={venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        )
        f.write(f"RESULTS={shlex.quote(results)}\nWORKDIR={shlex.quote(repo)}\nRUN_AS_ENV={shlex.quote(env)}\n")
    sock_dir = tempfile.mkdtemp(prefix="tpmtop-lab-")  # short: a Unix socket path has 108 bytes
    ctrl_path = os.path.join(sock_dir, "tpm.ctrl")
    sw = Swtpm(startup=False)
    relay = proc = None
    try:
        sw.start()
        transport = InstrumentedTransport(sw.backend(timeout=120.0))
        if profile is not None:
            transport.shaper = profile.shaper(seed)
        assert sw.ctrl is not None  # started
        relay = GuestTpm(ctrl_path, sw.ctrl, transport, log=lambda s: b.problems.append(s)).start()
        cmd = qemu_command(spec, ctrl_path, results, accel, cpus, mem_mib, append)
        with open(os.path.join(run_dir, "qemu-command.txt"), "w") as f:
            f.write(shlex.join(cmd) + "\n")
        b.qemu_start_ns = time.perf_counter_ns()
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
            )
        except OSError as e:
            raise TpmtopError(f"cannot start qemu-system-x86_64: {e.strerror}") from None
        reader = threading.Thread(target=_read_console, args=(proc, b), daemon=True)
        reader.start()
        try:
            b.qemu_status = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            b.timed_out = True
            b.problems.append(f"the guest did not power off within {timeout_s:.0f} s: stopped")
        b.qemu_end_ns = time.perf_counter_ns()
        _stop(proc)
        reader.join(timeout=5)
    finally:
        if proc is not None:
            _stop(proc)
        if relay is not None:
            relay.stop()
            b.wire = list(relay.wire)
            b.control = relay.control
        sw.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)
    with open(os.path.join(run_dir, "console.log"), "w", errors="replace") as f:
        for t, line in b.console:
            f.write(f"[{(t - b.qemu_start_ns) / 1e9:10.6f}] {line}\n")
    return b


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _read_console(proc: subprocess.Popen[bytes], b: Boot) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        t = time.perf_counter_ns()
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        b.console.append((t, line))
        if "kernel" not in b.marks and (m := KERNEL_FIRST.search(line)):
            b.marks["kernel"] = (t, "")
            b.release = m.group(1)
        elif "init" not in b.marks and (m := INIT_MARK.search(line)):
            b.marks["init"] = (t, m.group(1))
        elif (m := LAB_MARK.search(line)) and m.group(1) not in b.marks:
            b.marks[m.group(1)] = (t, m.group(2) or "")
