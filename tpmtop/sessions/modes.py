"""The session modes, crypto engines and operations: defined once, here.

They are ``StrEnum``s, so each member *is* its string ("per-command" == Mode.PER_COMMAND):
the CLI, the dashboard and captures keep speaking the same words.
"""

from enum import StrEnum


class Mode(StrEnum):
    NONE = "none"
    PER_COMMAND = "per-command"
    REUSE = "reuse"
    SAVED = "saved"


class Engine(StrEnum):
    NATIVE = "native"
    ESYS = "esys"


class Op(StrEnum):
    EXTEND = "extend"
    GET_RANDOM = "get_random"
    CREATE_PRIMARY = "create_primary"


# The TPM command each operation is (tpm2-pytss's TPM2_CC spelling).
OP_COMMANDS = {Op.EXTEND: "PCR_Extend", Op.GET_RANDOM: "GetRandom", Op.CREATE_PRIMARY: "CreatePrimary"}

MODES: tuple[str, ...] = tuple(Mode)
ENGINES: tuple[str, ...] = tuple(Engine)
OPS: tuple[str, ...] = tuple(Op)

# TPM commands one operation puts on the wire, by mode (the tests check this from the
# transport, not from here; this is what the kernel's strategies imply).
EXPECTED_COMMANDS_PER_OP = {Mode.NONE: 1, Mode.PER_COMMAND: 4, Mode.REUSE: 1, Mode.SAVED: 3}

DESCRIPTIONS = {
    Mode.NONE: "no HMAC session (CONFIG_TCG_TPM2_HMAC=n, or tpm.disable_pcr_integrity=1)",
    Mode.PER_COMMAND: "Linux 6.10: ContextLoad null key, salted StartAuthSession, FlushContext, command",
    Mode.REUSE: "Linux 6.12+: one kept session, continueSession set (lazy flush)",
    Mode.SAVED: "proposed: ContextLoad session, command, ContextSave",
}

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
