"""Load the decoder's tables before the first decode is asked for.

Importing tpmstream's Part 2/3 tables costs ~1 s on this project's VM (its class decorators
inspect every member): paid once per process. The dashboard starts it in a thread when the
command stream gets focus, the step before Enter.
"""

from __future__ import annotations

import threading

_started = threading.Event()


def warm() -> None:
    from tpmtop.decode import walk

    walk._command_types()
    walk._response_types()


def warm_in_background() -> None:
    if _started.is_set():
        return
    _started.set()
    threading.Thread(target=warm, name="tpmtop-decode-warm", daemon=True).start()
