"""tpmtop: see what a TPM 2.0 is doing.

The core (``tpmtop.tpm``, ``tpmtop.recorder``, ``tpmtop.stats``, ``tpmtop.sessions``,
``tpmtop.capture``, ``tpmtop.boot`` …) never imports Textual; ``tpmtop.tui`` is one consumer
of it and ``tpmtop.cli`` another.
"""

__version__ = "0.1.0"
