"""The names used by the CLI, the dashboard and captures."""

MODES = ("none", "per-command", "reuse", "saved")
ENGINES = ("native", "esys")
OPS = ("extend", "get_random", "create_primary")

# TPM commands one operation puts on the wire, by mode (the tests check this from the
# transport, not from here; this is what the kernel's strategies imply).
EXPECTED_COMMANDS_PER_OP = {"none": 1, "per-command": 4, "reuse": 1, "saved": 3}

DESCRIPTIONS = {
    "none": "no HMAC session (CONFIG_TCG_TPM2_HMAC=n, or tpm.disable_pcr_integrity=1)",
    "per-command": "Linux 6.10: ContextLoad null key, salted StartAuthSession, FlushContext, command",
    "reuse": "Linux 6.12+: one kept session, continueSession set (lazy flush)",
    "saved": "proposed: ContextLoad session, command, ContextSave",
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
