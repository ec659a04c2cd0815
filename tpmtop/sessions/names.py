"""The session modes, crypto engines and operations by name: the closed sets themselves,
without the registry of what each means (:mod:`tpmtop.sessions.modes`, which re-exports
them). Apart so that the CLI can list them in its help without importing dataclasses,
inspect and ast (half the CLI's import time: ``tpmtop --help`` must stay light).
"""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    NONE = "none"
    PER_COMMAND = "per-command"
    REUSE = "reuse"
    SAVED = "saved"


class Engine(StrEnum):
    """The crypto engine's *name* (the classes are :mod:`tpmtop.sessions.engines`)."""

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


def mode_help() -> str:
    """``none, per-command, reuse, saved``: the words a CLI help lists."""
    return ", ".join(MODES)
