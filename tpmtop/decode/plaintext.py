"""The plaintext of a parameter encrypted by one of tpmtop's own sessions.

A session's CFB key and IV come from its session key and the two nonces of that exchange
(Part 1 §21.3): KDFa(sessionKey ‖ authValue, "CFB", nonceNewer, nonceOlder). The session key
is in :mod:`tpmtop.sessions.livekeys` (registered once per session by the native engine); the
nonces are on the wire. nonceCaller is in the command; the nonceTPM a command's encryption used
is the one the TPM returned last for that session, so it and the session's identity (its
handle and first nonceTPM, from StartAuthSession's response) are found by walking back
through the commands before it, which the caller supplies (the recorder's ring, newest first).
Nothing here runs unless someone decodes: the recorder's path pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tpmtop.decode.model import Field, Part
from tpmtop.decode.walk import decode_command, decode_response, decode_type

if TYPE_CHECKING:
    from tpmtop.recorder import Recorder

CC_START_AUTH_SESSION = 0x176

History = Callable[[], Iterable[tuple[bytes, bytes | None]]]


def _nonce(session: Field) -> bytes:
    n = session.find(f"{session.path}.nonce.buffer")
    return bytes.fromhex(n.value) if n is not None and n.value else b""


def _session_index(part: Part, handle: int) -> int | None:
    for i, s in enumerate(part.sessions):
        if s.fields and s.fields[0].value == handle:
            return i
    return None


def _walk_back(handle: int, history: Iterable[tuple[bytes, bytes | None]],
               want_older: bool) -> tuple[bytes | None, Any]:  # (…, first nonce), or (None, the reason)
    """(nonceTPM before the decoded command, first nonceTPM of the session) or a reason."""
    older = None
    for cmd, rsp in history:
        if rsp is None or len(cmd) < 10 or len(rsp) < 10 or rsp[6:10] != b"\0\0\0\0":
            continue
        cc = int.from_bytes(cmd[6:10], "big")
        if cc == CC_START_AUTH_SESSION:
            r = decode_response(rsp, cc)
            h = r.field("handles.sessionHandle")
            if h is not None and h.value == handle:
                nt = r.field("parameters.nonceTPM.buffer")
                first = bytes.fromhex(nt.value) if nt is not None and nt.value else b""
                return (older if older is not None else first), first
            continue
        if not want_older or older is not None or cmd[:2] != b"\x80\x02":
            continue
        c = decode_command(cmd)
        i = _session_index(c, handle)
        if i is None:
            continue
        r = decode_response(rsp, c.cc, c)
        if i < len(r.sessions):
            older = _nonce(r.sessions[i])
    return None, "its StartAuthSession is older than the commands tpmtop still holds"


def provider(history: History | None) -> Callable[[Part, Field, Part | None], dict[str, Any]]:
    """A ``plaintext`` callback for :func:`tpmtop.decode.decode`, reading earlier commands
    from ``history`` (newest first, the decoded one excluded); None: no history at all."""

    def view(part: Part, first: Field, command: Part | None) -> dict[str, Any]:
        from tpmtop.sessions import crypto, livekeys

        enc = first.encrypted
        if enc is None:  # called for an encrypted parameter only
            return {"available": False, "why": "the parameter is not encrypted"}
        try:
            handle = int(enc["session"], 16)
        except ValueError:
            return {"available": False, "why": "the command (and so the session) is not known"}
        if history is None:
            return {"available": False, "why": "a session's keys live only in the tpmtop process that ran it"}
        if part.kind == "command":
            i = _session_index(part, handle)
            if i is None:
                return {"available": False, "why": "the session is not in the command's authorization area"}
            newer = _nonce(part.sessions[i])
            older, first_nonce = _walk_back(handle, history(), True)
        else:
            if command is None:
                return {"available": False, "why": "the command is not known"}
            i = _session_index(command, handle)
            if i is None:
                return {"available": False, "why": "the session is not in the command's authorization area"}
            newer, older = _nonce(part.sessions[i]), _nonce(command.sessions[i])
            _, first_nonce = _walk_back(handle, history(), False)
        if older is None:
            return {"available": False, "why": first_nonce}
        key = livekeys.lookup(handle, first_nonce)
        if key is None:
            return {"available": False, "why": "not one of tpmtop's own native-engine sessions "
                                               "(or no longer among the newest it keeps keys for)"}
        enc["mode"] = "CFB"
        data = bytes.fromhex(first.fields[1].value) if len(first.fields) > 1 and first.fields[1].value else b""
        plain = crypto.cfb(key.key, newer, older, data, False)
        fields, stop = decode_type(first.type, plain)
        shown: dict[str, Any] = {"hex": plain.hex(), "fields": [f.to_json(plain) for f in fields]}
        if stop is not None:
            shown["stopped"] = stop.text()
        return {"available": True, "plaintext": shown}

    return view


def recorder_history(recorder: Recorder, seq: int) -> History:
    """Earlier commands of a live recorder, newest first, as (command, response) bytes."""

    def pairs() -> Iterator[tuple[bytes, bytes | None]]:
        evs = [e for e in recorder.events() if e.seq < seq]
        for e in reversed(evs):
            if e.command is not None:
                yield bytes(e.command), bytes(e.response) if e.response is not None else None

    return pairs
