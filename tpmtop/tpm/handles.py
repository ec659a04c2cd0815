"""Listing and flushing handles."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tpmtop.errors import UsageError
from tpmtop.tpm.commands import Transacts, flush_context, get_handles
from tpmtop.tpm.names import HR_SHIFT, HT_HMAC_SESSION, HT_PERSISTENT, HT_POLICY_SESSION, HT_TRANSIENT


class HandleKind(StrEnum):
    TRANSIENT = "transient"
    LOADED_SESSION = "loaded-session"
    SAVED_SESSION = "saved-session"
    PERSISTENT = "persistent"

    @property
    def is_session(self) -> bool:
        return self in (HandleKind.LOADED_SESSION, HandleKind.SAVED_SESSION)


# (GetCapability selector, kind as tpmtop names it). A selector of 0x02… lists *loaded*
# sessions (HMAC and policy alike), 0x03… lists *saved* ones (spec Part 2, TPM_HT).
CATEGORIES = (
    (HT_TRANSIENT << HR_SHIFT, HandleKind.TRANSIENT),
    (HT_HMAC_SESSION << HR_SHIFT, HandleKind.LOADED_SESSION),
    (HT_POLICY_SESSION << HR_SHIFT, HandleKind.SAVED_SESSION),
    (HT_PERSISTENT << HR_SHIFT, HandleKind.PERSISTENT),
)
# What FlushContext accepts, by a handle's top byte (TPM_HT).
FLUSHABLE = frozenset((HT_TRANSIENT, HT_HMAC_SESSION, HT_POLICY_SESSION))


@dataclass(frozen=True)
class HandleEntry:
    handle: int
    kind: HandleKind
    session_type: str | None  # "hmac"/"policy" for sessions
    ours: bool

    def to_json(self) -> dict[str, object]:
        d = {"handle": f"0x{self.handle:08x}", "kind": self.kind, "created_by_tpmtop": self.ours}
        if self.session_type:
            d["session_type"] = self.session_type
        return d


def list_handles(transport: Transacts, owned: set[int] | None = None) -> list[HandleEntry]:
    owned = owned or set()
    out: list[HandleEntry] = []
    for first, kind in CATEGORIES:
        for h in get_handles(transport, first):
            st = None
            if kind.is_session:
                # A loaded session's top byte says HMAC (0x02) or policy (0x03); the TPM lists
                # every *saved* session in the HMAC range whatever its type, so a saved one
                # is "unknown" unless tpmtop made it (tpmtop's sessions are HMAC sessions).
                if kind is HandleKind.SAVED_SESSION and h not in owned:
                    st = "unknown"
                else:
                    st = "hmac" if h >> HR_SHIFT == HT_HMAC_SESSION else "policy"
            out.append(HandleEntry(h, kind, st, h in owned))
    return out


# Objects and sessions: what `flush` (and a user typing a handle) is about.
_HELD_TYPES = FLUSHABLE | {HT_PERSISTENT}


def parse_handle(text: str) -> int:
    """A handle as the user typed it: 0x80000000, or decimal as tpm2-tools takes it. Exit 2 if malformed."""
    t = text.strip().lower()
    try:
        # As tpm2-tools reads them: 0x… hex, plain digits decimal (33554432 is 0x02000000);
        # digits with a-f can only be hex.
        value = int(t, 16) if t.startswith("0x") or any(c in "abcdef" for c in t) else int(t, 10)
    except ValueError:
        raise UsageError(f"malformed handle '{text}': expected e.g. 0x80000000") from None
    if t.isdigit() and len(t) == 8 and value >> 24 not in _HELD_TYPES and int(t, 16) >> 24 in _HELD_TYPES:
        # 80000000 or 02000000 read as decimal is no object or session: say so rather than guess
        raise UsageError(f"handle '{text}' is decimal {value} (0x{value:08x}), not a handle; "
                         f"for the hex handle write 0x{t}")
    if not 0 <= value <= 0xFFFFFFFF:
        raise UsageError(f"handle '{text}' is out of range (32 bits)")
    return value


def check_flushable(handle: int) -> None:
    top = handle >> 24
    if top == HT_PERSISTENT:
        raise UsageError(f"0x{handle:08x} is a persistent object: removing it needs EvictControl with "
                         "owner authorization, which tpmtop never uses")
    if top not in FLUSHABLE:
        raise UsageError(f"0x{handle:08x} is not a transient object or a session and cannot be flushed")


def flush(transport: Transacts, handle: int) -> None:
    check_flushable(handle)
    flush_context(transport, handle)
