"""tpmtop's kprobe events on the kernel's TPM transmit path, made and removed through tracefs.

Events in a group of tpmtop's own (``tpmtop_<pid>``, so two tpmtops never share one and
a group whose pid is dead is known to be stale):

- ``tx``: entry of ``tpm_transmit(chip, buf, bufsiz)`` — every command, the kernel's and
  user space's (/dev/tpm0, /dev/tpmrm0). ``buf`` is the command itself, so the header is
  ``+0($arg2)`` (tag), ``+2($arg2)`` (size), ``+6($arg2)`` (command code).
- ``tx_ret``: its return (``$retval``: response length or -errno); entry to return is the
  wall latency.
- ``cmd``/``cmd_ret``: ``tpm_transmit_cmd(chip, buf, min_rsp_len, desc)``, the kernel's own
  sender: ``desc`` names the caller's purpose, its return is the TPM response code. A
  ``tpm_transmit`` outside one came from user space.
- ``op_extend``/``op_random`` and their returns: ``tpm2_pcr_extend`` and ``tpm2_get_random``,
  the kernel operations that hold the commands (session set-up included), where the kernel
  has them: an operation's time minus its commands' is the host's share.

The events are enabled only in a tracefs instance of tpmtop's own (``instances/tpmtop_<pid>``),
so tpmtop's ``trace_pipe`` never steals events from anyone else's tracing. Everything is
removed on exit and on every signal the CLI turns into an exception; a group left by a
killed tpmtop is removed at the next start (:func:`clean_stale`).

Layer: sources (reads the system, sends no TPM command). No Textual.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass

from tpmtop.errors import TpmtopError

TRACEFS_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
GROUP_PREFIX = "tpmtop_"

TX, TX_RET, CMD, CMD_RET = "tx", "tx_ret", "cmd", "cmd_ret"
# The kernel operations around the commands: entry to return of the function that does one PCR
# extend or one get_random, so an operation's cost is split into TPM time (its tpm_transmits)
# and host time (the rest: building commands, ECDH/KDF/HMAC, waiting for the chip's lock).
# Whole tpm2_pcr_extend is what the 6.10 regression thread timed (151 ms on an SLB9670).
# Where the first session's handle sits in a command with 0, 1 or 2 handles (header 10 bytes,
# 4 per handle, then the 4-byte authorizationSize): the parser picks the one for the command
# code. It tells an HMAC session (0x02……) from a password authorization (TPM_RS_PW): whether
# a PCR_Extend was protected — what `tpm.disable_pcr_integrity=1` turns off. The buffer is the
# chip's page-sized command buffer, so reading past a short command stays inside it.
SESSION_OFFSETS = (14, 18, 22)
OP_FUNCS = {"op_extend": ("tpm2_pcr_extend", "extend"), "op_random": ("tpm2_get_random", "get_random")}
OP_EVENTS = {name: kind for name, (_, kind) in OP_FUNCS.items()}
OP_RET_EVENTS = {f"{name}_ret": kind for name, (_, kind) in OP_FUNCS.items()}


def _release(text: str | None = None) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text if text is not None else os.uname().release)
    return (int(m[1]), int(m[2])) if m else (0, 0)


def arg_positions(release: str | None = None) -> tuple[int, int]:
    """($argN of tpm_transmit's buffer, $argN of tpm_transmit_cmd's desc) for a kernel release.

    Before 5.1 both took a ``struct tpm_space *`` (and tpm_transmit_cmd also bufsiz and
    flags): ``tpm_transmit(chip, space, buf, bufsiz, flags)``,
    ``tpm_transmit_cmd(chip, space, buf, bufsiz, min_rsp_len, flags, desc)``; since 5.1
    ``tpm_transmit(chip, buf, bufsiz)`` and ``tpm_transmit_cmd(chip, buf, min_rsp_len, desc)``.
    """
    return (3, 7) if _release(release) < (5, 1) else (2, 4)


def probe_lines(group: str, have_cmd: bool = True, release: str | None = None,
                ops: tuple[str, ...] | None = None) -> list[str]:
    """The kprobe_events definitions (Documentation/trace/kprobetrace.rst syntax). ``ops``:
    which of :data:`OP_FUNCS` to probe too (default all; only those the kernel has, live)."""
    buf, desc = arg_positions(release)
    lines = [
        f"p:{group}/{TX} tpm_transmit tag=+0($arg{buf}):x16 size=+2($arg{buf}):x32 cc=+6($arg{buf}):x32 "
        + " ".join(f"s{off}=+{off}($arg{buf}):x32" for off in SESSION_OFFSETS),
        f"r:{group}/{TX_RET} tpm_transmit ret=$retval:s64",
    ]
    if have_cmd:
        lines += [
            f"p:{group}/{CMD} tpm_transmit_cmd desc=+0($arg{desc}):string",
            f"r:{group}/{CMD_RET} tpm_transmit_cmd rc=$retval:s32",
        ]
    for name, (func, _) in OP_FUNCS.items():
        if ops is None or name in ops:
            lines += [f"p:{group}/{name} {func}", f"r:{group}/{name}_ret {func} ret=$retval:s32"]
    return lines


def response_rc_line(group: str, release: str | None = None) -> str:
    """``tx_ret`` reading the response code too: the buffer holds the response when
    tpm_transmit returns, and since Linux 6.10 a return probe may read the function's
    arguments (``$argN``), so ``+6($argN)`` is the TPM's rc of every command, user space's
    included. Older kernels refuse the definition; :class:`Probes` then uses the plain one."""
    buf, _ = arg_positions(release)
    return f"r:{group}/{TX_RET} tpm_transmit ret=$retval:s64 rsp_rc=+6($arg{buf}):x32"


def boot_cmdline(group: str = "tpmtop", release: str | None = None) -> str:
    """``kprobe_event=`` for the kernel command line: the same probes from early boot.

    On the command line spaces become commas and definitions are separated by semicolons;
    ``trace_event=`` enables them and ``trace_buf_size=`` keeps a boot's worth.
    """
    defs = ";".join(line.replace(" ", ",") for line in probe_lines(group, release=release))
    return f"kprobe_event={defs} trace_event={group}:* trace_buf_size=16M"


class KernelTraceError(TpmtopError):
    """No way to trace here (not root, no tracefs, no kprobes, no TPM driver): exit 1."""


@dataclass
class Tracefs:
    root: str

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def read(self, *parts: str) -> str:
        with open(self.path(*parts)) as f:
            return f.read()

    def append(self, rel: str, text: str) -> None:
        fd = os.open(self.path(rel), os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, (text + "\n").encode())
        finally:
            os.close(fd)

    def write(self, rel: str, text: str) -> None:
        with open(self.path(rel), "w") as f:
            f.write(text)


def find_tracefs() -> Tracefs:
    """The mounted tracefs, or one line saying what is missing."""
    if os.geteuid() != 0:
        raise KernelTraceError("tpmtop kernel needs root: kprobe events are made through tracefs "
                               "(run with sudo)")
    for root in TRACEFS_CANDIDATES:
        if os.path.exists(os.path.join(root, "trace_pipe")):
            t = Tracefs(root)
            if not os.path.exists(t.path("kprobe_events")):
                raise KernelTraceError(f"this kernel has no kprobe events ({root}/kprobe_events absent: "
                                       "CONFIG_KPROBE_EVENTS is off)")
            return t
    if not _kernel_knows_tracefs():
        raise KernelTraceError("this kernel has no tracefs (CONFIG_FTRACE is off): it cannot trace its TPM commands")
    raise KernelTraceError("tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)")


def _kernel_knows_tracefs() -> bool:
    """Whether tracefs is a file system this kernel has (/proc/filesystems); True when unsure."""
    try:
        with open("/proc/filesystems") as f:
            return any(line.split()[-1:] == ["tracefs"] for line in f)
    except OSError:
        return True


def kernel_has(t: Tracefs, func: str) -> bool:
    """Whether ``func`` can be probed: listed in available_filter_functions or kallsyms."""
    pat = re.compile(rf"^{re.escape(func)}(\s|$)", re.M)
    for path in (t.path("available_filter_functions"),):
        try:
            with open(path) as f:
                if pat.search(f.read()):
                    return True
        except OSError:
            pass
    try:
        with open("/proc/kallsyms") as f:
            return any(line.split()[2] == func for line in f if func in line)
    except (OSError, IndexError):
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _groups(t: Tracefs) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in t.read("kprobe_events").splitlines():
        m = re.match(r"^[pr]\d*:([^/\s]+)/(\S+)\s", line)
        if m and m[1].startswith(GROUP_PREFIX):
            out.setdefault(m[1], []).append(m[2])
    return out


def remove_group(t: Tracefs, group: str) -> None:
    """Disable and delete every event of ``group`` and tpmtop's instance of the same name."""
    inst = t.path("instances", group)
    if os.path.isdir(inst):
        try:
            with open(os.path.join(inst, "events", group, "enable"), "w") as f:
                f.write("0")
        except OSError:
            pass
    try:
        with open(t.path("events", group, "enable"), "w") as f:
            f.write("0")
    except OSError:
        pass
    if os.path.isdir(inst):
        try:
            os.rmdir(inst)
        except OSError:
            pass
    for ev in _groups(t).get(group, []):
        try:
            t.append("kprobe_events", f"-:{group}/{ev}")
        except OSError:
            pass


