"""The TPM's dictionary-attack state, from GetCapability(TPM_CAP_TPM_PROPERTIES) variable
properties alone: no authorization, nothing that could count as a failure.

The TPM exports the counter, its maximum and the two intervals, and ``inLockout``; it does not
export when the counter last went down, so the times until the next try and until the counter
has decayed are upper bounds ("at most"), not predictions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpmtop.health.verdicts import Kind, Level, Verdict

IN_LOCKOUT = 1 << 9  # TPMA_PERMANENT.inLockout
PROPERTIES = ("LOCKOUT_COUNTER", "MAX_AUTH_FAIL", "LOCKOUT_INTERVAL", "LOCKOUT_RECOVERY", "PERMANENT")


@dataclass(frozen=True)
class DaState:
    counter: int
    max_tries: int
    interval_s: int  # lockoutInterval: one failure forgiven per interval
    recovery_s: int  # lockoutRecovery: after a failed lockout-auth, the wait for the next try
    in_lockout: bool

    @classmethod
    def from_properties(cls, var: dict[str, int]) -> DaState:
        """From :func:`tpmtop.tpm.identity.read_variable`'s dict (KeyError: a TPM without them)."""
        return cls(var["LOCKOUT_COUNTER"], var["MAX_AUTH_FAIL"], var["LOCKOUT_INTERVAL"],
                   var["LOCKOUT_RECOVERY"], bool(var["PERMANENT"] & IN_LOCKOUT))

    @property
    def tries_left(self) -> int:
        return max(self.max_tries - self.counter, 0)

    @property
    def next_try_s(self) -> int | None:
        """At most this long until one more try is accepted: 0 when not locked out; None when
        the TPM never forgives on its own (interval 0: only DictionaryAttackLockReset does)."""
        if not self.in_lockout:
            return 0
        return self.interval_s if self.interval_s else None

    @property
    def decay_s(self) -> int | None:
        """At most this long until the counter is back at 0 (None: never on its own)."""
        if self.counter == 0:
            return 0
        return self.counter * self.interval_s if self.interval_s else None

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "max": self.max_tries, "tries_left": self.tries_left,
                "interval_s": self.interval_s, "recovery_s": self.recovery_s, "in_lockout": self.in_lockout,
                "next_try_within_s": self.next_try_s, "decayed_within_s": self.decay_s}


def _secs(v: int | None) -> str:
    return "never on its own (interval 0)" if v is None else f"at most {v} s"


def verdict(st: DaState, culprits: str = "") -> Verdict:
    """One line: locked out (fail), one try from it (fail: a warning before the last try),
    failures counted (warn), or a clear counter (ok). ``culprits``: who caused them, if known."""
    figures = (f"LOCKOUT_COUNTER {st.counter} of MAX_AUTH_FAIL {st.max_tries}; "
               f"LOCKOUT_INTERVAL {st.interval_s} s; LOCKOUT_RECOVERY {st.recovery_s} s; "
               f"inLockout {'yes' if st.in_lockout else 'no'} (TPMA_PERMANENT bit 9)")
    ev = (figures, "source: GetCapability(TPM_CAP_TPM_PROPERTIES), no authorization")
    data = tuple(st.to_json().items())
    tail = f" — {culprits}" if culprits else ""
    if st.in_lockout:
        return Verdict(Kind.LOCKOUT, Level.FAIL,
                       f"LOCKED OUT: every DA-protected authorization fails with TPM_RC_LOCKOUT; next try "
                       f"{_secs(st.next_try_s)}{tail}", ev, data)
    if st.counter == 0:
        return Verdict(Kind.LOCKOUT, Level.OK, f"counter 0 of {st.max_tries}: no authorization failure counted",
                       ev, data)
    if st.max_tries and st.tries_left <= 1:
        return Verdict(Kind.LOCKOUT, Level.FAIL,
                       f"counter {st.counter} of {st.max_tries}: ONE more wrong password locks the TPM out; "
                       f"back to 0 {_secs(st.decay_s)}{tail}", ev, data)
    return Verdict(Kind.LOCKOUT, Level.WARN,
                   f"counter {st.counter} of {st.max_tries}: {st.tries_left} more failures lock the TPM out; "
                   f"back to 0 {_secs(st.decay_s)}{tail}", ev, data)
