"""Per-client accounting: commands, errors, latency per command code, and the handles each
client made the TPM create and what it left behind.

Created: the response handle of CreatePrimary, Load, LoadExternal, CreateLoaded,
StartAuthSession and ContextLoad. Gone: FlushContext of it (by anyone), or a session used
without continueSession in a successful command (the TPM ends it). A session that was
ContextSaved and not loaded again is *saved*: it still takes one of the TPM's active-session
slots until someone loads and flushes it, so it is reported as left behind too. A successful
TPM2_Clear flushes every transient object (the TPM does: Part 3, 24.6), sessions stay.

Memory is bounded whatever the number of clients: a departed client is kept whole among the
last :data:`RECENT_DEPARTED` (the dashboard, the capture's ``clients``), and folded into its
program's summary (same executable and process name; at most :data:`MAX_PROGRAMS`, the rest
into one "other programs" row); latencies are :class:`~.latency.CompactLatency`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpmtop.pcrs.attribution import Exchange, PcrChangeWatch
from tpmtop.proxy.latency import CompactLatency
from tpmtop.proxy.lines import LineKind, ProxyLine
from tpmtop.proxy.session_use import SessionType, SessionUse, parse_start_auth_session, session_type
from tpmtop.textsafe import safe
from tpmtop.tpm import names, wire
from tpmtop.tpm.names import HandleType
from tpmtop.tpm.rcformat import RC_LOCKOUT, auth_failure_text
from tpmtop.unlock.live import UnsealWatch

if TYPE_CHECKING:
    from tpmtop.proxy.peers import Peer


def wall_clock() -> str:
    """Now, as a person reads a journal (a failure line's t_ns alone says nothing to them)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class LockoutLine(ProxyLine):
    """A command the TPM refused in lockout: said through the proxy's rate-limited log."""


RECENT_DEPARTED = 64  # departed clients kept whole (the rest: their program's summary)
MAX_PROGRAMS = 256  # program summaries; beyond, one "other programs" row
MAX_SESSIONS_KEPT = 32  # sessions remembered per program summary

CC_CREATE_PRIMARY = 0x131
CC_LOAD = 0x157
CC_LOAD_EXTERNAL = 0x167
CC_CREATE_LOADED = 0x191
CC_START_AUTH_SESSION = 0x176
CC_CONTEXT_LOAD = 0x161
CC_CONTEXT_SAVE = 0x162
CC_FLUSH_CONTEXT = 0x165
CC_CLEAR = 0x126
# commands after which what is loaded is asked of the TPM (they flush what they flush by
# hierarchy): Clear, ChangeEPS, ChangePPS, HierarchyControl (a hierarchy disabled)
MAY_FLUSH = {CC_CLEAR, 0x124, 0x125, 0x121}
CREATING = {CC_CREATE_PRIMARY, CC_LOAD, CC_LOAD_EXTERNAL, CC_CREATE_LOADED, CC_START_AUTH_SESSION,
            CC_CONTEXT_LOAD}
TPM_RS_PW = 0x40000009


# How the proxy's reports and captures (the "kind" of a held handle) name what a client holds
# when its StartAuthSession was not seen (a session loaded from a context saved before the
# proxy started): by handle range, where a trial session is in the policy range. The proxy
# only ever sees transient objects and sessions created, the rest is a "handle".
HELD_TEXT = {HandleType.TRANSIENT: "transient object", HandleType.HMAC_SESSION: "HMAC session",
             HandleType.POLICY_SESSION: "policy session"}
_SESSION_TYPES = (HandleType.HMAC_SESSION, HandleType.POLICY_SESSION)


def held_text(kind: HandleType, stype: SessionType | None = None) -> str:
    """A held handle's name: the session's type when the proxy saw it started, else its range's."""
    if stype is not None and kind in _SESSION_TYPES:
        return stype.label
    return HELD_TEXT.get(kind, "handle")


@dataclass(slots=True)
class Held:
    handle: int
    created_by: str
    state: str = "loaded"  # "loaded" or "saved" (a ContextSaved session)
    session_type: SessionType | None = None  # from its StartAuthSession, when the proxy saw it

    @property
    def kind(self) -> HandleType:
        return HandleType.of(self.handle)

    @property
    def label(self) -> str:
        return held_text(self.kind, self.session_type)

    def to_json(self) -> dict[str, Any]:
        out = {"handle": f"0x{self.handle:08x}", "kind": self.label, "created_by": self.created_by,
               "state": self.state}
        if self.session_type is not None:
            out["session_type"] = self.session_type.value
        return out

    def text(self) -> str:
        return f"0x{self.handle:08x} {self.label} ({self.created_by}, {self.state})"


def _per_command(per_cc: dict[int | None, CompactLatency]) -> dict[str, dict[str, Any]]:
    return {names.cc_short(cc): h.summary() for cc, h in sorted(per_cc.items(), key=lambda kv: kv[0] or 0)}


def _errors_by_code(error_codes: dict[tuple[int | None, int | None], int]) -> list[dict[str, Any]]:
    return [{"command": names.cc_short(cc), "rc": rc, "rc_text": names.rc_text(rc), "count": n}
            for (cc, rc), n in sorted(error_codes.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0))]