def clean_stale(t: Tracefs) -> list[str]:
    """Remove the groups of tpmtops that are no longer running; returns their names."""
    gone = []
    names = set(_groups(t))
    try:
        names |= {n for n in os.listdir(t.path("instances")) if n.startswith(GROUP_PREFIX)}
    except OSError:
        pass
    for g in names:
        try:
            pid = int(g[len(GROUP_PREFIX):])
        except ValueError:
            continue
        if pid != os.getpid() and not _pid_alive(pid):
            remove_group(t, g)
            gone.append(g)
    return gone


class Probes:
    """``with Probes() as p: for line in p.lines(): …`` — armed on enter, removed on exit."""

    def __init__(self, tracefs: Tracefs | None = None):
        self.t = tracefs or find_tracefs()
        self.group = f"{GROUP_PREFIX}{os.getpid()}"
        self.stale_removed: list[str] = []
        self.have_cmd = False
        self.ops: tuple[str, ...] = ()
        self.response_rc = False  # tx_ret reads the response code (Linux 6.10+)
        self.clock = "local"  # the instance's trace_clock
        self._armed = False

    # Signals whose default action would kill tpmtop without unwinding (SIGINT, SIGTERM and
    # SIGHUP already unwind: the CLI turns them into exceptions). While probes are armed these
    # unwind too, so the probes are removed; SIGKILL cannot be caught: clean_stale handles it.
    _UNWIND_SIGNALS = ("SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGXCPU")

    def _install_signals(self) -> None:
        import signal

        from tpmtop.errors import Interrupted

        def unwind(signum, frame):
            raise Interrupted(f"stopped by {signal.Signals(signum).name}")

        self._old_handlers = {}
        for name in self._UNWIND_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is None:
                continue
            try:
                self._old_handlers[sig] = signal.signal(sig, unwind)
            except (ValueError, OSError):  # not the main thread
                pass

    def _restore_signals(self) -> None:
        import signal

        for sig, old in getattr(self, "_old_handlers", {}).items():
            try:
                signal.signal(sig, old)
            except (ValueError, OSError):
                pass
        self._old_handlers = {}

    def __enter__(self) -> "Probes":
        self.stale_removed = clean_stale(self.t)
        if not kernel_has(self.t, "tpm_transmit"):
            raise KernelTraceError("this kernel has no tpm_transmit to probe (no TPM driver built in or "
                                   "loaded: CONFIG_TCG_TPM off?)")
        self.have_cmd = kernel_has(self.t, "tpm_transmit_cmd")
        self.ops = tuple(name for name, (func, _) in OP_FUNCS.items() if kernel_has(self.t, func))
        self._install_signals()
        self._armed = True
        try:
            for line in probe_lines(self.group, self.have_cmd, ops=self.ops):
                if line.startswith(f"r:{self.group}/{TX_RET} "):
                    try:  # with the response code where the kernel can read it (6.10+)
                        self.t.append("kprobe_events", response_rc_line(self.group))
                        self.response_rc = True
                        continue
                    except OSError:
                        pass
                try:
                    self.t.append("kprobe_events", line)
                except OSError as e:
                    log = ""
                    try:
                        log = self.t.read("error_log").strip().splitlines()[-1]
                    except (OSError, IndexError):
                        pass
                    raise KernelTraceError(f"the kernel refused probe {line.split()[0]}: "
                                           f"{os.strerror(e.errno or errno.EINVAL)} {log}".rstrip()) from None
            try:
                os.mkdir(self.t.path("instances", self.group))
                try:  # timestamps on CLOCK_MONOTONIC: Python's perf_counter, no offset to guess
                    with open(self.t.path("instances", self.group, "trace_clock"), "w") as f:
                        f.write("mono")
                    self.clock = "mono"
                except OSError:
                    pass
                with open(self.t.path("instances", self.group, "events", self.group, "enable"), "w") as f:
                    f.write("1")
            except OSError as e:
                raise KernelTraceError(f"cannot enable the probes in a tracefs instance of tpmtop's own "
                                       f"({self.t.path('instances', self.group)}): {e.strerror}") from None
        except BaseException:
            self.close()
            raise
        return self

    def pipe_path(self) -> str:
        return self.t.path("instances", self.group, "trace_pipe")

    def close(self) -> None:
        if self._armed:
            self._armed = False
            remove_group(self.t, self.group)
        self._restore_signals()

    def __exit__(self, *exc) -> None:
        self.close()
