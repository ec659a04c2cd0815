"""tpmtop's own implementation of the kernel's session protocol (crypto in ``crypto.py``).

Commands are built as bytes (parameters with tpm2-pytss types where they are structures) and
sent through the instrumented transport. Every response HMAC is checked; a mismatch is an
:class:`IntegrityError`, counted, never accepted. Like the kernel, the engine remembers the
null primary's name and refuses to go on if a re-created primary has another one.
"""

from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, overload

from tpmtop.errors import IntegrityError, TpmConnectionError, TpmError
from tpmtop.sessions import crypto, livekeys
from tpmtop.sessions.engine import ATTR_DECRYPT, ATTR_ENCRYPT, EXTEND_DIGEST, RANDOM_BYTES, CryptoEngine
from tpmtop.sessions.modes import Engine, Op
from tpmtop.sessions.templates import TPM_RH_NULL, null_primary_public_bytes
from tpmtop.tpm import names
from tpmtop.tpm.wire import CC_FLUSH_CONTEXT
from tpmtop.tpm.wire import TPM_RS_PW as RS_PW
from tpmtop.tpm.wire import TPM_ST_NO_SESSIONS as ST_NO_SESSIONS
from tpmtop.tpm.wire import TPM_ST_SESSIONS as ST_SESSIONS

if TYPE_CHECKING:
    from tpmtop.tpm.commands import Transacts

# Spelled (spec Part 2), not taken from tpm2_pytss.constants: the dashboard's workload runs
# this engine in every mode, and importing tpm2-pytss (with the cryptography it imports)
# leaves ~10,000 objects the cyclic GC walks on every full collection. The tags, TPM_RS_PW and
# FlushContext are tpmtop.tpm.wire's; tests/tpm/test_transport.py pins each to its name there.
CC_CREATE_PRIMARY = 0x131  # TPM2_CC.CreatePrimary
CC_CONTEXT_LOAD = 0x161  # TPM2_CC.ContextLoad
CC_CONTEXT_SAVE = 0x162  # TPM2_CC.ContextSave
CC_START_AUTH_SESSION = 0x176  # TPM2_CC.StartAuthSession
CC_GET_RANDOM = 0x17B  # TPM2_CC.GetRandom
CC_PCR_EXTEND = 0x182  # TPM2_CC.PCR_Extend
ALG_AES, ALG_SHA256, ALG_CFB = 0x0006, 0x000B, 0x0043  # TPM2_ALG.AES, .SHA256, .CFB

_PW_AUTH = struct.pack(">IIHBH", 9, RS_PW, 0, 0, 0)  # size, TPM_RS_PW, empty nonce, attrs 0, empty hmac
_SYM_AES128_CFB = struct.pack(">HHH", ALG_AES, 128, ALG_CFB)


@dataclass
class Session:
    handle: int
    key: bytes
    nonce_tpm: bytes
    context: bytes | None = None  # TPMS_CONTEXT while context-saved


def tpm_error(cc: int, rc: int) -> TpmError:
    """The one line for a failed command: name, code, tpm2_rc_decode's words, and what to do."""
    hint = names.rc_hint(rc)
    return TpmError(f"{names.cc_short(cc)} failed: 0x{rc:03x} {names.rc_text(rc)}" + (f" — {hint}" if hint else ""),
                    rc, names.cc_name(cc))


