"""``tpmtop import FILE -o CAPTURE``: a tpm2-tss ``pcap:`` TCTI file or a tcpdump as a capture."""

from __future__ import annotations

import argparse

EXAMPLES = """reads pcap and pcapng files written by tpm2-tss's pcap TCTI
(TCTI_PCAP_FILE=f.pcap tpm2_getrandom -T "pcap:swtpm:port=2321" 8) and tcpdump captures of a
simulator port (tcpdump -i lo -w f.pcap port 2321), in swtpm's raw framing or the Microsoft
simulator's (mssim) framing. Commands are paired with their responses; latencies come from
the frame timestamps. `tpmtop replay FILE` opens such a file directly.

examples:
  tpmtop import getrandom.pcap -o getrandom.json
  tpmtop import lo.pcap --port 2341 -o run.json && tpmtop compare before.json run.json
  tpmtop import tools.pcap -o tools.json --decode"""


def add_import_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES + "\n\n" + (p.epilog or "")
    p.add_argument("file", metavar="FILE", help="a pcap or pcapng file")
    p.add_argument("-o", "--output", required=True, metavar="CAPTURE", help="the capture to write (JSON); '-' for stdout")
    p.add_argument("--force", action="store_true", help="allow the output to be the input file itself")
    p.add_argument("--port", type=int, metavar="N", help="the TPM's TCP port (default: 2321, or "
                   "whichever port a stream of TPM commands goes to)")
    p.add_argument("--decode", action="store_true", help="also list every command on stdout, one line each, "
                   "with its handles and parameters decoded by name (as tpmtop decode does)")


def run_import(args) -> int:
    from tpmtop.capture import write_capture
    from tpmtop.cli.common import notice
    from tpmtop.importers.pcap import import_pcap
    from tpmtop.patterns import detect, summary_lines

    from tpmtop.output import Output
    from tpmtop.textsafe import safe

    # The output rules of every -o (tpmtop.output), checked before the pcap is read: the same
    # file as the input is refused (it would replace what is being read) unless --force.
    if args.decode and args.output == "-":
        from tpmtop.errors import UsageError

        raise UsageError("import --decode lists on stdout: write the capture to a file (-o FILE)")
    dest = Output(args.output, force=args.force, inputs=[args.file]).check()
    cap, res = import_pcap(args.file, args.port)
    write_capture(dest, cap)
    for w in res.warnings[:5]:
        notice(f"warning: {w}")
    ok = sum(1 for e in cap["events"] if e["rc"] is not None)
    notice(f"wrote {'stdout' if args.output == '-' else safe(args.output)}: {len(cap['events'])} TPM commands ({ok} with a response), "
           f"{res.connections} connection(s), {res.framing} framing")
    for line in summary_lines(detect(cap["events"])):
        notice(line)
    if args.decode:
        from tpmtop.decode.listing import lines

        for line in lines(cap["events"]):
            print(line)
    return 0
