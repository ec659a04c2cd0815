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

The output file is replaced atomically (temporary file, fsync, rename): a scraper never reads
half a file.

examples:
  tpmtop export run.json --format chrome-trace -o trace.json
  tpmtop export run.json --format openmetrics -o /var/lib/node_exporter/textfile/tpmtop.prom"""


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES + "\n\n" + (p.epilog or "")
    p.add_argument("capture", metavar="CAPTURE.json", help="a capture (tpmtop bench --json)")
    p.add_argument("--format", "-f", required=True, choices=("chrome-trace", "openmetrics", "pcapng"))
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="where to write; '-' for stdout (openmetrics only)")


def run_export(args) -> int:
    import sys

    from tpmtop.cli.common import notice
    from tpmtop.errors import UsageError

    if args.format == "pcapng":
        if args.output == "-":
            raise UsageError("tpmtop export: pcapng is binary; give a file with -o")
        from tpmtop.cli.common import check_output_dir
        from tpmtop.exporters.pcapng import export_pcapng

        check_output_dir(args.output, "tpmtop export")

        n = export_pcapng(args.capture, args.output)
        notice(f"wrote {args.output}: {n['exported']} commands with their responses, {n['frames']} frames, "
               f"{n['streams']} TCP stream(s)")
        if n["without_bytes"]:
            notice(f"{n['without_bytes']} of {n['events']} events kept no bytes and are not in the file "
                   f"(captures keep the bytes of the newest 16,384 commands)")
        return 0
    if args.format == "chrome-trace":
        if args.output == "-":
            raise UsageError("tpmtop export: chrome-trace output can be large; give a file with -o")
        from tpmtop.exporters.chrome_trace import export_chrome_trace

        n = export_chrome_trace(args.capture, args.output)
        ops = n["ops"] or n["derived_ops"]
        notice(f"wrote {args.output}: {n['events']} TPM commands, {ops} operations"
               f"{' (derived from op_seq)' if n['derived_ops'] else ''}, {n['tracks']} tracks")
        return 0
    from tpmtop.exporters import openmetrics

    if args.output == "-":
        from tpmtop.capture import load_summary

        sys.stdout.write(openmetrics.render(load_summary(args.capture)))
        return 0
    n = openmetrics.export_openmetrics(args.capture, args.output)
    notice(f"wrote {args.output}: {n['runs']} runs")
    return 0
