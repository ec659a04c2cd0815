"""The workload: one operation at a time, in the chosen engine and session mode.

The four strategies live here, once, and drive either engine through the same small
interface (load_null, start_session, flush, save_session, load_session, op) — so both
engines put the same command sequence on the wire for the same mode.

Session set-up for ``reuse`` and ``saved`` happens when the mode starts, outside the timed
operation (the kernel pays it once, then never again until the session is lost); it is
counted in ``RunAccount.setups``. A session lost mid-run is set up again *inside* the
operation that found out, and that operation pays for it, as the kernel's would.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from enum import Enum
from typing import TYPE_CHECKING, Any

from tpmtop.errors import TpmError
from tpmtop.sessions.accounting import RunAccount
from tpmtop.sessions.engine import ATTR_CONTINUE, ATTR_DECRYPT, ATTR_ENCRYPT, CONTEXT_INVALID, CryptoEngine
from tpmtop.sessions.engines import make_engine
from tpmtop.sessions.modes import DEFAULT_PCR, Engine, Mode, Op, check_pcr
from tpmtop.tpm import names
from tpmtop.tpm.exchange import Labels, Origin, WireEntry, labelled, wire_log

if TYPE_CHECKING:
    from tpmtop.tpm.commands import Transacts


class _Basis(Enum):
    """Where a baseline extend stands in its burst (RunAccount's kept-session basis)."""

    FIRST = "first"  # right after the mode's own operation
    BACK_TO_BACK = "back to back"  # past the burst's warm-up, each after the session's HMAC work


# The workload drives either engine without knowing its session or handle type.
AnyEngine = CryptoEngine[Any, Any]

# A kept session the TPM no longer has: TPM_RC_REFERENCE_S0..S6 (0x918…, not loaded), or a
# format-one error naming the session (TPM_RC_HANDLE/VALUE + session number).
_SESSION_GONE = set(range(names.RC_REFERENCE_S0, names.RC_REFERENCE_S6 + 1))
_HANDLE_OR_VALUE = (names.RC_HANDLE, names.RC_VALUE)
CONTEXT_GAP = names.RC_CONTEXT_GAP
SESSIONS_FULL = (names.RC_SESSION_MEMORY, names.RC_SESSION_HANDLES)


def session_gone(rc: int | None) -> bool:
    if rc is None:
        return False
    if rc in _SESSION_GONE:
        return True
    # format one, N in 8..15 means session N-8, P (bit 6) clear
    return bool(rc & 0x80) and not rc & 0x40 and (rc >> 8) & 0xF >= 8 and names.rc_base(rc) in _HANDLE_OR_VALUE


def session_attrs(op: Op, continue_session: bool, param_encryption: bool) -> int:
    attrs = ATTR_CONTINUE if continue_session else 0
    if param_encryption:
        # What the kernel does: GetRandom's response is encrypted (0x40); PCR_Extend has no
        # TPM2B first parameter to encrypt. CreatePrimary's inSensitive can be (0x20).
        attrs |= {Op.GET_RANDOM: ATTR_ENCRYPT, Op.CREATE_PRIMARY: ATTR_DECRYPT}.get(op, 0)
    elif op == Op.GET_RANDOM:
        # A TPM rejects an HMAC session on a command with no authorization handle unless it
        # audits, encrypts or decrypts: GetRandom keeps encrypt even with encryption "off".
        attrs |= ATTR_ENCRYPT
    return attrs


class Workload:
    def __init__(self, conn: Any, engine: str = Engine.NATIVE, mode: str = Mode.PER_COMMAND, op: str = Op.EXTEND,
                 pcr: int = DEFAULT_PCR, param_encryption: bool = True, origin: str = Origin.WORKLOAD,
                 allow_pcr: bool = False) -> None:
        # Here and not only in the CLI: no caller may extend a boot PCR by accident.
        check_pcr(pcr, allow_pcr)
        self.conn = conn
        self.t: Transacts = conn.transport
        self.pcr = pcr
        self.param_encryption = param_encryption
        self.origin = origin
        self.accounts: dict[tuple[str, str, str], RunAccount] = {}
        # Accounts of earlier TPM lives (before a reset), never merged with the current one.
        self.periods: list[dict[tuple[str, str, str], RunAccount]] = []
        self._engines: dict[Engine, AnyEngine] = {}
        # as enums from the start (ValueError for a name not defined, as set() below would raise)
        self.engine_name, self.mode, self.op = Engine(engine), Mode(mode), Op(op)
        self.kept: object | None = None  # the reuse/saved session of the current engine
        self._prepared = False
        self._op_seq = 0
        self.ops_log: list[tuple[int, str, str, str, int, int, int, bool]] | None = None
        self.set(engine, mode, op)

    # -- configuration ------------------------------------------------------------------------
    def set(self, engine: str | None = None, mode: str | None = None, op: str | None = None) -> None:
        """Takes effect before the next operation; the kept session is ended now."""
        engine = engine or self.engine_name
        mode = mode or self.mode
        op = op or self.op
        engine, mode, op = Engine(engine), Mode(mode), Op(op)  # ValueError for a name not defined
        if (engine, mode) != (self.engine_name, self.mode):
            self._teardown()
        self.engine_name, self.mode, self.op = engine, mode, op

    def engine(self) -> AnyEngine:
        e = self._engines.get(self.engine_name)
        if e is None:
            e = make_engine(self.engine_name, self.conn)
            with self._labelled(None):
                e.create_null_primary()  # the kernel's probe, once per engine
            self._engines[self.engine_name] = e
        return e

    def account(self) -> RunAccount:
        key = (self.engine_name, self.mode, self.op)
        a = self.accounts.get(key)
        if a is None:
            a = self.accounts[key] = RunAccount(*key)
        return a

    def _labelled(self, op_seq: int | None) -> AbstractContextManager[None]:
        """Every command sent in this scope is stamped with this workload's labels."""
        return labelled(Labels(self.origin, self.engine_name, self.mode, self.op, op_seq))

    # -- sessions -----------------------------------------------------------------------------
    def _new_session(self, e: AnyEngine) -> object:
        primary = e.load_null()
        try:
            try:
                s = e.start_session(primary)
            except TpmError as err:
                # Session slots full: free the sessions tpmtop itself left behind (an
                # interrupted run, a mode switch that failed half-way), then try once more.
                if err.rc not in SESSIONS_FULL or not self._flush_stray_sessions():
                    raise
                s = e.start_session(primary)
        finally:
            e.flush(primary)
        return s

    def _flush_stray_sessions(self) -> int:
        from tpmtop.tpm.handles import flush, list_handles

        e = self._engines.get(self.engine_name)
        # The kept session is not a stray (either engine: an ESYS_TR is not the TPM's handle).
        kept = e.tpm_handle(self.kept) if e is not None and self.kept is not None else None
        n = 0
        for entry in list_handles(self.t, self.conn.recorder.owned_handles()):
            if entry.ours and entry.kind.is_session and entry.handle != kept:
                try:
                    flush(self.t, entry.handle)
                    n += 1
                except TpmError:
                    pass
        return n

    def recover_from_reset(self, reason: str) -> None:
        """The TPM came back as a new TPM (null seed changed: reset, or interference). Say so
        in the recorder, keep this period's accounts apart, and start again from the probe."""
        self.conn.recorder.mark(f"TPM reset: {reason}")
        if self.accounts:
            self.periods.append(self.accounts)
        self.accounts = {}
        for e in self._engines.values():
            if self.kept is not None and e.name == self.engine_name:
                e.forget_session(self.kept)
        self._engines.clear()
        self.kept = None
        self._prepared = False

    def _prepare(self, e: AnyEngine) -> None:
        strategy = STRATEGIES[self.mode]
        if strategy.kept and self.kept is None:
            with self._labelled(None):
                self.kept = self._new_session(e)
                if strategy.saved:
                    e.save_session(self.kept)
            self.account().setups += 1
        self._prepared = True

    def _teardown(self) -> None:
        s, self.kept = self.kept, None
        self._prepared = False
        if s is None:
            return
        e = self._engines.get(self.engine_name)
        if e is None:
            return
        try:
            with self._labelled(None):
                e.end_session(s)
        except TpmError:
            pass  # already gone (TPM reset, flushed by someone else): nothing left to leak

    # -- one operation ------------------------------------------------------------------------
    def run_one(self) -> int:
        """Run one operation; return its total ns. Raises TpmtopError subclasses."""
        e = self.engine()
        if not self._prepared:
            self._prepare(e)
        return self._timed(e)

    def run_baseline(self, back_to_back: bool = False, steady: bool = False) -> int:
        """One operation in mode ``none`` between the current mode's own (the dashboard's
        interleaved baseline): counted in the (engine, none, op) account, its commands labelled
        mode ``none`` and origin ``baseline``. The current mode's kept session stays as it is
        (a ``none`` operation uses no session), so the mode's next operation pays no set-up.

        ``back_to_back``: it follows another baseline operation (a burst,
        tpmtop.sources.live_workload), and the session's HMAC work is timed first, outside
        any operation, so that this extend follows the host work a kept session's would.
        ``steady``: past the burst's warm-up, so its figures and that HMAC work are recorded
        as a kept session's basis (RunAccount.b2b_wire_hist …)."""
        e = self.engine()
        mode, origin = self.mode, self.origin
        self.mode, self.origin = Mode.NONE, Origin.BASELINE  # the stream says "baseline"
        try:
            basis = self.engine_name is Engine.NATIVE and self.op is Op.EXTEND
            if basis and back_to_back:
                from tpmtop.sessions.native import session_hmac_host_ns  # loaded with the native engine already

                hm = session_hmac_host_ns(self.pcr)
                if steady:
                    self.account().hmac_host_hist.record(hm)
            kind = _Basis.FIRST if not back_to_back else _Basis.BACK_TO_BACK if steady else None
            return self._timed(e, kind if basis else None)
        finally:
            self.mode, self.origin = mode, origin

    def _timed(self, e: AnyEngine, basis: _Basis | None = None) -> int:
        acct = self.account()
        self._op_seq = self.conn.recorder.next_op_seq()
        wire: list[WireEntry] = []
        ok = False
        t0 = 0
        try:
            with self._labelled(self._op_seq), wire_log(wire):
                t0 = time.perf_counter_ns()
                try:
                    self._run_mode(e)
                    ok = True
                finally:
                    total = time.perf_counter_ns() - t0
        except BaseException:
            acct.errors += 1
            raise
        finally:
            # book-keeping after the timed scope
            if self.ops_log is not None:
                self.ops_log.append((self._op_seq, self.engine_name, self.mode, self.op, t0, total,
                                     sum(w for _, w, _ in wire), ok))
        acct.add(total, wire, t0)
        if basis is not None and len(wire) == 1:  # a plain extend is one command
            wire_ns = wire[0][1]
            if basis is _Basis.FIRST:
                acct.first_wire_hist.record(wire_ns)
            else:
                acct.b2b_wire_hist.record(wire_ns)
                acct.b2b_host_hist.record(max(total - wire_ns, 0))
        return total

    def _run_mode(self, e: AnyEngine) -> None:
        STRATEGIES[self.mode].run(self, e)

    def _recover(self, e: AnyEngine) -> None:
        self.account().sessions_lost += 1
        e.forget_session(self.kept)
        self.kept = self._new_session(e)
        if STRATEGIES[self.mode].saved:
            e.save_session(self.kept)

    def _flush_quietly(self, e: AnyEngine, s: object) -> None:
        try:
            e.flush(e.session_handle(s))
        except Exception:
            pass

    # -- the end ----------------------------------------------------------------------------
    def close(self) -> None:
        """Flush every handle tpmtop created that the TPM still holds."""
        from tpmtop.tpm.handles import HandleKind, flush, list_handles

        try:
            self._teardown()
        except Exception:
            pass
        for entry in list_handles(self.t, self.conn.recorder.owned_handles()):
            if entry.ours and entry.kind is not HandleKind.PERSISTENT:
                try:
                    flush(self.t, entry.handle)
                except TpmError:
                    pass
                self.conn.recorder.forget_handle(entry.handle)

    @property
    def integrity_failures(self) -> int:
        return sum(getattr(e, "integrity_failures", 0) for e in self._engines.values())


# -- the strategies: one class per mode (tpmtop.sessions.modes.MODE_INFO says what each costs) --
class Strategy:
    """One mode's command sequence for one operation, driven through the engine interface."""

    kept = False  # one session set up when the mode starts (outside the timed operation)
    saved = False  # ...and context-saved between operations

    def run(self, w: Workload, e: AnyEngine) -> None:
        raise NotImplementedError


class NoSession(Strategy):
    def run(self, w: Workload, e: AnyEngine) -> None:
        e.op(w.op, None, 0, w.pcr)


class PerCommand(Strategy):
    """Linux 6.10: a fresh salted session for every command, flushed by the TPM after it."""

    def run(self, w: Workload, e: AnyEngine) -> None:
        s = w._new_session(e)
        try:
            e.op(w.op, s, session_attrs(w.op, False, w.param_encryption), w.pcr)
        except TpmError:
            # On an error the TPM keeps the session even without continueSession.
            w._flush_quietly(e, s)
            raise
        finally:
            e.forget_session(s)


class Reuse(Strategy):
    """Linux 6.12+: one kept session (continueSession), set up again when the TPM lost it."""

    kept = True

    def run(self, w: Workload, e: AnyEngine) -> None:
        attrs = session_attrs(w.op, True, w.param_encryption)
        try:
            e.op(w.op, w.kept, attrs, w.pcr)
        except TpmError as err:
            if not session_gone(err.rc):
                raise
            w._recover(e)
            e.op(w.op, w.kept, attrs, w.pcr)


class Saved(Strategy):
    """Proposed: the kept session lives context-saved between commands."""

    kept = saved = True

    def run(self, w: Workload, e: AnyEngine) -> None:
        try:
            e.load_session(w.kept)
        except TpmError as err:
            if names.rc_base(err.rc or 0) not in CONTEXT_INVALID and err.rc != CONTEXT_GAP:
                raise
            w._recover(e)  # saved context gone or too old (TPM_RC_CONTEXT_GAP): start over
            e.load_session(w.kept)
        e.op(w.op, w.kept, session_attrs(w.op, True, w.param_encryption), w.pcr)
        try:
            e.save_session(w.kept)
        except TpmError as err:
            # TPM_RC_CONTEXT_GAP: some saved session is so old that the context counter
            # cannot advance. If it is one tpmtop left behind, flushing it clears the gap.
            if err.rc != CONTEXT_GAP or not w._flush_stray_sessions():
                raise
            w.account().sessions_lost += 1
            e.save_session(w.kept)


STRATEGIES: dict[Mode, Strategy] = {Mode.NONE: NoSession(), Mode.PER_COMMAND: PerCommand(), Mode.REUSE: Reuse(),
                                    Mode.SAVED: Saved()}
