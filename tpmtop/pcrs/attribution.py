"""The extend that broke a policy session: TPM_RC_PCR_CHANGED (0x128), explained.

PolicyPCR records the TPM's PCR update counter in the session; when the session is used and
the counter has moved since — any PCR extended in between — the command fails with 0x128
(TPM 2.0 Part 3, PolicyPCR; systemd #24906, keylime #585: usually IMA's extend of PCR 10).
This watch follows the exchanges tpmtop sees (a proxy's clients, `run`, the kernel view, a
capture with command bytes) and, at a 0x128, names the extends that fell between that
session's PolicyPCR and the failing command: those of a PCR in its selection first, then the
others (they move the same counter). Each with who sent it (a proxied process with its pid, the
kernel with its task and path) and when. Where no extend was seen, it says so, with the
pcrUpdateCounter of the PCR_Reads it saw (before the PolicyPCR, after it) and how far it moved.

Fed one exchange at a time (:meth:`PcrChangeWatch.feed`); bounded memory (the last
:data:`KEEP_EXTENDS` extends, :data:`KEEP_SESSIONS` sessions). Core: no Textual.
"""

from __future__ import annotations

import struct
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from tpmtop.ring import Ring
from tpmtop.tpm import names
from tpmtop.tpm.wire import CC_FLUSH_CONTEXT, TPM_ST_SESSIONS

if TYPE_CHECKING:
    from tpmtop.recorder import Event

CC_POLICY_PCR = 0x17F
CC_POLICY_RESTART = 0x180
CC_PCR_EXTEND = 0x182
CC_PCR_EVENT = 0x13C
CC_PCR_RESET = 0x13D
CC_PCR_READ = 0x17E
RC_PCR_CHANGED = 0x128
EXTENDING = frozenset({CC_PCR_EXTEND, CC_PCR_EVENT, CC_PCR_RESET})
# every command the watch learns from when it succeeds; any other succeeded command it ignores
WATCHED = EXTENDING | frozenset({CC_PCR_READ, CC_POLICY_PCR, CC_POLICY_RESTART, CC_FLUSH_CONTEXT})
KEEP_EXTENDS = 4096
KEEP_SESSIONS = 1024
KEEP_BREAKAGES = 256


@dataclass(frozen=True, slots=True)
class Exchange:
    """One command and its answer, as the watch needs it (from a recorder Event, a capture
    event, or the proxy's accounting)."""

    t_ns: int  # perf_counter_ns
    cc: int | None
    rc: int | None
    command: bytes | None = None
    response: bytes | None = None
    who: str = ""  # "tpm2_pcrextend (pid 4242)", "kernel kworker/0:1-10 · PCR extend (IMA / kernel)"
    pid: int | None = None
    sessions: tuple[int, ...] = ()  # session handles of the command, when known without its bytes


class Extend(msgspec.Struct, frozen=True, gc=False):
    """One extend seen. Out of the cyclic GC's sight (``gc=False``: it holds only numbers and
    strings, so it can be in no cycle): the watch keeps the last :data:`KEEP_EXTENDS`, which
    under a dashboard's workload were 4,096 more objects for every full collection to walk."""

    pcr: int | None  # None: a kernel extend whose PCR was not traced (IMA's is PCR 10)
    t_ns: int
    wall: float  # time.time() of it
    who: str
    pid: int | None
    command: str  # "PCR_Extend", "PCR_Event", "PCR_Reset"

    def to_json(self) -> dict[str, Any]:
        return {"pcr": self.pcr, "t_ns": self.t_ns, "time": _iso(self.wall), "by": self.who, "pid": self.pid,
                "command": self.command}

    def text(self, policy_t_ns: int) -> str:
        pcr = f"PCR {self.pcr}" if self.pcr is not None else "a PCR (not traced; IMA extends PCR 10)"
        return (f"{self.command} of {pcr} by {self.who} at {_iso(self.wall)} "
                f"({(self.t_ns - policy_t_ns) / 1e6:,.1f} ms after the PolicyPCR)")


@dataclass(slots=True)
class _Policy:
    session: int
    pcrs: frozenset[int]
    t_ns: int
    who: str
    counter_before: int | None  # the last pcrUpdateCounter seen before the PolicyPCR


