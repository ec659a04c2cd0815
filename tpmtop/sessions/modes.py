"""The session modes, crypto engines and operations: defined once, here.

They are ``StrEnum``s, so each member *is* its string ("per-command" == Mode.PER_COMMAND):
the CLI, the dashboard and captures keep speaking the same words.

:data:`MODE_INFO` is the registry of modes: everything another layer says about a mode (its
help text, the colour of its bars, its boot-cost formula, the commands one operation sends)
is read from here, so a new mode is its member, its entry here and its strategy
(:data:`tpmtop.sessions.workload.STRATEGIES`) — ``tests/unit/test_registries.py`` checks all
three and the capture schema's enum agree.
"""

from __future__ import annotations

from dataclasses import dataclass

# The closed sets, defined once in tpmtop.sessions.names (light: the CLI's help lists them).
from tpmtop.sessions.names import ENGINES as ENGINES
from tpmtop.sessions.names import MODES as MODES
from tpmtop.sessions.names import OP_COMMANDS as OP_COMMANDS
from tpmtop.sessions.names import OPS as OPS
from tpmtop.sessions.names import Engine as Engine
from tpmtop.sessions.names import Mode as Mode
from tpmtop.sessions.names import Op as Op
from tpmtop.sessions.names import mode_help as mode_help


@dataclass(frozen=True)
class ModeInfo:
    """What every layer says about one mode."""

    summary: str  # the kernel behaviour it reproduces (help, `tpmtop bench --help`)
    tone: str  # the theme colour variable of its bars and time series (tpmtop.tui.themes)
    # Boot projection (tpmtop.boot.projection): commands paid once per boot, and per extend,
    # by letter (E0 PCR_Extend alone, L ContextLoad, S StartAuthSession, F FlushContext,
    # Eh PCR_Extend in an HMAC session, C ContextSave).
    once: tuple[str, ...]
    each: tuple[str, ...]
    commands_per_op: int  # TPM commands one operation puts on the wire (tests check the wire)
    projection_note: str | None = None  # what the formula leaves out
    # False: the note is about pricing the mode from its commands, moot once the mode ran here
    # and is priced by its own op p50 (saved's session ContextLoad: measured then, not priced)
    note_when_measured: bool = True

    @property
    def formula(self) -> str:
        """``(L + S + F) + N × (L + Eh)``: the arithmetic the projection shows."""
        def group(letters: tuple[str, ...]) -> str:
            text = " + ".join(letters)
            return f"({text})" if len(letters) > 1 else text

        per = f"N × {group(self.each)}"
        return f"{group(self.once)} + {per}" if self.once else per


_SETUP = ("L", "S", "F")
MODE_INFO: dict[Mode, ModeInfo] = {
    Mode.NONE: ModeInfo("no HMAC session (CONFIG_TCG_TPM2_HMAC=n, or tpm.disable_pcr_integrity=1)",
                        "bar-baseline", (), ("E0",), 1),
    Mode.PER_COMMAND: ModeInfo("Linux 6.10: ContextLoad null key, salted StartAuthSession, FlushContext, command",
                               "latency-slow", (), ("L", "S", "F", "Eh"), 4),
    Mode.REUSE: ModeInfo("Linux 6.12+: one kept session, continueSession set (lazy flush)",
                         "latency-fast", _SETUP, ("Eh",), 1,
                         "a lower bound: each user-space TPM command, hwrng read (before 6.15) or resume "
                         "pays L + S + F again"),
    Mode.SAVED: ModeInfo("proposed: ContextLoad session, command, ContextSave", "latency-mid", _SETUP,
                         ("L", "Eh", "C"), 3, "the saved session's ContextLoad priced as the null primary's",
                         note_when_measured=False),
}
HMAC_MODES: tuple[Mode, ...] = tuple(m for m in Mode if m is not Mode.NONE)

# TPM commands one operation puts on the wire, by mode (the tests check this from the
# transport, not from here; this is what the kernel's strategies imply).
EXPECTED_COMMANDS_PER_OP = {m: info.commands_per_op for m, info in MODE_INFO.items()}

DEFAULT_PCR = 16


def parse_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    from tpmtop.errors import UsageError

    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise UsageError(f"no {what} given")
    for x in items:
        if x not in allowed:
            raise UsageError(f"unknown {what} '{x}' (choose from {', '.join(allowed)})")
    return list(dict.fromkeys(items))


def check_pcr(pcr: int, allow_pcr: bool) -> None:
    from tpmtop.errors import UsageError

    if not 0 <= pcr <= 23:
        raise UsageError(f"PCR {pcr} does not exist (0-23)")
    if pcr < 16 and not allow_pcr:
        raise UsageError(f"PCR {pcr} holds boot measurements: extending it changes what attestation "
                         "and sealed secrets see. Use PCR 16 (debug) or pass --allow-pcr")
