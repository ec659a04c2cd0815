"""tpm2-tss's wording of a TPM response code, for codes found in logs.

tpm2-pytss is imported only when a log holds a code to word: ``tpmtop boot`` without TPM
errors never pays its ~100 ms import (start-up over SSH). Without tpm2-pytss the code is
shown in hex only.
"""

from __future__ import annotations


def word_all(items) -> None:
    """Set ``item.rc_text`` for every item with an ``rc`` and no wording yet."""
    todo = [i for i in items if i.rc is not None and i.rc_text is None]
    if not todo:
        return
    try:
        from tpmtop.tpm.names import rc_text
    except ImportError:
        return
    for i in todo:
        i.rc_text = rc_text(i.rc)