@dataclass(frozen=True)
class Breakage:
    session: int | None
    command: str  # the failing command's short name
    who: str
    pid: int | None
    t_ns: int
    wall: float
    selection: tuple[int, ...]  # the PolicyPCR's PCRs (empty: no PolicyPCR seen)
    policy_who: str | None
    policy_t_ns: int | None
    in_selection: tuple[Extend, ...]
    others: tuple[Extend, ...]
    counter_before: int | None
    counter_after: int | None

    @property
    def pcrs(self) -> tuple[int | None, ...]:
        """The PCRs named (in the selection first), for the per-PCR counter."""
        return tuple(dict.fromkeys(e.pcr for e in self.in_selection + self.others))

    def text(self) -> str:
        head = (f"PCR_CHANGED: {self.command} by {self.who} failed with 0x128 (TPM_RC_PCR_CHANGED)"
                + (f" on policy session 0x{self.session:08x}" if self.session is not None else ""))
        if self.policy_t_ns is None:
            return head + ": no PolicyPCR of it was seen, so tpmtop cannot say which extend came between"
        sel = f"PCR {','.join(map(str, self.selection))}" if self.selection else "its PCRs not traced"
        parts = [f"{head}; PolicyPCR ({sel}) by {self.policy_who}, "
                 f"{(self.t_ns - self.policy_t_ns) / 1e6:,.1f} ms before"]
        if self.in_selection:
            parts.append("extended in between: " + "; ".join(e.text(self.policy_t_ns) for e in self.in_selection))
        if self.others and not self.selection:
            parts.append("extended in between: " + "; ".join(e.text(self.policy_t_ns) for e in self.others))
        elif self.others:
            parts.append("other PCRs extended in between (they move the same update counter): "
                         + "; ".join(e.text(self.policy_t_ns) for e in self.others))
        if not self.in_selection and not self.others:
            parts.append("no extend was seen in between (an extender tpmtop does not see: another TPM client, "
                         "the kernel outside the kernel view)" + self._counter_text())
        return ": ".join(parts[:1]) + ("; " + "; ".join(parts[1:]) if parts[1:] else "")

    def _counter_text(self) -> str:
        if self.counter_before is not None and self.counter_after is not None:
            return (f"; the PCR update counter moved by {self.counter_after - self.counter_before} "
                    f"({self.counter_before} → {self.counter_after}, from the PCR_Reads seen)")
        if self.counter_before is not None:
            return f"; the PCR update counter was {self.counter_before} before the PolicyPCR"
        return ""

    def to_json(self) -> dict[str, Any]:
        return {"session": f"0x{self.session:08x}" if self.session is not None else None,
                "command": self.command, "by": self.who, "pid": self.pid, "t_ns": self.t_ns,
                "time": _iso(self.wall), "policy_pcrs": list(self.selection), "policy_by": self.policy_who,
                "policy_t_ns": self.policy_t_ns,
                "extends_in_selection": [e.to_json() for e in self.in_selection],
                "other_extends": [e.to_json() for e in self.others],
                "update_counter_before": self.counter_before, "update_counter_after": self.counter_after,
                "text": self.text()}


def _iso(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall)) + f".{int(wall * 1000) % 1000:03d}Z"


@dataclass
class PcrChangeWatch:
    # a Ring, not a deque: its 4,096 references are not visited by every full garbage collection
    extends: Ring[Extend] = field(default_factory=lambda: Ring(KEEP_EXTENDS))
    policies: dict[int, _Policy] = field(default_factory=dict)
    breakages: deque[Breakage] = field(default_factory=lambda: deque(maxlen=KEEP_BREAKAGES))
    by_pcr: Counter[int | None] = field(default_factory=Counter)  # PCR (or None) -> 0x128 failures it is named in
    failures: int = 0
    counter: int | None = None  # the last pcrUpdateCounter a PCR_Read answered
    _last_policy_by_who: dict[str, int] = field(default_factory=dict)
    _last_policy: int | None = None
    # perf_counter_ns -> wall clock, fixed once (the events' clock is perf_counter_ns)
    _wall0: float = field(default_factory=lambda: time.time() - time.perf_counter_ns() / 1e9)

    def _wall(self, t_ns: int) -> float:
        return self._wall0 + t_ns / 1e9

    @staticmethod
    def wants(cc: int | None, rc: int | None) -> bool:
        """Whether ``feed`` would do anything with this exchange: a caller on a hot path (the
        proxy's accounting) asks before it builds one."""
        return rc == RC_PCR_CHANGED or cc in WATCHED

    def feed(self, x: Exchange) -> Breakage | None:
        cc, rc = x.cc, x.rc
        if cc is None:
            return None
        if rc == 0 or (rc is None and x.command is None):  # the kernel view: answered, its code not traced
            self._succeeded(x)
            return None
        if rc == RC_PCR_CHANGED:
            return self._failed(x)
        return None

    # -- what succeeded -----------------------------------------------------------------------
    def _succeeded(self, x: Exchange) -> None:
        cc = x.cc
        if cc in EXTENDING:
            pcr = _first_handle(x.command)
            if pcr is not None and pcr > 31:
                return
            self.extends.append(Extend(pcr, x.t_ns, self._wall(x.t_ns), x.who, x.pid, names.cc_short(cc)))
        elif cc == CC_PCR_READ and x.response is not None and len(x.response) >= 14:
            self.counter = struct.unpack_from(">I", x.response, 10)[0]
        elif cc == CC_POLICY_PCR:
            session = _first_handle(x.command)
            pcrs = _policy_pcr_selection(x.command)
            if session is None:
                if x.command is not None:
                    return
                session = -1 - len(self.policies)  # the kernel view: no bytes, no handle (a key of its own)
            if len(self.policies) >= KEEP_SESSIONS:
                self.policies.pop(next(iter(self.policies)))
            self.policies[session] = _Policy(session, pcrs, x.t_ns, x.who, self.counter)
            self._last_policy_by_who[x.who] = session
            self._last_policy = session
        elif cc in (CC_POLICY_RESTART, CC_FLUSH_CONTEXT):
            # the session's policy starts over, or the session is gone; PolicyRestart's handle
            # and FlushContext's one parameter sit at the same offset
            h = _first_handle(x.command)
            if h is not None:
                self.policies.pop(h, None)

    # -- the failure ----------------------------------------------------------------------------
    def _failed(self, x: Exchange) -> Breakage:
        self.failures += 1
        sessions = _sessions(x.command) or x.sessions
        pol = next((self.policies[s] for s in sessions if s in self.policies), None)
        if pol is None and not sessions:
            # the kernel view has no session handles: the same client's last PolicyPCR, else
            # the last one at all (tpm2-tools run each step as a process of its own)
            s = self._last_policy_by_who.get(x.who, self._last_policy)
            pol = self.policies.get(s) if s is not None else None
        wall = self._wall(x.t_ns)
        short = names.cc_short(x.cc)
        if pol is None:
            b = Breakage(next(iter(sessions), None), short, x.who, x.pid, x.t_ns, wall, (), None, None, (), (),
                         self.counter, None)
        else:
            between = [e for e in self.extends if pol.t_ns <= e.t_ns <= x.t_ns]
            inside = tuple(e for e in between if e.pcr in pol.pcrs)
            others = tuple(e for e in between if e.pcr not in pol.pcrs)
            after = self.counter if self.counter is not None and self.counter != pol.counter_before else None
            session = pol.session if pol.session >= 0 else None  # < 0: a key for a handle not traced
            b = Breakage(session, short, x.who, x.pid, x.t_ns, wall, tuple(sorted(pol.pcrs)), pol.who,
                         pol.t_ns, inside, others, pol.counter_before, after)
        for pcr in b.pcrs or (None,):
            self.by_pcr[pcr] += 1
        self.breakages.append(b)
        return b


