"""The keys of tpmtop's own recent sessions, held in memory for the decode's plaintext view.

tpmtop's native engine knows each session key it derives; with it, a decode can show the
plaintext of a parameter the session encrypted, which no passive decoder can. The engine
registers a key once per session (at StartAuthSession, never per command, so the hot path
pays nothing); the decoder looks it up only when someone decodes. Keys are kept for the
newest ``KEPT`` sessions, ended ones included (a per-command session ends with its command,
and Enter comes after): as many as the recorder can still hold the bytes of (it keeps the
newest 16,384 commands, and a session takes at least 4), ~0.8 MB at most, only in this
process's memory: never written to a capture, a log or stdout. An ended session's key
opens nothing on the TPM; it only decrypts parameters tpmtop itself sent or received.
A session is identified by its handle and the nonceTPM its StartAuthSession returned:
handles are reused (every per-command session is 0x02000000).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

KEPT = 4096


@dataclass(frozen=True)
class SessionKey:
    handle: int
    first_nonce_tpm: bytes
    key: bytes = b""  # the session key; the entities tpmtop authorises have empty authValues
    symmetric: str = "AES-128-CFB"
    hash: str = "sha256"

    def __repr__(self) -> str:  # never print a key
        return f"SessionKey(0x{self.handle:08x}, {self.symmetric})"


_lock = threading.Lock()
_keys: OrderedDict[tuple[int, bytes], SessionKey] = OrderedDict()


def register(handle: int, first_nonce_tpm: bytes, key: bytes) -> None:
    with _lock:
        _keys[(handle, bytes(first_nonce_tpm))] = SessionKey(handle, bytes(first_nonce_tpm), bytes(key))
        while len(_keys) > KEPT:
            _keys.popitem(last=False)


def lookup(handle: int, first_nonce_tpm: bytes) -> SessionKey | None:
    with _lock:
        return _keys.get((handle, bytes(first_nonce_tpm)))


def clear() -> None:
    with _lock:
        _keys.clear()
