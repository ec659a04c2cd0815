"""``tpmtop import FILE -o CAPTURE``: recorded TPM traffic (the formats of
:data:`tpmtop.importers.registry.IMPORTERS`) as a capture."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

EXAMPLES = """Commands are paired with their responses; latencies come from the frame timestamps.
`tpmtop replay FILE` opens such a file directly.

examples:
  tpmtop import getrandom.pcap -o getrandom.json
  tpmtop import lo.pcap --port 2341 -o run.json && tpmtop compare before.json run.json
  tpmtop import tools.pcap -o tools.json --decode"""


def add_import_arguments(p: argparse.ArgumentParser) -> None:
    import textwrap

    from tpmtop.importers.registry import IMPORTERS

    reads = "\n".join(textwrap.fill(f"reads ({i.name}) {i.about}.", 92) for i in IMPORTERS.values())
    p.epilog = reads + "\n\n" + EXAMPLES + "\n\n" + (p.epilog or "")
    p.add_argument("file", metavar="FILE", help=f"a file of recorded TPM traffic ({', '.join(IMPORTERS)})")
    p.add_argument("-o", "--output", required=True, metavar="CAPTURE",
                   help="the capture to write (JSON); '-' for stdout")
    p.add_argument("--force", action="store_true", help="allow the output to be the input file itself")
    p.add_argument("--decode", action="store_true", help="also list every command on stdout, one line each, "
                   "with its handles and parameters decoded by name (as tpmtop decode does)")
    for i in IMPORTERS.values():
        for o in i.options:
            p.add_argument(o.flag, dest=o.dest, **o.kwargs)


def run_import(args: argparse.Namespace) -> int:
    from tpmtop.capture import write_capture
    from tpmtop.cli.common import notice
    from tpmtop.importers.registry import IMPORTERS, find_importer
    from tpmtop.output import Output
    from tpmtop.patterns import detect, summary_lines
    from tpmtop.textsafe import safe

    # The output rules of every -o (tpmtop.output), checked before the file is read: the same
    # file as the input is refused (it would replace what is being read) unless --force.
    if args.decode and args.output == "-":
        from tpmtop.errors import UsageError

        raise UsageError("import --decode lists on stdout: write the capture to a file (-o FILE)")
    dest = Output(args.output, force=args.force, inputs=[args.file]).check()
    # Unrecognised: the pcap reader says what the file is not (or that it is missing), exit 2.
    importer = find_importer(args.file) or IMPORTERS["pcap"]
    from tpmtop.cli.progress import Bar, Reading

    with Reading([args.file]):
        cap, res = importer.read(args.file, **{o.dest: getattr(args, o.dest) for o in importer.options})
    with Bar("writing the capture", unit="lines") as bar:
        write_capture(dest, cap, progress=bar)
    for w in res.warnings[:5]:
        notice(f"warning: {w}")
    # One more pass over the events (spooled on disk by a big import, not held): the answered
    # ones counted and the patterns found on the way.
    ok = 0

    def counted() -> Iterator[dict[str, Any]]:
        nonlocal ok
        for e in cap["events"]:
            ok += e["rc"] is not None
            yield e

    patterns = detect(counted())
    notice(f"wrote {'stdout' if args.output == '-' else safe(args.output)}: {len(cap['events'])} TPM commands "
           f"({ok} with a response), {res.connections} connection(s), {res.framing} framing")
    for line in summary_lines(patterns):
        notice(line)
    if args.decode:
        from tpmtop.decode.listing import lines

        for line in lines(cap["events"]):
            print(line)
    return 0