@dataclass
class ClientStats:
    """One client: a process (or, when it cannot be named, one connection)."""

    id: int
    peer: Peer
    protocol: str
    connected_ns: int = field(default_factory=time.perf_counter_ns)
    connected_wall: float = field(default_factory=time.time)
    departed_ns: int | None = None
    connections: int = 0
    open_connections: int = 0
    commands: int = 0
    errors: int = 0
    error_codes: dict[tuple[int | None, int | None], int] = field(default_factory=dict)  # (cc, rc) -> count
    wire_ns_total: int = 0
    per_cc: dict[int | None, CompactLatency] = field(default_factory=dict)
    created: int = 0
    flushed: int = 0
    sessions: dict[int, SessionUse] = field(default_factory=dict)  # handle -> this client's
    leaked: list[Held] = field(default_factory=list)  # Held, filled at departure
    locality: int = 0
    dropped: str | None = None  # why a connection of it was cut (framing), last one
    exited: bool = False  # its process has ended (its connections may still be closing)
    inflight: int = 0  # commands sent to the TPM and not yet answered and accounted
    waits: CompactLatency = field(default_factory=CompactLatency)  # waits for its turn (raw TPM)

    @property
    def name(self) -> str:
        return self.peer.name

    def hist(self) -> CompactLatency:
        h = CompactLatency()
        for x in self.per_cc.values():
            h.merge(x)
        return h

    def to_json(self, held: list[Held] | None = None) -> dict[str, Any]:
        return {
            "id": self.id, **self.peer.to_json(), "protocol": self.protocol,
            "connections": self.connections, "commands": self.commands, "errors": self.errors,
            "wire_us_total": round(self.wire_ns_total / 1000, 3),
            "per_command": _per_command(self.per_cc),
            "errors_by_code": _errors_by_code(self.error_codes),
            "created": self.created, "flushed": self.flushed,
            "held": [h.to_json() for h in (held or [])],
            "leaked": [h.to_json() for h in self.leaked],
            "sessions": [s.to_json() for s in self.sessions.values()],
            "departed": self.departed_ns is not None,
            "turn_waits": self.waits.summary(),
        }


def program_key(peer: Peer) -> tuple[str, str]:
    return (getattr(peer, "exe", "") or "", peer.name)


