"""``tpmtop lab``: real kernels booted under qemu with their TPM served, timed and shaped by tpmtop."""

from __future__ import annotations

import argparse
from collections.abc import Callable

EXAMPLES = """Needs root, qemu-system-x86 and busybox-static (`make lab` installs them) and a source
checkout (scripts/). Each kernel boots under qemu with a TPM that is a private swtpm behind
tpmtop's relay of swtpm's control protocol: tpmtop times every command the guest sends and,
with --profile, holds each answer as long as that chip takes. The guest runs a fixed IMA
workload from a 9p file system and powers off. One capture per boot (the kernel's commands,
origin "kernel") for tpmtop compare / replay / boot --capture / export.

kernels: 6.12-hmac (a kept session), 6.12-percmd (a session per command, as 6.10/6.11) and
6.12-nohmac (built by `make lab-kernels`), 6.1 and 6.12 (Debian's binary kernels, HMAC off),
or a path to any bzImage with tpm_tis, virtio-pci and 9p built in. With an HMAC-off kernel and
a per-command or kept-session one, the table ends with the thread's 12,313-extend benchmark
beside the run's (--files N sets N).

examples:
  sudo tpmtop lab                                             # 6.12-percmd,6.12-hmac,6.12,6.1 on slb9670
  sudo tpmtop lab --kernels 6.12-percmd,6.12-hmac,6.12 --files 1000 --no-trace
  sudo tpmtop lab --kernels 6.12-hmac,6.12-nohmac --boots 3
  sudo tpmtop lab --kernel ~/linux/arch/x86/boot/bzImage --profile my-chip.json"""


def _count(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}: {text!r}")
        return v

    return parse


def add_lab_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.lab import DEFAULT_KERNELS

    p.epilog = EXAMPLES + "\n\n" + (p.epilog or "")
    p.add_argument(
        "--kernels", default=None, metavar="LIST", help=f"comma-separated kernels to boot (default: {DEFAULT_KERNELS})"
    )
    p.add_argument(
        "--kernel", action="append", default=[], metavar="PATH", help="a bzImage to boot as well (repeatable)"
    )
    p.add_argument(
        "--profile",
        default="slb9670",
        metavar="NAME|FILE",
        help="chip latency profile the guest's TPM answers with (default: slb9670; 'none': swtpm's own speed)",
    )
    p.add_argument("--seed", type=int, default=1, metavar="N", help="seed for the profile's spread (default: 1)")
    p.add_argument("--boots", type=_count(1, 100), default=1, metavar="N", help="boots per kernel (default: 1)")
    p.add_argument(
        "--files",
        type=_count(1, 100000),
        default=100,
        metavar="N",
        help="files the guest workload makes IMA measure (default: 100)",
    )
    p.add_argument("--ima", choices=["tcb"], default="tcb", help="IMA policy (tcb: the one the workload relies on)")
    p.add_argument("--out", metavar="DIR", help="where captures and logs go (default: .cache/tpmtop-lab/runs/<time>)")
    p.add_argument(
        "--accel", choices=["tcg", "kvm"], help="qemu accelerator (default: kvm with hardware virtualisation, else tcg)"
    )
    p.add_argument(
        "--guest-timeout",
        type=float,
        default=900.0,
        metavar="S",
        help="seconds one guest may run before it is stopped (default: 900)",
    )
    p.add_argument(
        "--bench-n",
        type=_count(1, 100000),
        default=100,
        metavar="N",
        help="extends per mode for the bench comparison (default: 100)",
    )
    p.add_argument(
        "--no-trace",
        action="store_true",
        help="boot without tpmtop's kprobes in the guest (by default they record from boot and what "
        "they saw is checked against the wire)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the whole result as JSON")


def run_lab(args: argparse.Namespace) -> int:
    import json

    from tpmtop.lab import DEFAULT_KERNELS
    from tpmtop.lab.report import render
    from tpmtop.lab.run import LabOptions
    from tpmtop.lab.run import run_lab as run
    from tpmtop.output import Output

    names = [k.strip() for k in (args.kernels or ("" if args.kernel else DEFAULT_KERNELS)).split(",") if k.strip()]
    names += args.kernel
    profile = None if args.profile in ("none", "") else args.profile
    opts = LabOptions(
        kernels=names,
        profile=profile,
        seed=args.seed,
        boots=args.boots,
        files=args.files,
        out_dir=args.out,
        timeout_s=args.guest_timeout,
        accel=args.accel,
        bench_n=args.bench_n,
        trace=not args.no_trace,
    )
    import sys

    res = run(opts, log=lambda s: print(s, file=sys.stderr))
    text = render(res)
    print(text, end="")
    with open(f"{res.out_dir}/lab.txt", "w") as f:
        f.write(text)
    if args.json:
        Output(args.json).write_chunks([json.dumps(res.to_json(), indent=1, default=str).encode()])
    failed = [b for b in res.boots if not b.ok]
    if failed:
        from tpmtop.textsafe import safe

        what = "; ".join(f"{b.kernel} #{b.index}: {(b.problems or ['failed'])[0]}" for b in failed)
        print(f"tpmtop lab: {len(failed)} of {len(res.boots)} boots failed ({safe(what)})", file=sys.stderr)
        return 1
    return 0
