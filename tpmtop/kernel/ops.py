"""The kernel's TPM operations and what they cost: one PCR extend, one get_random.

An operation is what the 6.10 regression was about: IMA asks for one extend and the kernel
sends ContextLoad → StartAuthSession → FlushContext → PCR_Extend (6.10–6.11), or only the
PCR_Extend on a kept session (6.12+) unless something ended that session since. Its cost
splits into TPM time (the commands, tpm_transmit entry to return) and host time (the rest:
building the commands, the salt's ECDH, KDFs, HMACs, waiting for the chip's lock).

Where the probes wrap the operation itself (``tpm2_pcr_extend``, ``tpm2_get_random``:
:data:`tpmtop.kernel.probes.OP_FUNCS`), the parser hands over whole operations and this
module only counts them. In a trace without those events (a boot armed by an older
``kprobe_event=``, a text file), :class:`Assembler` rebuilds them from the commands: the
session set-up commands a task sent, closed by its next PCR_Extend or GetRandom — timed from
the first command's entry to the last one's return, so host work before the first command
and after the last is not seen (the operation is marked ``estimated``).

Which session behaviour the kernel has follows from the operations (:meth:`KernelAccounts.mode`),
not from its version: a set-up in every extend is the 6.10 per-command session, a set-up now
and then is a kept session (6.12+) that something ended, no StartAuthSession at all is no
HMAC session. Layer: kernel (reads the system, sends no TPM command). No Textual.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tpmtop.kernel.trace_pipe import RESOURCE_MANAGER, USER_SPACE, KernelCommand, KernelOp, Parser
from tpmtop.stats import LatencyHistogram

CC_CONTEXT_LOAD, CC_START_AUTH_SESSION, CC_FLUSH_CONTEXT = 0x161, 0x176, 0x165
CC_PCR_EXTEND, CC_GET_RANDOM = 0x182, 0x17B
SETUP_CCS = frozenset((CC_CONTEXT_LOAD, CC_START_AUTH_SESSION, CC_FLUSH_CONTEXT))
CLOSERS = {CC_PCR_EXTEND: "extend", CC_GET_RANDOM: "get_random"}


def from_user_space(kc: KernelCommand) -> bool:
    return kc.path.startswith(USER_SPACE)


def for_a_client(kc: KernelCommand) -> bool:
    """A /dev/tpm* client's command, or the resource manager's ContextLoad/Save/Flush for one."""
    return kc.path.startswith((USER_SPACE, RESOURCE_MANAGER))


class Assembler:
    """Operations from a command stream that has no operation events (see the module doc)."""

    def __init__(self) -> None:
        self._pending: dict[int, list[KernelCommand]] = {}
        self._seq = 0

    def feed(self, kc: KernelCommand) -> KernelOp | None:
        if for_a_client(kc):
            if from_user_space(kc):
                self._pending.pop(kc.pid, None)  # a task's own /dev/tpm* command ends its sequence
            return None
        if kc.cc in SETUP_CCS:
            self._pending.setdefault(kc.pid, []).append(kc)
            return None
        kind = CLOSERS.get(kc.cc or -1)
        setup = self._pending.pop(kc.pid, [])
        if kind is None:
            return None  # another kernel command (PCR_Read, Unseal…): not an operation counted here
        cmds = setup + [kc]
        self._seq += 1
        t0 = cmds[0].t_ns
        return KernelOp(self._seq, kind, t0, max(kc.t_ns + kc.wire_ns - t0, 0), kc.pid, kc.comm, kc.rc, cmds,
                        estimated=True)


def parse_in_order(parser: Parser, lines: Iterable[str]) -> tuple[list[KernelCommand], list[KernelCommand | KernelOp]]:
    """Feed ``lines`` to ``parser``: (the commands they completed, and those commands with the
    operations the op probes closed, in the order they ended: causes before effects)."""
    done: list[KernelCommand] = []
    seen: list[KernelCommand | KernelOp] = []
    for line in lines:
        cmds = parser.feed(line)
        if cmds:
            done.extend(cmds)
            seen.extend(cmds)
        if parser.ops:
            seen.extend(parser.take_ops())
    return done, seen


def route(seen: Iterable[KernelCommand | KernelOp], parser: Parser, assembler: Assembler,
          on_command: Callable[[KernelCommand], None], on_op: Callable[[KernelOp], None]) -> None:
    """Hand each of ``seen`` on; without the op probes, operations are assembled from the
    commands (the tap, the dashboard's kernel view and the exporter all count them so)."""
    for x in seen:
        if isinstance(x, KernelOp):
            on_op(x)
            continue
        on_command(x)
        if not parser.op_probes:
            op = assembler.feed(x)
            if op is not None:
                on_op(op)


def started_session(op: KernelOp) -> bool:
    return any(c.cc == CC_START_AUTH_SESSION for c in op.commands)


def host_text(st: OpStats, us: float) -> str:
    """The host share as a reader may take it: none is visible without operation probes for
    one-command operations (their time is their command's)."""
    return "not seen" if st.ops and st.blind == st.ops else f"{us:,.1f}"


@dataclass
class OpStats:
    """All operations of one kind (extend, get_random)."""

    kind: str
    ops: int = 0
    op_hist: LatencyHistogram = field(default_factory=LatencyHistogram)  # entry to return
    wire_hist: LatencyHistogram = field(default_factory=LatencyHistogram)  # its commands
    host_hist: LatencyHistogram = field(default_factory=LatencyHistogram)  # the rest
    with_setup: int = 0  # operations that started a session (StartAuthSession among their commands)
    failed: int = 0
    estimated: int = 0
    blind: int = 0  # estimated operations of one command: no host time can be seen at all
    hmac: int = 0  # operations whose closing command ran in an HMAC session (its handle traced)
    password: int = 0  # ... with a password authorization (TPM_RS_PW): no session protection
    commands: Counter[int | None] = field(default_factory=Counter)  # command code -> count, over all operations
    # command code -> LatencyHistogram (inside operations)
    command_hists: dict[int | None, Any] = field(default_factory=dict)
    setup_after: Counter[str] = field(default_factory=Counter)  # what came before a set-up (kept sessions)

    def add(self, op: KernelOp) -> None:
        self.ops += 1
        self.op_hist.record(op.total_ns)
        self.wire_hist.record(op.wire_ns)
        self.host_hist.record(op.host_ns)
        self.estimated += op.estimated
        self.blind += op.estimated and len(op.commands) == 1
        closer = next((c for c in reversed(op.commands) if c.cc in CLOSERS), None)
        if closer is not None and closer.hmac is not None:
            self.hmac += closer.hmac
            self.password += not closer.hmac
        if op.ret not in (None, 0) and not (self.kind == "get_random" and op.ret > 0):
            self.failed += 1
        for c in op.commands:
            self.commands[c.cc] += 1
            h = self.command_hists.get(c.cc)
            if h is None:
                h = self.command_hists[c.cc] = LatencyHistogram()
            h.record(c.wire_ns)


class KernelAccounts:
    """Every operation and command seen, and what the kernel's session behaviour looks like."""

    def __init__(self) -> None:
        self.by_kind: dict[str, OpStats] = {}
        self.commands = 0
        self.sessions_started = 0  # StartAuthSession commands the kernel sent
        self.user_commands = 0
        self._since_op: list[str] = []  # what ended a kept session, since the last operation
        self._first_setup_seen = False

    def add_command(self, kc: KernelCommand) -> None:
        self.commands += 1
        if from_user_space(kc):
            self.user_commands += 1
            self._since_op.append(f"user space ({kc.comm})")
        elif kc.path.startswith("session end"):
            self._since_op.append(f"session ended by {kc.comm}")
        elif kc.cc == CC_START_AUTH_SESSION:
            self.sessions_started += 1

    def add_op(self, op: KernelOp) -> None:
        st = self.by_kind.get(op.kind)
        if st is None:
            st = self.by_kind[op.kind] = OpStats(op.kind)
        st.add(op)
        if started_session(op):
            st.with_setup += 1
            # On a kept-session kernel a set-up means the session was ended since the previous
            # operation: by a user-space command (the observer effect), a hwrng read before
            # 6.15, or a suspend. The first set-up of a sitting has no "before".
            if self._first_setup_seen:
                cause = self._since_op[-1] if self._since_op else (
                    "a get_random" if op.kind == "extend" and "get_random" in self.by_kind else "nothing traced")
                st.setup_after[cause] += 1
            self._first_setup_seen = True
        self._since_op = []

    def mode(self) -> tuple[str | None, str]:
        """(none | per-command | reuse | None, why) from the extends seen."""
        st = self.by_kind.get("extend")
        if st is None or not st.ops:
            return None, "no PCR extend seen yet"
        n, s = st.ops, st.with_setup
        ext = f"{n} extend{'s' if n != 1 else ''}"
        if st.password and not st.hmac:
            return "none", (f"{ext} with password authorization (TPM_RS_PW), no HMAC session: "
                            "CONFIG_TCG_TPM2_HMAC off, or tpm.disable_pcr_integrity=1")
        if st.password and st.hmac:
            return None, f"{st.hmac} extends in an HMAC session, {st.password} with a password: mixed"
        if s == 0 and st.hmac:
            return "reuse", f"{ext} in an HMAC session kept from before tracing began (no set-up seen)"
        if s == 0:
            return "none", (f"{ext} and no session set-up: no HMAC session (this trace shows no session "
                            "handles, so a session kept from before it began cannot be ruled out)")
        if s == n and n >= 2:
            return "per-command", f"a fresh salted session in each of {n} extends (Linux 6.10–6.11 behaviour)"
        if s == n:
            return None, "one extend, with a session set-up: per-command or the first of a kept session"
        return "reuse", (f"kept session: {s} of {n} extends set one up (Linux 6.12+; "
                         "a user-space command, or a hwrng read before 6.15, ends it)")