@dataclass
class ProgramSummary:
    """Every departed client of one program (executable + process name), folded."""

    name: str
    exe: str
    clients: int = 0
    commands: int = 0
    errors: int = 0
    error_codes: dict[tuple[int | None, int | None], int] = field(default_factory=dict)
    wire_ns_total: int = 0
    per_cc: dict[int | None, CompactLatency] = field(default_factory=dict)
    created: int = 0
    flushed: int = 0
    leaked: int = 0
    last_leaks: deque[str] = field(default_factory=lambda: deque(maxlen=8))  # texts of the latest
    sessions: dict[int, SessionUse] = field(default_factory=dict)  # at most MAX_SESSIONS_KEPT
    waits: CompactLatency = field(default_factory=CompactLatency)

    def fold(self, c: ClientStats) -> None:
        self.clients += 1
        self.commands += c.commands
        self.errors += c.errors
        for k, n in c.error_codes.items():
            self.error_codes[k] = self.error_codes.get(k, 0) + n
        self.wire_ns_total += c.wire_ns_total
        for cc, h in c.per_cc.items():
            self.per_cc.setdefault(cc, CompactLatency()).merge(h)
        self.created += c.created
        self.flushed += c.flushed
        self.leaked += len(c.leaked)
        for held in c.leaked:
            self.last_leaks.append(f"pid {c.peer.pid}: {held.text()}")
        for sh, use in c.sessions.items():
            if sh in self.sessions or len(self.sessions) < MAX_SESSIONS_KEPT:
                self.sessions[sh] = use
        self.waits.merge(c.waits)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "exe": self.exe, "clients": self.clients, "commands": self.commands,
            "errors": self.errors, "wire_us_total": round(self.wire_ns_total / 1000, 3),
            "per_command": _per_command(self.per_cc),
            "errors_by_code": _errors_by_code(self.error_codes),
            "created": self.created, "flushed": self.flushed, "leaked": self.leaked,
            "last_leaks": list(self.last_leaks), "turn_waits": self.waits.summary(),
        }


