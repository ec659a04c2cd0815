"""``tpmtop export CAPTURE.json --format FORMAT -o FILE``: the formats are
:data:`tpmtop.export.registry.EXPORTERS`."""

from __future__ import annotations

import argparse

OUTPUT_RULES = """Output (-o): a regular file is replaced atomically (temporary file, fsync, rename): a scraper
never reads half a file. '-' is stdout; a pipe or character device (/dev/null, a FIFO, also
through a symlink) is written through and never replaced. The input capture itself is refused
as output unless --force. An unwritable destination is refused before the capture is read."""


def _examples() -> str:
    from tpmtop.export.registry import EXPORTERS, formats_help

    examples = [f"  {e.example}" for e in EXPORTERS.values()]
    examples.append("  tpmtop export run.json --format openmetrics -o - | grep tpmtop_operation_seconds_count")
    return "\n\n".join([formats_help(), OUTPUT_RULES, "examples:\n" + "\n".join(examples)])


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.export.registry import EXPORTERS

    p.epilog = _examples() + "\n\n" + (p.epilog or "")
    p.add_argument("capture", metavar="CAPTURE.json", help="a capture (tpmtop bench --json)")
    p.add_argument("--format", "-f", required=True, choices=tuple(EXPORTERS),
                   help=f"one of {', '.join(EXPORTERS)} (see formats below)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write; '-' for stdout")
    p.add_argument("--force", action="store_true", help="allow the output to be the input capture itself")


def run_export(args: argparse.Namespace) -> int:
    from tpmtop.cli.common import notice
    from tpmtop.export.registry import EXPORTERS
    from tpmtop.output import Output
    from tpmtop.textsafe import safe

    # Checked before the capture is read: a wrong -o costs nothing.
    dest = Output(args.output, force=args.force, inputs=[args.capture]).check()
    exporter = EXPORTERS[args.format]
    from tpmtop.cli.progress import Reading

    with Reading([args.capture]):
        counts = exporter.run(args.capture, dest)
    where = "stdout" if args.output == "-" else safe(args.output)
    for line in exporter.report(counts, where, args.output == "-"):
        notice(line)
    return 0