def _tpm2b(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


class NativeEngine(CryptoEngine[Session, int]):
    name = Engine.NATIVE

    def __init__(self, transport: Transacts) -> None:
        super().__init__()
        self.t = transport
        self.null_x = self.null_y = b""

    # -- wire helpers -----------------------------------------------------------------------
    def _send(self, cmd: bytes, cc: int) -> bytes:
        rsp = self.t.transact(cmd)
        if len(rsp) < 10:
            raise TpmConnectionError(f"{names.cc_short(cc)}: short response")
        rc = int.from_bytes(rsp[6:10], "big")
        if rc:
            raise tpm_error(cc, rc)
        return rsp

    def _plain(self, cc: int, body: bytes) -> bytes:
        return self._send(struct.pack(">HII", ST_NO_SESSIONS, 10 + len(body), cc) + body, cc)

    @overload
    def execute(self, cc: int, handles: tuple[int, ...], names_: bytes, params: bytes,
                session: Session | None, attrs: int, rsp_handle: Literal[True]) -> tuple[int, bytes]: ...
    @overload
    def execute(self, cc: int, handles: tuple[int, ...], names_: bytes, params: bytes,
                session: Session | None, attrs: int, rsp_handle: Literal[False] = ...) -> tuple[None, bytes]: ...
    def execute(self, cc: int, handles: tuple[int, ...], names_: bytes, params: bytes,
                session: Session | None, attrs: int, rsp_handle: bool = False) -> tuple[int | None, bytes]:
        """One authorised command. With ``session`` None: password authorisation (empty) if
        the command has handles needing it, else no authorisation area at all."""
        hbytes = b"".join(struct.pack(">I", h) for h in handles)
        if session is None:
            if handles:
                body = hbytes + _PW_AUTH + params
                tag = ST_SESSIONS
            else:
                body, tag = params, ST_NO_SESSIONS
            rsp = self._send(struct.pack(">HII", tag, 10 + len(body), cc) + body, cc)
            return self._split(rsp, tag, rsp_handle)[:2]

        nonce_caller = os.urandom(32)
        key = session.key  # ‖ authValue, which is empty for PCR 16 and the null hierarchy
        if attrs & ATTR_DECRYPT:
            # the first parameter must be a TPM2B: encrypt its data in place
            n = int.from_bytes(params[:2], "big")
            sealed = crypto.cfb(key, nonce_caller, session.nonce_tpm, params[2:2 + n], True)
            params = params[:2] + sealed + params[2 + n:]
        auth = _command_auth(session.handle, key, cc, names_, params, nonce_caller, session.nonce_tpm, attrs)
        body = hbytes + struct.pack(">I", len(auth)) + auth + params
        rsp = self._send(struct.pack(">HII", ST_SESSIONS, 10 + len(body), cc) + body, cc)
        handle, rparams, rsess = self._split(rsp, ST_SESSIONS, rsp_handle)
        if rsess is None:  # success without an authorization area: not a TPM's answer to a sessioned command
            raise IntegrityError(f"{names.cc_short(cc)}: response has no authorization area; response rejected")
        nonce_tpm, rattrs, rmac = rsess
        if not _response_authentic(key, cc, rparams, nonce_tpm, nonce_caller, rattrs, rmac):
            self.integrity_failures += 1
            raise IntegrityError(f"{names.cc_short(cc)}: response HMAC check failed (response altered in "
                                 "transit, or not from this TPM); response rejected")
        session.nonce_tpm = nonce_tpm
        if attrs & ATTR_ENCRYPT and len(rparams) >= 2:
            n = int.from_bytes(rparams[:2], "big")
            rparams = rparams[:2] + crypto.cfb(key, nonce_tpm, nonce_caller, rparams[2:2 + n], False) + rparams[2 + n:]
        return handle, rparams

    @staticmethod
    def _split(rsp: bytes, tag: int, rsp_handle: bool) -> tuple[int | None, bytes, tuple[bytes, int, bytes] | None]:
        """(response handle, parameters, (nonceTPM, attrs, hmac) or None)."""
        try:
            off = 10
            handle = None
            if rsp_handle:
                handle = int.from_bytes(rsp[off:off + 4], "big")
                off += 4
            if int.from_bytes(rsp[:2], "big") != ST_SESSIONS:
                return handle, rsp[off:], None
            psize = int.from_bytes(rsp[off:off + 4], "big")
            off += 4
            params = rsp[off:off + psize]
            off += psize
            nlen = int.from_bytes(rsp[off:off + 2], "big")
            nonce = rsp[off + 2:off + 2 + nlen]
            off += 2 + nlen
            rattrs = rsp[off]
            hlen = int.from_bytes(rsp[off + 1:off + 3], "big")
            mac = rsp[off + 3:off + 3 + hlen]
            if off + 3 + hlen != len(rsp) or len(params) != psize:
                raise IndexError
            return handle, params, (nonce, rattrs, mac)
        except IndexError:
            raise IntegrityError("malformed response authorization area; response rejected") from None

    # -- the kernel's probe: create the null primary, save it, flush it ------------------------
    def _create_null(self) -> tuple[bytes, bytes]:
        handle, rparams = self.execute(CC_CREATE_PRIMARY, (TPM_RH_NULL,), struct.pack(">I", TPM_RH_NULL),
                                       _create_primary_params(), None, 0, rsp_handle=True)
        name = _name_from_create_primary(rparams)
        x, y = _ecc_point_from_public(rparams)
        ctx = self._plain(CC_CONTEXT_SAVE, struct.pack(">I", handle))[10:]
        self.flush(handle)
        if self.null_name is None or name == self.null_name:
            self.null_x, self.null_y = x, y  # the salt's ECDH peer
        return name, ctx

    def _load_context(self, context: bytes) -> int:
        return int.from_bytes(self._plain(CC_CONTEXT_LOAD, context)[10:14], "big")

    def start_session(self, tpm_key: int) -> Session:
        salt, ex, ey = crypto.ecdh_salt(self.null_x, self.null_y)
        nonce_caller = os.urandom(32)
        body = (struct.pack(">II", tpm_key, TPM_RH_NULL) + _tpm2b(nonce_caller)
                + _tpm2b(_tpm2b(ex) + _tpm2b(ey)) + b"\x00" + _SYM_AES128_CFB + struct.pack(">H", ALG_SHA256))
        rsp = self._plain(CC_START_AUTH_SESSION, body)
        handle = int.from_bytes(rsp[10:14], "big")
        nlen = int.from_bytes(rsp[14:16], "big")
        nonce_tpm = rsp[16:16 + nlen]
        key = crypto.session_key(salt, nonce_tpm, nonce_caller)
        livekeys.register(handle, nonce_tpm, key)  # once per session: the decode's plaintext view
        return Session(handle, key, nonce_tpm)

    def flush(self, handle: int) -> None:
        self._plain(CC_FLUSH_CONTEXT, struct.pack(">I", handle))

    def save_session(self, s: Session) -> None:
        s.context = self._plain(CC_CONTEXT_SAVE, struct.pack(">I", s.handle))[10:]

    def load_session(self, s: Session) -> None:
        if s.context is None:
            raise ValueError("load_session: the session is not context-saved")
        self._plain(CC_CONTEXT_LOAD, s.context)
        s.context = None

    def forget_session(self, s: Session) -> None:
        pass  # nothing held host-side beyond the Python object

    def session_handle(self, s: Session) -> int:
        return s.handle  # a session keeps its handle while context-saved

    tpm_handle = session_handle

    # -- operations ---------------------------------------------------------------------------
    def op(self, op: str, session: Session | None, attrs: int, pcr: int) -> None:
        if op == Op.EXTEND:
            params = struct.pack(">IH", 1, ALG_SHA256) + EXTEND_DIGEST
            self.execute(CC_PCR_EXTEND, (pcr,), struct.pack(">I", pcr), params, session, attrs)
        elif op == Op.GET_RANDOM:
            _, rparams = self.execute(CC_GET_RANDOM, (), b"", struct.pack(">H", RANDOM_BYTES), session, attrs)
            if int.from_bytes(rparams[:2], "big") != RANDOM_BYTES:
                raise TpmError("GetRandom returned fewer bytes than asked")
        elif op == Op.CREATE_PRIMARY:
            handle, _ = self.execute(CC_CREATE_PRIMARY, (TPM_RH_NULL,), struct.pack(">I", TPM_RH_NULL),
                                     _create_primary_params(), session, attrs, rsp_handle=True)
            self.flush(handle)
        else:
            raise ValueError(op)


def _command_auth(handle: int, key: bytes, cc: int, names_: bytes, params: bytes, nonce_caller: bytes,
                  nonce_tpm: bytes, attrs: int) -> bytes:
    """A sessioned command's authorization area: its cpHash's HMAC, with the nonces."""
    mac = crypto.session_hmac(key, crypto.cp_hash(cc, names_, params), nonce_caller, nonce_tpm, attrs)
    return struct.pack(">I", handle) + _tpm2b(nonce_caller) + bytes((attrs,)) + _tpm2b(mac)


def _response_authentic(key: bytes, cc: int, rparams: bytes, nonce_tpm: bytes, nonce_caller: bytes,
                        rattrs: int, rmac: bytes) -> bool:
    expect = crypto.session_hmac(key, crypto.rp_hash(cc, rparams), nonce_tpm, nonce_caller, rattrs)
    return crypto.equal(expect, rmac)


_CALIBRATION_KEY = bytes(range(32))  # HMAC-SHA256's time does not depend on the key's bytes


def session_hmac_host_ns(pcr: int) -> int:
    """The host work a kept session adds to one PCR_Extend, timed on its own: the caller's
    nonce, the command's HMAC and the response's check, through the very functions
    ``execute`` calls (an extend's bytes; an empty response, as PCR_Extend's). Timed back to
    back with the operation just run, as a kept session's extends follow each other: the
    reuse estimate's host basis (tpmtop.boot.projection, hM), where an extend measured inside
    per-command follows StartAuthSession's wait and its host time is ×2 that."""
    params = struct.pack(">IH", 1, ALG_SHA256) + EXTEND_DIGEST
    t0 = time.perf_counter_ns()
    nonce_caller = os.urandom(32)
    auth = _command_auth(0x02000000, _CALIBRATION_KEY, CC_PCR_EXTEND, struct.pack(">I", pcr), params,
                         nonce_caller, _CALIBRATION_KEY, 1)
    _response_authentic(_CALIBRATION_KEY, CC_PCR_EXTEND, b"", _CALIBRATION_KEY, nonce_caller, 1, auth[-32:])
    return time.perf_counter_ns() - t0


def _create_primary_params() -> bytes:
    # inSensitive (empty userAuth and data), inPublic, outsideInfo (empty), creationPCR (none)
    return _tpm2b(b"\0\0\0\0") + null_primary_public_bytes() + b"\0\0" + b"\0\0\0\0"


# CreatePrimary's answer is read here, not with tpm2-pytss's types: the engine creates the
# null primary in every mode, and tpm2-pytss would be imported for these two reads alone
# (see ST_NO_SESSIONS above). Every field on the way is size-prefixed or fixed, and what
# tpm2-pytss reads from a real answer is what these read (tests/tpm/test_transport.py).
ALG_NULL, ALG_ECC = 0x0010, 0x0023  # TPM2_ALG.NULL, .ECC


def _tpm2b_at(buf: bytes, off: int) -> tuple[bytes, int]:
    """The TPM2B at ``off``: (its bytes, the offset after it). IndexError when cut short."""
    n = int.from_bytes(buf[off:off + 2], "big")
    end = off + 2 + n
    if off + 2 > len(buf) or end > len(buf):
        raise IndexError(off)
    return buf[off + 2:end], end


def _name_from_create_primary(rparams: bytes) -> bytes:
    """``name``, after outPublic, creationData, creationHash (TPM2Bs) and creationTicket (tag,
    hierarchy, TPM2B digest): Part 3 §24.1 CreatePrimary's response parameters."""
    try:
        off = 0
        for _ in range(3):
            _, off = _tpm2b_at(rparams, off)
        _, off = _tpm2b_at(rparams, off + 6)
        name, _ = _tpm2b_at(rparams, off)
    except IndexError:
        raise IntegrityError("malformed CreatePrimary response; response rejected") from None
    return name


def _ecc_point_from_public(rparams: bytes) -> tuple[bytes, bytes]:
    """outPublic's ECC point (unique.x, unique.y): TPMT_PUBLIC (Part 2 §12.2.4) with ECC
    parameters (§12.2.3.6): symmetric, scheme and kdf each an algorithm id, followed by its
    details unless it is TPM_ALG_NULL."""
    try:
        pub, _ = _tpm2b_at(rparams, 0)
        kind = int.from_bytes(pub[0:2], "big")
        _, off = _tpm2b_at(pub, 8)  # after type, nameAlg, objectAttributes: authPolicy
        sym = int.from_bytes(pub[off:off + 2], "big")
        off += 2 if sym == ALG_NULL else 6  # keyBits, mode
        scheme = int.from_bytes(pub[off:off + 2], "big")
        off += 2 if scheme == ALG_NULL else 4  # hashAlg
        off += 2  # curveID
        kdf = int.from_bytes(pub[off:off + 2], "big")
        off += 2 if kdf == ALG_NULL else 4  # hashAlg
        x, off = _tpm2b_at(pub, off)
        y, _ = _tpm2b_at(pub, off)
    except IndexError:
        kind = -1
    if kind != ALG_ECC:
        raise IntegrityError("malformed CreatePrimary response (no ECC public area); response rejected")
    return x, y
