"""``tpmtop export CAPTURE.json --format chrome-trace|openmetrics -o FILE``."""

from __future__ import annotations

import argparse

EXAMPLES = """formats:
  chrome-trace  every TPM command as a slice under its operation, one track per engine/mode;
                open in https://ui.perfetto.dev or chrome://tracing (needs a capture
                recorded with --events)
  pcapng        every command and response as TCP payload on port 2321, framed as tpm2-tss's
                pcap: TCTI writes it, for Wireshark/tshark's TPM 2.0 dissector; original
                timestamps, one TCP stream per client (needs a capture whose events kept
                their bytes: bench --events keeps them for the newest 16,384 commands)
  openmetrics   latency histograms per (engine, mode, op) and per command code, labelled with
                the TPM manufacturer and firmware; for node_exporter's textfile collector

Output (-o): a regular file is replaced atomically (temporary file, fsync, rename): a scraper
never reads half a file. '-' is stdout; a pipe or character device (/dev/null, a FIFO, also
through a symlink) is written through and never replaced. The input capture itself is refused
as output unless --force. An unwritable destination is refused before the capture is read.

examples:
  tpmtop export run.json --format chrome-trace -o trace.json
  tpmtop export run.json --format openmetrics -o /var/lib/node_exporter/textfile/tpmtop.prom
  tpmtop export run.json --format openmetrics -o - | grep tpmtop_operation_seconds_count"""


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES + "\n\n" + (p.epilog or "")
    p.add_argument("capture", metavar="CAPTURE.json", help="a capture (tpmtop bench --json)")
    p.add_argument("--format", "-f", required=True, choices=("chrome-trace", "openmetrics", "pcapng"))
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write; '-' for stdout")
    p.add_argument("--force", action="store_true", help="allow the output to be the input capture itself")


def run_export(args) -> int:
    from tpmtop.cli.common import notice
    from tpmtop.output import Output
    from tpmtop.textsafe import safe

    # Checked before the capture is read: a wrong -o costs nothing.
    dest = Output(args.output, force=args.force, inputs=[args.capture]).check()
    where = "stdout" if args.output == "-" else safe(args.output)
    if args.format == "pcapng":
        from tpmtop.exporters.pcapng import export_pcapng

        n = export_pcapng(args.capture, dest)
        notice(f"wrote {where}: {n['exported']} commands with their responses, {n['frames']} frames, "
               f"{n['streams']} TCP stream(s)")
        if n["without_bytes"]:
            notice(f"{n['without_bytes']} of {n['events']} events kept no bytes and are not in the file "
                   f"(captures keep the bytes of the newest 16,384 commands)")
        return 0
    if args.format == "chrome-trace":
        from tpmtop.exporters.chrome_trace import export_chrome_trace

        n = export_chrome_trace(args.capture, dest)
        ops = n["ops"] + n["derived_ops"]
        how = ""
        if n["derived_ops"]:
            how = (" (derived from op_seq)" if not n["ops"] else
                   f" ({n['derived_ops']} of them derived from op_seq)")
        notice(f"wrote {where}: {n['events']} TPM commands, {ops} operations{how}, {n['tracks']} tracks")
        return 0
    from tpmtop.exporters import openmetrics

    n = openmetrics.export_openmetrics(args.capture, dest)
    if args.output != "-":
        notice(f"wrote {where}: {n['runs']} runs")
    return 0
