"""The proxy's log lines, each with its kind: consumers (the dashboard's notices, `tpmtop run`'s
quiet log) decide by the kind, never by searching the text, which is for people and may change."""

from __future__ import annotations

import enum


class LineKind(enum.Enum):
    INFO = "info"  # who came and went, how the proxy serves
    LEAK = "leak"  # a client left handles behind on the TPM
    DROPPED = "dropped"  # a connection refused or cut (access, limit, framing, idle, gone)
    FOREIGN = "foreign"  # a client touched what another created (flush), or cleared the TPM
    FAULT = "fault"  # the TPM failed, was lost, came back; or the proxy itself failed
    AUTH = "auth"  # a client sent a wrong password: TPM_RC_AUTH_FAIL counts towards DA lockout
    UNSEAL = "unseal"  # an Unseal failed its policy (0x99d, 0x128) on a LUKS2 token's sealed object


WORTH_A_LOOK = frozenset({LineKind.LEAK, LineKind.DROPPED, LineKind.FOREIGN, LineKind.FAULT, LineKind.AUTH,
                         LineKind.UNSEAL})


class ProxyLine(str):
    """A log line (already terminal-safe) that is still a ``str`` for whoever prints it."""

    kind: LineKind

    def __new__(cls, text: str, kind: LineKind = LineKind.INFO) -> ProxyLine:
        line = super().__new__(cls, text)
        line.kind = kind
        return line


def kind_of(line: str) -> LineKind:
    """A line's kind; a plain ``str`` (not from the proxy) is INFO."""
    return line.kind if isinstance(line, ProxyLine) else LineKind.INFO