# -- the few command fields it reads (TPM 2.0 Part 3) ---------------------------------------------

def _first_handle(cmd: bytes | None) -> int | None:
    if cmd is None or len(cmd) < 14:
        return None
    h: int = struct.unpack_from(">I", cmd, 10)[0]
    return h


def _params(cmd: bytes, nhandles: int) -> int | None:
    off = 10 + 4 * nhandles
    if struct.unpack_from(">H", cmd, 0)[0] == TPM_ST_SESSIONS:
        if off + 4 > len(cmd):
            return None
        off += 4 + struct.unpack_from(">I", cmd, off)[0]
    return off if off <= len(cmd) else None


def _sessions(cmd: bytes | None) -> tuple[int, ...]:
    if cmd is None:
        return ()
    from tpmtop.tpm import wire

    return tuple(h for h, _ in wire.decode_command(cmd).sessions if h >> 24 == 0x03)


def _policy_pcr_selection(cmd: bytes | None) -> frozenset[int]:
    """PolicyPCR(policySession; pcrDigest TPM2B_DIGEST, pcrs TPML_PCR_SELECTION): the PCRs
    selected, over every bank."""
    if cmd is None:
        return frozenset()
    try:
        p = _params(cmd, 1)
        if p is None:
            return frozenset()
        p += 2 + struct.unpack_from(">H", cmd, p)[0]
        count = struct.unpack_from(">I", cmd, p)[0]
        p += 4
        out: set[int] = set()
        for _ in range(min(count, 16)):
            _alg, size = struct.unpack_from(">HB", cmd, p)
            p += 3
            bits = cmd[p:p + size]
            p += size
            out.update(8 * i + b for i, byte in enumerate(bits) for b in range(8) if byte >> b & 1)
        return frozenset(out)
    except struct.error:
        return frozenset()


def exchange_of(e: Event | dict[str, Any]) -> Exchange:
    """A recorder Event or a capture event dict as an Exchange."""
    if isinstance(e, dict):
        cmd_hex, rsp_hex = e.get("command_hex"), e.get("response_hex")
        cc = names.CC_BY_NAME.get(e.get("command") or "")
        who = e.get("client")
        if not who and e.get("comm"):  # a kernel capture's event: the task, its pid, the kernel path
            who = f"{e['comm']}-{e.get('pid')} · {e.get('path') or e.get('origin') or ''}"
        pid = e.get("pid")
        return Exchange(int(e.get("t_ns") or 0), cc, e.get("rc"),
                        bytes.fromhex(cmd_hex) if isinstance(cmd_hex, str) else None,
                        bytes.fromhex(rsp_hex) if isinstance(rsp_hex, str) else None,
                        str(who or e.get("origin") or ""), pid if isinstance(pid, int) else None)
    who = e.client or e.origin
    if e.note and e.origin == "kernel":
        who = f"kernel {e.client} ({e.note})" if e.client else f"kernel ({e.note})"
    return Exchange(e.t_ns, e.cc, None if e.rc_unknown else e.rc, e.command, e.response, who or "", None,
                    tuple(h for h, _ in e.sessions if h >> 24 == 0x03))
