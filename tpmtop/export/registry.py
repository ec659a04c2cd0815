"""Every export format, once: its name, what it is for, the function that writes it and what
``tpmtop export`` says when it is done. ``tpmtop export``'s choices, help and examples are
read from :data:`EXPORTERS`, so a format cannot be half-added (``tests/unit/test_registries.py``).

An exporter is a module with ``export(capture_path, dest) -> dict`` (counts for the report)
plus its entry here; the module is imported only when its format is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Counts = dict[str, Any]


@dataclass(frozen=True)
class Exporter:
    name: str  # --format NAME
    module: str  # tpmtop.export.<module>
    function: str  # (capture_path, dest) -> counts
    about: str  # the help's "formats:" entry (one paragraph)
    example: str  # one `tpmtop export` command line
    report: Callable[[Counts, str, bool], list[str]]  # (counts, where, to stdout) -> lines said on stderr

    def run(self, capture_path: str, dest: Any) -> Counts:
        fn: Callable[[str, Any], Counts] = getattr(importlib.import_module(self.module), self.function)
        return fn(capture_path, dest)


def _chrome_report(n: Counts, where: str, stdout: bool) -> list[str]:
    ops = n["ops"] + n["derived_ops"]
    how = ""
    if n["derived_ops"]:
        how = " (derived from op_seq)" if not n["ops"] else f" ({n['derived_ops']} of them derived from op_seq)"
    return [f"wrote {where}: {n['events']} TPM commands, {ops} operations{how}, {n['tracks']} tracks"]


def _pcapng_report(n: Counts, where: str, stdout: bool) -> list[str]:
    out = [f"wrote {where}: {n['exported']} commands with their responses, {n['frames']} frames, "
           f"{n['streams']} TCP stream(s)"]
    if n["without_bytes"]:
        out.append(f"{n['without_bytes']} of {n['events']} events kept no bytes and are not in the file "
                   f"(captures keep the bytes of the newest 16,384 commands)")
    return out


def _openmetrics_report(n: Counts, where: str, stdout: bool) -> list[str]:
    return [] if stdout else [f"wrote {where}: {n['runs']} runs"]


EXPORTERS: dict[str, Exporter] = {e.name: e for e in (
    Exporter("chrome-trace", "tpmtop.export.chrome_trace", "export_chrome_trace",
             "every TPM command as a slice under its operation, one track per engine/mode; open in "
             "https://ui.perfetto.dev or chrome://tracing (needs a capture recorded with --events)",
             "tpmtop export run.json --format chrome-trace -o trace.json", _chrome_report),
    Exporter("pcapng", "tpmtop.export.pcapng", "export_pcapng",
             "every command and response as TCP payload on port 2321, framed as tpm2-tss's pcap: TCTI "
             "writes it, for Wireshark/tshark's TPM 2.0 dissector; original timestamps, one TCP stream per "
             "client (needs a capture whose events kept their bytes: bench --events keeps them for the "
             "newest 16,384 commands)",
             "tpmtop export run.json --format pcapng -o run.pcapng", _pcapng_report),
    Exporter("openmetrics", "tpmtop.export.openmetrics", "export_openmetrics",
             "latency histograms per (engine, mode, op) and per command code, labelled with the TPM "
             "manufacturer and firmware; for node_exporter's textfile collector",
             "tpmtop export run.json --format openmetrics -o /var/lib/node_exporter/textfile/tpmtop.prom",
             _openmetrics_report),
)}


def formats_help(width: int = 92) -> str:
    """The help's "formats:" block, each format's paragraph wrapped under its name."""
    import textwrap

    lines = ["formats:"]
    for e in EXPORTERS.values():
        body = textwrap.wrap(e.about, width - 16)
        lines.append(f"  {e.name:<13} {body[0]}")
        lines += [" " * 16 + more for more in body[1:]]
    return "\n".join(lines)
