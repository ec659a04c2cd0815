"""tpm2-tss's wording of a TPM response code, for codes found in logs.

Asked of libtss2-rc itself (``Tss2_RC_Decode``, the function behind ``tpm2_rc_decode`` and
tpm2-pytss's ``TSS2_RC.decode``) through ctypes: a couple of milliseconds, where importing
tpm2-pytss costs ~100 ms that ``tpmtop boot`` over SSH should not pay. Without the library,
tpm2-pytss is tried; without either, the code is shown in hex only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _decoder() -> Callable[[int], str] | None:
    name = ctypes.util.find_library("tss2-rc")
    for candidate in filter(None, (name, "libtss2-rc.so.0")):
        try:
            fn = ctypes.CDLL(candidate).Tss2_RC_Decode
        except (OSError, AttributeError):
            continue
        fn.restype, fn.argtypes = ctypes.c_char_p, [ctypes.c_uint32]
        return lambda rc: str(fn(rc).decode("utf-8", "replace"))
    try:
        from tpmtop.tpm.names import rc_text
    except ImportError:
        return None
    return rc_text


def word(rc: int) -> str | None:
    if not 0 <= rc <= 0xFFFFFFFF:
        return None
    decode = _decoder()
    return decode(rc) if decode is not None else None


def word_all(items: Iterable[Any]) -> None:
    """Set ``item.rc_text`` for every item with an ``rc`` and no wording yet."""
    for i in items:
        if i.rc is not None and i.rc_text is None:
            i.rc_text = word(i.rc)
