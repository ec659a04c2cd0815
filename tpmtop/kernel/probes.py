"""tpmtop's kprobe events on the kernel's TPM transmit path, made and removed through tracefs.

Events in a group of tpmtop's own (``tpmtop_<pid>``, so two tpmtops never share one and
a group whose pid is dead is known to be stale):

- ``tx``: entry of ``tpm_transmit(chip, buf, bufsiz)`` — every command, the kernel's and
  user space's (/dev/tpm0, /dev/tpmrm0). ``buf`` is the command itself, so the header is
  ``+0($arg2)`` (tag), ``+2($arg2)`` (size), ``+6($arg2)`` (command code).
- ``tx_ret``: its return (``$retval``: response length or -errno); entry to return is the
  wall latency.
- ``cmd``/``cmd_ret``: ``tpm_transmit_cmd(chip, buf, min_rsp_len, desc)``, the kernel's own
  sender (``buf`` is a ``struct tpm_buf *`` there, so only ``desc`` is read): ``desc`` names
  the caller's purpose (NULL for many callers: the kernel prints ``(fault)``), its return is
  the TPM response code. A ``tpm_transmit`` outside one came from user space.

Optional (armed when the kernel has the function and accepts the probe; the parser does
without them):

- ``write``: ``tpm_common_write(file, buf, size, off)``, the write(2) of a /dev/tpm0 or
  /dev/tpmrm0 client, in the client's own task. ``buf`` is user memory (``+u``, Linux 5.5+).
  The command itself usually runs later in a kworker (tpm2-tss opens the device
  O_NONBLOCK, and the kernel then queues the command as work), so without this event a
  user-space command is only known by the kworker that ran it.
- ``op_extend``/``op_random`` and their returns: ``tpm2_pcr_extend`` and ``tpm2_get_random``,
  the kernel operations that hold the commands (session set-up included): an operation's
  time minus its commands' is the host's share.
- ``rm_prep``/``rm_commit``/``rm_del`` (and their ``_ret``): the resource manager's
  ``tpm2_prepare_space(chip, space, cmd, cmdsiz)`` (ContextLoad of the client's objects and
  sessions before its command), ``tpm2_commit_space(chip, space, buf, bufsiz)`` (ContextSave/
  FlushContext after; its ``buf`` holds the response, so ``+6($arg3)`` is the response code
  of the user-space command) and ``tpm2_del_space(chip, space)`` (FlushContext when a
  /dev/tpmrm0 client closes). ``space`` is NULL for /dev/tpm0.

The ``tx`` entry also reads the first session's handle (``s14``/``s18``/``s22``: where it sits
after 0, 1 or 2 handles), which tells an HMAC session from a password authorization; on
Linux 6.10+ ``tx_ret`` also reads the response header's code (``rsp_rc``: a return probe may
read the function's arguments there; 6.1 refuses the definition, and the plain one is used).

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
from dataclasses import dataclass, field

from tpmtop.errors import TpmtopError

TRACEFS_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
GROUP_PREFIX = "tpmtop_"

TX, TX_RET, CMD, CMD_RET = "tx", "tx_ret", "cmd", "cmd_ret"
WRITE = "write"
RM_PREFIX = "rm_"  # rm_prep, rm_commit, rm_del and their _ret: the resource manager at work
RM_PREP, RM_COMMIT, RM_DEL = "rm_prep", "rm_commit", "rm_del"
# The kernel operations around the commands: entry to return of the function that does one PCR
# extend or one get_random, so an operation's cost is split into TPM time (its tpm_transmits)
# and host time (the rest: building commands, ECDH/KDF/HMAC, waiting for the chip's lock).
# Whole tpm2_pcr_extend is what the 6.10 regression thread timed (151 ms on an SLB9670).
OP_FUNCS = {"op_extend": ("tpm2_pcr_extend", "extend"), "op_random": ("tpm2_get_random", "get_random")}
OP_EVENTS = {name: kind for name, (_, kind) in OP_FUNCS.items()}
OP_RET_EVENTS = {f"{name}_ret": kind for name, (_, kind) in OP_FUNCS.items()}
# Where the first session's handle sits in a command with 0, 1 or 2 handles (header 10 bytes,
# 4 per handle, then the 4-byte authorizationSize): the parser picks the one for the command
# code. It tells an HMAC session (0x02……) from a password authorization (TPM_RS_PW): whether
# a PCR_Extend was protected — what `tpm.disable_pcr_integrity=1` turns off. The buffer is the
# chip's page-sized command buffer, so reading past a short command stays inside it.
SESSION_OFFSETS = (14, 18, 22)
RETURN_ARGS_SINCE = (6, 10)  # a return probe may fetch $argN (refused by 6.1, taken by 6.12)


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


@dataclass(frozen=True)
class ProbeDef:
    event: str
    function: str
    line: str
    required: bool  # tpmtop cannot trace without it
    fallback: str | None = None  # a plainer definition, armed when the kernel refuses ``line``


def _tx_ret(group: str, buf: int, rel: tuple[int, int], live: bool) -> ProbeDef:
    """tpm_transmit's return, with the response code where the kernel can read it: the buffer
    holds the response then, so ``+6($argN)`` is the TPM's rc of every command, user space's
    included. Live the kernel is asked and says no with the plain one as the fallback; for the
    boot command line, where a refused definition is simply missing, by the release."""
    plain = f"r:{group}/{TX_RET} tpm_transmit ret=$retval:s64"
    with_rc = f"{plain} rsp_rc=+6($arg{buf}):x32"
    if live:
        return ProbeDef(TX_RET, "tpm_transmit", with_rc, True, fallback=plain)
    return ProbeDef(TX_RET, "tpm_transmit", with_rc if rel >= RETURN_ARGS_SINCE else plain, True)


def probe_defs(group: str, have_cmd: bool = True, release: str | None = None, live: bool = False) -> list[ProbeDef]:
    """The kprobe_events definitions (Documentation/trace/kprobetrace.rst syntax), required
    ones first. ``live``: for :class:`Probes`, which can try a definition and fall back."""
    buf, desc = arg_positions(release)
    rel = _release(release)
    # The task's name, fetched by the probe: the line's own comm comes from tracefs's
    # saved_cmdlines cache, which prints "<...>" once a busy system has evicted the pid.
    comm = " comm=$comm" if rel >= (4, 8) else ""
    defs = [
        ProbeDef(TX, "tpm_transmit",
                 f"p:{group}/{TX} tpm_transmit tag=+0($arg{buf}):x16 size=+2($arg{buf}):x32 cc=+6($arg{buf}):x32 "
                 + " ".join(f"s{off}=+{off}($arg{buf}):x32" for off in SESSION_OFFSETS) + comm,
                 True),
        _tx_ret(group, buf, rel, live),
    ]
    if have_cmd:
        defs += [
            ProbeDef(CMD, "tpm_transmit_cmd", f"p:{group}/{CMD} tpm_transmit_cmd desc=+0($arg{desc}):string{comm}",
                     True),
            ProbeDef(CMD_RET, "tpm_transmit_cmd", f"r:{group}/{CMD_RET} tpm_transmit_cmd rc=$retval:s32", True),
        ]
    for name, (func, _) in OP_FUNCS.items():
        defs += [ProbeDef(name, func, f"p:{group}/{name} {func}", False),
                 ProbeDef(f"{name}_ret", func, f"r:{group}/{name}_ret {func} ret=$retval:s32", False)]
    if rel >= (5, 5):  # +u (user memory) fetches
        defs.append(ProbeDef(WRITE, "tpm_common_write",
                             f"p:{group}/{WRITE} tpm_common_write cc=+u6($arg2):x32 len=$arg3:u64{comm}", False))
    if rel >= (5, 1):  # the (chip, space, buf, size) signatures
        defs += [
            ProbeDef(RM_PREP, "tpm2_prepare_space",
                     f"p:{group}/{RM_PREP} tpm2_prepare_space space=$arg2:x64 cc=+6($arg3):x32", False),
            ProbeDef(RM_PREP + "_ret", "tpm2_prepare_space",
                     f"r:{group}/{RM_PREP}_ret tpm2_prepare_space ret=$retval:s32", False),
            ProbeDef(RM_COMMIT, "tpm2_commit_space",
                     f"p:{group}/{RM_COMMIT} tpm2_commit_space space=$arg2:x64 rc=+6($arg3):x32", False),
            ProbeDef(RM_COMMIT + "_ret", "tpm2_commit_space",
                     f"r:{group}/{RM_COMMIT}_ret tpm2_commit_space ret=$retval:s32", False),
            ProbeDef(RM_DEL, "tpm2_del_space", f"p:{group}/{RM_DEL} tpm2_del_space space=$arg2:x64{comm}", False),
            ProbeDef(RM_DEL + "_ret", "tpm2_del_space", f"r:{group}/{RM_DEL}_ret tpm2_del_space", False),
        ]
    return defs


def probe_lines(group: str, have_cmd: bool = True, release: str | None = None) -> list[str]:
    """The kprobe_events definitions (Documentation/trace/kprobetrace.rst syntax)."""
    return [d.line for d in probe_defs(group, have_cmd, release)]


def boot_cmdline(group: str = "tpmtop", release: str | None = None) -> str:
    """``kprobe_event=`` for the kernel command line: the same probes from early boot.

    On the command line spaces become commas and definitions are separated by semicolons;
    ``trace_event=`` enables them and ``trace_buf_size=`` keeps a boot's worth.
    ``trace_clock=global``: where sched_clock is not stable (seen in a qemu guest on 6.1), the
    kernel switches the default clock from local to global at late_initcall, and switching
    empties the buffer — everything recorded before, the TPM driver's start-up and IMA's boot
    aggregate, was lost. Set at boot, the clock is not switched; global is also in step across
    CPUs, which a command that migrates between entry and return needs.
    """
    defs = ";".join(line.replace(" ", ",") for line in probe_lines(group, release=release))
    return f"kprobe_event={defs} trace_event={group}:* trace_buf_size=16M trace_clock=global"


class KernelTraceError(TpmtopError):
    """No way to trace here (not root, no tracefs, no kprobes, no TPM driver): exit 1."""


@dataclass
class Tracefs:
    root: str
    _functions: set[str] | None = field(default=None, repr=False, compare=False)
    _kallsyms: set[str] | None = field(default=None, repr=False, compare=False)

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
    """Whether ``func`` can be probed: listed in available_filter_functions or kallsyms
    (each read once per Tracefs: the first is ~40,000 lines)."""
    if t._functions is None:
        names: set[str] = set()
        try:
            with open(t.path("available_filter_functions")) as f:
                names = {line.split(maxsplit=1)[0] for line in f if line.strip()}
        except OSError:
            pass
        t._functions = names
    if func in t._functions:
        return True
    if t._kallsyms is None:
        syms: set[str] = set()
        try:
            with open("/proc/kallsyms") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 3 and parts[2].startswith("tpm"):
                        syms.add(parts[2])
        except OSError:
            pass
        t._kallsyms = syms
    return func in t._kallsyms


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
        self.events: list[str] = []  # the events armed
        self.skipped: list[str] = []  # optional events not armed, and why
        self.pipe_fd: int | None = None  # the instance's trace_pipe, O_NONBLOCK
        self.ops: tuple[str, ...] = ()  # the operation events armed (op_extend, op_random)
        self.response_rc = False  # tx_ret reads the response code (Linux 6.10+)
        self.clock = "local"  # the instance's trace_clock
        self._armed = False

    # Signals whose default action would kill tpmtop without unwinding (SIGINT, SIGTERM and
    # SIGHUP already unwind: the CLI turns them into exceptions). While probes are armed these
    # unwind too, so the probes are removed; SIGKILL cannot be caught: clean_stale handles it.
    UNWIND_SIGNALS = ("SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGXCPU")

    def _install_signals(self) -> None:
        import signal

        from tpmtop.tpm import interrupts

        self._old_handlers = {}
        for name in self.UNWIND_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is None:
                continue
            try:
                # tpmtop's own handler: Interrupted, except while the probes are being removed
                self._old_handlers[sig] = signal.signal(sig, interrupts.handler)
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

    def __enter__(self) -> Probes:
        self.stale_removed = clean_stale(self.t)
        if not kernel_has(self.t, "tpm_transmit"):
            raise KernelTraceError("this kernel has no tpm_transmit to probe (no TPM driver built in or "
                                   "loaded: CONFIG_TCG_TPM off?)")
        self.have_cmd = kernel_has(self.t, "tpm_transmit_cmd")
        self._install_signals()
        self._armed = True
        try:
            for d in probe_defs(self.group, self.have_cmd, live=True):
                if not d.required and not kernel_has(self.t, d.function):
                    self.skipped.append(f"{d.event} (no {d.function} in this kernel)")
                    continue
                if d.fallback is not None:
                    try:
                        self.t.append("kprobe_events", d.line)
                        self.events.append(d.event)
                        self.response_rc = d.event == TX_RET
                        continue
                    except OSError:
                        d = ProbeDef(d.event, d.function, d.fallback, d.required)
                try:
                    self.t.append("kprobe_events", d.line)
                except OSError as e:
                    log = ""
                    try:
                        log = self.t.read("error_log").strip().splitlines()[-1]
                    except (OSError, IndexError):
                        pass
                    why = f"{os.strerror(e.errno or errno.EINVAL)} {log}".rstrip()
                    if not d.required:
                        self.skipped.append(f"{d.event} (refused: {why})")
                        continue
                    raise KernelTraceError(f"the kernel refused probe {d.line.split()[0]}: {why}") from None
                self.events.append(d.event)
            # an operation counts only with both its entry and its return
            self.ops = tuple(o for o in OP_FUNCS if o in self.events and f"{o}_ret" in self.events)
            try:
                os.mkdir(self.t.path("instances", self.group))
                # In step across CPUs (an entry and its return may be on two), for this instance
                # only; "local" (the default) need not be. "mono" first: CLOCK_MONOTONIC is
                # Python's perf_counter, so the dashboard places kernel commands beside its own
                # without guessing an offset.
                for clock in ("mono", "global"):
                    try:
                        self.t.write(os.path.join("instances", self.group, "trace_clock"), clock)
                        self.clock = clock
                        break
                    except OSError:
                        pass
                # Opened before the events are enabled: under an IMA policy that measures
                # what root reads (ima_policy=tcb), opening this new file is a measurement —
                # a PCR_Extend the trace would otherwise show as tpmtop's own.
                self.pipe_fd = os.open(self.pipe_path(), os.O_RDONLY | os.O_NONBLOCK)
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
        from tpmtop.tpm import interrupts

        with interrupts.closing():  # a second Ctrl-C waits until the probes are gone
            if self.pipe_fd is not None:
                try:
                    os.close(self.pipe_fd)  # an open trace_pipe keeps the instance busy
                except OSError:
                    pass
                self.pipe_fd = None
            if self._armed:
                self._armed = False
                remove_group(self.t, self.group)
            self._restore_signals()

    def __exit__(self, *exc: object) -> None:
        self.close()