class Accounts:
    """Every client the proxy has seen (live ones, the last departed ones whole, the others
    folded into per-program summaries), and which client holds which handle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.clients: dict[int, ClientStats] = {}
        self._by_key: dict[tuple[int | str, float | str | None], ClientStats] = {}
        self._owner: dict[int, tuple[ClientStats, Held]] = {}  # handle -> (its client, Held)
        self._sessions: dict[int, SessionUse] = {}  # session handle -> its latest StartAuthSession
        self._recent: deque[int] = deque()  # departed client ids still kept whole, oldest first
        self.programs: OrderedDict[tuple[str, str], ProgramSummary] = OrderedDict()
        self.departed = 0
        self.queue_max = 0  # the most clients that ever waited for their turn at once
        self._next = 1
        self.pcr_watch = PcrChangeWatch()  # names the extend behind a 0x128 (tpmtop.pcrs.attribution)
        self.unseal_watch = UnsealWatch()  # names the LUKS2 token behind a failing Unseal (tpmtop.unlock.live)
        # (client, command) of a MAY_FLUSH command answered and not yet checked with the TPM
        self.verify_due: tuple[ClientStats, int] | None = None

    def client_for(self, peer: Peer, protocol: str, shared_key: bool = True) -> ClientStats:
        """The client of a new connection: a live process already seen is the same client."""
        with self._lock:
            if shared_key and peer.pid is not None:
                c = self._by_key.get(peer.key)
                if c is not None and c.departed_ns is None:
                    c.connections += 1
                    c.open_connections += 1
                    return c
            c = ClientStats(self._next, peer, protocol)
            self._next += 1
            c.connections = c.open_connections = 1
            self.clients[c.id] = c
            if shared_key and peer.pid is not None:
                self._by_key[peer.key] = c
            return c

    def record(self, c: ClientStats, cmd: bytes, rsp: bytes | None, wire_ns: int) -> list[str]:
        """Account one exchange; returns what is worth a log line (a client flushing another
        client's object, a TPM2_Clear)."""
        info = wire.decode_command(cmd)
        r = wire.decode_response(rsp, info.cc)
        cc, rc = info.cc, r.rc
        notes: list[str] = []
        with self._lock:
            if self.pcr_watch.wants(cc, rc):  # most commands: no exchange built, no name formatted
                broke = self.pcr_watch.feed(Exchange(time.perf_counter_ns(), cc, rc, cmd, rsp,
                                                     f"{c.name} (pid {c.peer.pid}, client {c.id})", c.peer.pid))
                if broke is not None:
                    notes.append(broke.text())
            if self.unseal_watch.wants(cc, rc):
                token = self.unseal_watch.feed(cc, rc, cmd, rsp, f"client {c.id} {c.name} (pid {c.peer.pid})")
                if token is not None:
                    notes.append(ProxyLine(safe(token), LineKind.UNSEAL))
            c.commands += 1
            c.wire_ns_total += wire_ns
            h = c.per_cc.get(cc)
            if h is None:
                h = c.per_cc[cc] = CompactLatency()
            h.record(wire_ns)
            for sh, attrs in info.sessions:  # what a session was used with, failed or not
                use = self._sessions.get(sh)
                if use is not None:
                    use.attrs |= attrs
                    c.sessions.setdefault(sh, use)
            if rc != 0:
                c.errors += 1
                c.error_codes[(cc, rc)] = c.error_codes.get((cc, rc), 0) + 1
                wrong = auth_failure_text(rc)
                if wrong:  # who caused it, as it happens (tpmtop health counts and names them too)
                    notes.append(ProxyLine(f"client {c.id} {c.name} (pid {c.peer.pid}): {names.cc_short(cc)} "
                                           f"{wrong} (at {wall_clock()})", LineKind.AUTH))
                elif rc == RC_LOCKOUT:
                    # refused, not counted: said (rate-limited: a locked-out TPM refuses fast) so
                    # that the operator sees who is still knocking, and when
                    notes.append(LockoutLine(f"client {c.id} {c.name} (pid {c.peer.pid}): {names.cc_short(cc)} "
                                             f"refused: 0x921 TPM_RC_LOCKOUT, the TPM is in dictionary-attack "
                                             f"lockout (at {wall_clock()})", LineKind.AUTH))
                return notes
            for sh, attrs in info.sessions:
                if sh != TPM_RS_PW and not attrs & 0x01:  # without continueSession the TPM ends it
                    self._gone(sh)
            if cc in CREATING and r.handle is not None:
                # a session loaded from a saved context keeps the type its start named
                held = Held(r.handle, names.cc_short(cc), session_type=session_type(self._sessions.get(r.handle)))
                prev = self._owner.get(r.handle)
                if prev is not None and prev[0] is not c and cc == CC_CONTEXT_LOAD:
                    # a context another client saved, now loaded by this one: it holds it now
                    self._owner.pop(r.handle, None)
                self._owner[r.handle] = (c, held)
                c.created += 1
                if cc == CC_START_AUTH_SESSION:
                    parsed = parse_start_auth_session(cmd)
                    if parsed:
                        salted, bound, stype, sym = parsed
                        # one record per session, shared by every client that uses it (tpm2-tools
                        # hand sessions from process to process through context files)
                        use = SessionUse(r.handle, stype, salted, bound, sym)
                        c.sessions[r.handle] = self._sessions[r.handle] = use
                        held.session_type = session_type(use)
            elif cc == CC_FLUSH_CONTEXT and info.flush_handle is not None:
                o = self._owner.pop(info.flush_handle, None)
                if o is not None:
                    c.flushed += 1
                    other, held = o
                    if other is not c and held.state == "loaded" and held.kind is HandleType.TRANSIENT:
                        # a transient object is one process's own (sessions and saved
                        # contexts are handed from process to process by tpm2-tools)
                        notes.append(f"client {c.id} {c.name} (pid {c.peer.pid}) flushed 0x{held.handle:08x}, "
                                     f"a {held.label} client {other.id} {other.name} "
                                     f"(pid {other.peer.pid}, {'gone' if other.departed_ns else 'still running'}) "
                                     f"created with {held.created_by}")
            elif cc == CC_CONTEXT_SAVE and info.handles:
                h0 = info.handles[0]
                o = self._owner.get(h0)
                if o is not None and HandleType.of(h0) in _SESSION_TYPES:
                    o[1].state = "saved"  # a saved session leaves the loaded list, not the TPM
            elif cc in MAY_FLUSH:
                # What it flushed is the TPM's to say, not ours to guess (a Clear flushes the
                # owner's and endorsement's objects, not the platform's, nor sessions): the
                # server asks the TPM once the answer is out (:meth:`reconcile`)
                self.verify_due = (c, cc)
        return notes

    def reconcile(self, transient: set[int], sessions: set[int]) -> tuple[int, list[tuple[ClientStats, Held]]]:
        """What the TPM says it holds (its transient handles; its sessions, loaded or saved, by
        slot: the saved list names a policy session with the HMAC range's top byte): every
        handle held here that the TPM no longer holds is dropped. Returns (how many the TPM
        still holds of those known here, the dropped ones)."""
        with self._lock:
            gone: list[tuple[ClientStats, Held]] = []
            kept = 0
            for hd, (owner, held) in list(self._owner.items()):
                kind = HandleType.of(hd)
                if kind is HandleType.TRANSIENT:
                    there = hd in transient
                elif kind in _SESSION_TYPES:
                    there = hd & 0xFFFFFF in sessions
                else:
                    continue
                if there:
                    kept += 1
                else:
                    del self._owner[hd]
                    gone.append((owner, held))
            return kept, gone

    def tpm_reset(self) -> None:
        """The TPM was replaced (a private swtpm restarted): nothing is loaded any more."""
        with self._lock:
            self._owner.clear()
            self._sessions.clear()

    def _gone(self, h: int) -> bool:
        return self._owner.pop(h, None) is not None

    def held_by(self, cid: int) -> list[Held]:
        with self._lock:
            return [held for (owner, held) in self._owner.values() if owner.id == cid]

    def held_all(self) -> list[tuple[ClientStats, Held]]:
        """Every handle still loaded (or saved) and the client that created it."""
        with self._lock:
            return sorted(self._owner.values(), key=lambda oh: (oh[0].id, oh[1].handle))

    def connection_closed(self, c: ClientStats) -> None:
        with self._lock:
            c.open_connections -= 1

    def depart(self, c: ClientStats) -> list[Held]:
        """The client is gone: what it left behind is its leak report; it is folded into its
        program's summary and kept whole only among the last RECENT_DEPARTED."""
        with self._lock:
            if c.departed_ns is not None:
                return c.leaked
            c.departed_ns = time.perf_counter_ns()
            c.leaked = [held for (owner, held) in self._owner.values() if owner is c]
            if self._by_key.get(c.peer.key) is c:
                del self._by_key[c.peer.key]
            self._program(c).fold(c)
            self.departed += 1
            self._recent.append(c.id)
            while len(self._recent) > RECENT_DEPARTED:
                self.clients.pop(self._recent.popleft(), None)
            return c.leaked

    def _program(self, c: ClientStats) -> ProgramSummary:
        key = program_key(c.peer)
        p = self.programs.get(key)
        if p is None:
            if len(self.programs) >= MAX_PROGRAMS:
                key = ("", "other programs")
                p = self.programs.get(key)
            if p is None:
                p = self.programs[key] = ProgramSummary(key[1], key[0])
        return p

    def live(self) -> list[ClientStats]:
        with self._lock:
            return [c for c in self.clients.values() if c.departed_ns is None]

    def snapshot(self) -> list[ClientStats]:
        with self._lock:
            return sorted(self.clients.values(), key=lambda c: c.id)

    def program_snapshot(self) -> list[ProgramSummary]:
        with self._lock:
            return list(self.programs.values())
