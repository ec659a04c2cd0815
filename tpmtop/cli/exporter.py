"""``tpmtop exporter``: a passive daemon serving /metrics to Prometheus.

Argparse only at import: prometheus_client and the kernel parsers load when it runs, so
``tpmtop --help`` stays fast.
"""

from __future__ import annotations

import argparse

EXAMPLES = """Passive: it sends no TPM command unless --probe is given, and then only read-only
GetCapability (on Linux 6.12+ any user-space TPM command ends the session the kernel keeps,
so the next IMA extend pays a set-up again: --probe perturbs what it measures, say so
before turning it on). Listens on 127.0.0.1 only unless told otherwise: every local user can
read loopback; to serve other hosts, --listen on an address and use --tls-cert/--tls-key
(and --tls-client-ca so that only scrapers with a certificate get in) or a firewall.

examples:
  sudo tpmtop exporter                                  # kprobes on tpm_transmit, :9927
  tpmtop exporter --trace trace.txt --listen 127.0.0.1:0
  sudo tpmtop exporter --probe 300 --listen 10.0.0.5:9927 --tls-cert c.pem --tls-key k.pem --tls-client-ca ca.pem
  curl -s 127.0.0.1:9927/metrics | promtool check metrics"""


def add_exporter_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.cli import add_tpm_options

    p.epilog = EXAMPLES + "\n\n" + (p.epilog or "")
    p.add_argument("--listen", default="127.0.0.1:9927", metavar="HOST:PORT",
                   help="where to serve /metrics (default 127.0.0.1:9927; port 0 picks a free port, printed on stderr)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--trace", "--kernel-trace", dest="kernel_trace", metavar="FILE",
                     help="read the kernel's TPM traffic from a trace file (followed as it grows) instead of "
                          "kprobes. --kernel-trace: the older name")
    src.add_argument("--no-kernel", action="store_true", help="do not trace the kernel: serve the system facts only")
    p.add_argument("--root", default="/", metavar="DIR",
                   help="read the system facts under DIR (a copy of another machine's files; default /)")
    p.add_argument("--probe", type=_interval, metavar="SECONDS", nargs="?", const=300.0,
                   help="every SECONDS (default 300) read the TPM's identity and free slots with read-only "
                        "GetCapability commands; off by default (see above)")
    tls = p.add_argument_group("TLS")
    tls.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate (chain)")
    tls.add_argument("--tls-key", metavar="PEM", help="... and this private key")
    tls.add_argument("--tls-client-ca", metavar="PEM",
                     help="require scrapers to present a certificate signed by this CA")
    add_tpm_options(p)


def _interval(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 10 <= v <= 86400:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds between 10 and 86400")
    return v


def run_exporter(args: argparse.Namespace) -> int:
    import os
    import stat
    import sys
    import time

    from tpmtop.cli.common import notice
    from tpmtop.errors import UsageError

    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        raise UsageError("--tls-client-ca needs --tls-cert and --tls-key (client certificates are a TLS feature)")
    tls_files = (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key), ("--tls-client-ca", args.tls_client_ca))
    for opt, path in tls_files:
        if path and os.path.isdir(path):
            raise UsageError(f"{opt} {path}: it is a directory; give the PEM file")
        if path and not os.path.isfile(path):
            raise UsageError(f"{opt} {path}: no such file")
    if args.kernel_trace:
        try:
            if stat.S_ISDIR(os.stat(args.kernel_trace).st_mode):
                raise UsageError(f"--trace {args.kernel_trace}: it is a folder")
        except FileNotFoundError:
            raise UsageError(f"--trace {args.kernel_trace}: no such file") from None
        except PermissionError:
            raise UsageError(f"--trace {args.kernel_trace}: permission denied") from None
    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: no such folder")
    from tpmtop.exporter.server import parse_listen

    listen = parse_listen(args.listen)

    from tpmtop.exporter import facts_feed, kernel_feed, server

    kernel_feed.preload()
    registry = server.new_registry()
    kernel = kernel_feed.KernelMetrics(registry)
    facts = facts_feed.FactsMetrics(registry, root=args.root).read_all()
    info = server.ExporterInfo(registry, "facts")
    reader = None
    probe = None
    httpd = None
    try:
        # Listening first: a port in use is said before any probe is armed.
        httpd, bound = server.serve(registry, listen, certfile=args.tls_cert, keyfile=args.tls_key,
                                    client_cafile=args.tls_client_ca, log=notice)
        if args.kernel_trace:
            reader = kernel_feed.KernelReader(kernel, path=args.kernel_trace)
            info.source = "trace-file"
        elif not args.no_kernel:
            from tpmtop.kernel.probes import KernelTraceError, Probes

            try:
                p = Probes()
                p.__enter__()
                reader = kernel_feed.KernelReader(kernel, probes=p)
                info.source = "kprobes"
                for g in p.stale_removed:
                    notice(f"removed stale probe group {g} left by a tpmtop that was killed")
            except KernelTraceError as e:
                notice(f"not tracing the kernel ({e}); serving the system facts only "
                       "(tpmtop_kernel_trace_up is 0)")
        source = reader.source_text if reader is not None else "system facts only"
        if args.probe:
            from tpmtop.exporter.tpm_probe import TpmProbe

            probe = TpmProbe(registry, args, facts, interval_s=args.probe).start()
        if reader is not None:
            reader.start()
        url = bound.url().replace("http://", "https://") if args.tls_cert else bound.url()
        notice(f"serving {url} from {source}" + ("" if bound.loopback else
               " — not loopback: other hosts can scrape it" + ("" if args.tls_client_ca else
                                                               " (no --tls-client-ca: anyone who reaches it)")))
        sys.stderr.flush()
        said_error = False
        while True:  # SIGTERM/SIGINT/SIGHUP unwind from here as Interrupted (exit status 130)
            time.sleep(1.0)
            if kernel.error and not said_error:
                notice(f"kernel trace: {kernel.error}")
                said_error = True
    finally:
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if probe is not None:
            probe.close()
        if reader is not None:
            reader.close()
