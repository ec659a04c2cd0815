"""Which SRK this TPM holds where a token says its sealed object's parent is: ReadPublic of
that persistent handle (no authorization), its name compared with the one systemd recorded
(``tpm2_srk``, systemd 254 and later). The one thing about *which TPM* made a sealed object
tpmtop can learn without the owner hierarchy's authorization."""

from __future__ import annotations

from collections.abc import Iterable

from tpmtop.pcrs.tpminfo import HR_PERSISTENT, read_name
from tpmtop.tpm.commands import Transacts, get_handles


def srk_names(transport: Transacts, handles: Iterable[int]) -> dict[int, bytes | None]:
    """Each persistent handle asked for -> the name of the key this TPM holds there, or None
    where it holds none."""
    held = set(get_handles(transport, HR_PERSISTENT))
    return {h: (bytes.fromhex(read_name(transport, h)) if h in held else None) for h in handles}
