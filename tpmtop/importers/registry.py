"""Every format of recorded TPM traffic tpmtop can read, once: its name, how a file of it is
recognised (a sniff of its first bytes), how it is read into a capture and the options it
takes. ``tpmtop import`` and ``tpmtop replay`` read :data:`IMPORTERS`
(``tests/unit/test_registries.py``): a new format is a module in this package plus its entry here.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Path = str | os.PathLike[str]


@dataclass(frozen=True)
class Option:
    """One command-line option of ``tpmtop import`` that this format reads (argparse's terms)."""

    flag: str
    dest: str
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Importer:
    name: str
    module: str  # tpmtop.importers.<module>
    function: str  # (path, **options) -> (capture, result with .warnings, .connections, .framing)
    sniff: Callable[[Path], bool]  # True: this file is of this format (reads a few bytes only)
    about: str  # the help's description of the files it reads
    options: tuple[Option, ...] = ()

    def read(self, path: Path, **options: Any) -> tuple[dict[str, Any], Any]:
        fn = getattr(importlib.import_module(self.module), self.function)
        result: tuple[dict[str, Any], Any] = fn(path, **options)
        return result


def _is_pcap(path: Path) -> bool:
    from tpmtop.importers.pcap import is_pcap

    return is_pcap(path)


IMPORTERS: dict[str, Importer] = {i.name: i for i in (
    Importer("pcap", "tpmtop.importers.pcap", "import_pcap", _is_pcap,
             "pcap and pcapng files written by tpm2-tss's pcap TCTI (TCTI_PCAP_FILE=f.pcap tpm2_getrandom -T "
             "\"pcap:swtpm:port=2321\" 8) and tcpdump captures of a simulator port (tcpdump -i lo -w f.pcap port "
             "2321), in swtpm's raw framing or the Microsoft simulator's (mssim) framing",
             (Option("--port", "port", {"type": int, "metavar": "N", "help": "the TPM's TCP port (default: 2321, "
                                        "or whichever port a stream of TPM commands goes to)"}),)),
)}


def find_importer(path: Path) -> Importer | None:
    """The importer whose sniff recognises ``path`` (None: not a format of recorded traffic)."""
    return next((i for i in IMPORTERS.values() if i.sniff(path)), None)
