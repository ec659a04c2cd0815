"""``open_tpm()``: choose a TPM (tpm2-tools' order), connect to it, and record what is sent.

It sits above :mod:`tpmtop.tpm` (which never imports the recorder) and below everything
that talks to a TPM: it is where the transport's sink becomes a :class:`Recorder`.
"""

from __future__ import annotations

from collections.abc import Callable

from tpmtop.recorder import Recorder
from tpmtop.tpm import tcti as tcti_mod
from tpmtop.tpm.connection import TpmConnection


def open_tpm(tcti: str | None = None, sim: bool = False, env: dict[str, str] | None = None,
             raw_device: bool = False, recorder: Recorder | None = None,
             notice: Callable[[str], None] | None = None, timeout: float | None = None,
             fallback: bool = False) -> TpmConnection:
    """*timeout*: how long each backend waits for the TPM (``--timeout``; None: the default).
    *fallback*: a private swtpm may stand in when nothing was chosen and no TPM is usable
    (the dashboard only; see :func:`tpmtop.tpm.tcti.choose`)."""
    target = tcti_mod.choose(tcti, sim, env, raw_device, fallback=fallback)
    if target.note and notice:
        notice(target.note)
    kw = {} if timeout is None else {"timeout": timeout}
    return TpmConnection(target, recorder if recorder is not None else Recorder(), **kw).open()
