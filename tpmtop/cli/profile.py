"""``tpmtop profile``: record a chip's latency profile, derive one from a capture or a kernel
trace, or show one. Applying a profile is ``--profile`` on ``tpmtop`` and ``tpmtop bench``."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpmtop.profiles.profile import Profile


def add_profile_arguments(p: argparse.ArgumentParser) -> None:
    from tpmtop.cli import add_common, add_tpm_options

    sub = p.add_subparsers(dest="profile_action", metavar="ACTION", parser_class=type(p), required=True)

    r = sub.add_parser("record", help="measure the connected TPM's command latencies (extends PCR 16)",
                       description="Characterise the connected TPM: every command the session modes use, "
                                   "with and without an HMAC session. Extends PCR 16 (the debug PCR).")
    add_tpm_options(r)
    r.add_argument("-o", "--output", default="-", metavar="FILE", help="profile file to write (default: stdout)")
    r.add_argument("-n", type=int, default=50, metavar="N",
                   help="operations per session mode and op (default: 50; the median is stable from ~30)")
    r.add_argument("--warmup", type=int, default=2, metavar="N", help="uncounted operations first (default: 2)")
    r.add_argument("--ops", default="extend,get_random", help="ops to run: extend, get_random, create_primary "
                   "(default: extend,get_random)")
    r.add_argument("--pcr", type=int, default=16, help="PCR to extend (default: 16)")
    r.add_argument("--allow-pcr", action="store_true", help="allow extending PCRs 0-15 (changes boot measurements!)")
    r.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    _naming(r)

    c = sub.add_parser("from-capture", help="derive a profile from a tpmtop capture (bench --json)",
                       description="Derive a profile from a tpmtop.capture/1 file. Per-command events "
                                   "(bench --json FILE --events) give exact figures; without them the runs' "
                                   "histograms are used.")
    c.add_argument("capture", metavar="CAPTURE.json")
    c.add_argument("-o", "--output", default="-", metavar="FILE", help="profile file to write (default: stdout)")
    _naming(c)

    t = sub.add_parser("from-trace", help="derive a profile from kernel traces (ftrace function_graph, bpftrace)",
                       description="Derive a profile from ftrace function_graph or bpftrace output of the "
                                   "kernel's TPM calls (tpm_transmit_cmd under tpm2_pcr_extend …). Several "
                                   "traces merge: e.g. one with HMAC sessions and one without.")
    t.add_argument("trace", nargs="+", metavar="TRACE")
    t.add_argument("-o", "--output", default="-", metavar="FILE", help="profile file to write (default: stdout)")
    t.add_argument("--calls", type=int, metavar="N",
                   help="calls each bpftrace sum() covers (bpftrace sums do not say; required for them)")
    t.add_argument("--unit", choices=("ns", "us", "ms"), help="unit of bpftrace values (default: ns)")
    t.add_argument("--manufacturer", help="the chip's TPM2_PT_MANUFACTURER, e.g. IFX (a trace does not say)")
    t.add_argument("--model", help="the chip's model, e.g. SLB9670")
    _naming(t)

    lst = sub.add_parser("list", help="the built-in chip profiles and what each covers",
                         description="Each built-in chip profile: how many of its figures are published, "
                                     "how many estimated (scaled, and how: tpmtop profile show CHIP), which "
                                     "session modes it prices fully, and the commands nothing was published for.")
    lst.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    s = sub.add_parser("show", help="print a profile's figures and where each came from")
    # Not dest="profile": that is the top-level --profile's name, which main() refuses for
    # subcommands that would ignore it.
    s.add_argument("profile_ref", metavar="NAME|FILE")
    for action in (r, c, t, lst, s):
        add_common(action)  # `profile show X --debug` as well as `profile --debug show X`


def _naming(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", help="the profile's name (default: from the output file name)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")


def _name(args: argparse.Namespace, fallback: str) -> str:
    from tpmtop.errors import UsageError

    if args.name:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", args.name):
            raise UsageError(f"--name '{args.name}': use letters, digits, '.', '_' and '-' (at most 64)")
        return str(args.name)
    if args.output != "-":
        stem = re.sub(r"[^A-Za-z0-9._-]", "-", os.path.splitext(os.path.basename(args.output))[0]).lstrip("._-")
        if stem:
            return stem[:64]
    return fallback


def _check_output(args: argparse.Namespace, inputs: Iterable[str] = ()) -> None:
    """Before any work: the output can be written (tpmtop.output's rules), an existing
    regular file only with --force, never one of the inputs."""
    from tpmtop.output import Output

    args.output_dest = Output(args.output, force=args.force, inputs=inputs, refuse_existing=True).check()


def _write(args: argparse.Namespace, profile: Profile, warnings: Iterable[str] = ()) -> int:
    from tpmtop.cli.common import notice
    from tpmtop.profiles.loader import write_profile

    for w in warnings:
        notice(w)
    write_profile(getattr(args, "output_dest", None) or args.output, profile)
    if args.output != "-":
        n = sum(len(v) for v in profile.commands.values())
        notice(f"profile '{profile.name}' ({n} figures) written to {args.output}; "
               f"apply it with --sim --profile {args.output}")
    return 0


def run_profile(args: argparse.Namespace) -> int:
    return {"record": _record, "from-capture": _from_capture, "from-trace": _from_trace,
            "list": _list, "show": _show}[args.profile_action](args)


def _record(args: argparse.Namespace) -> int:
    from tpmtop.cli.common import notice, tpm_from_args
    from tpmtop.cli.progress import Bar
    from tpmtop.errors import UsageError
    from tpmtop.profiles.derive import record
    from tpmtop.recorder import Recorder
    from tpmtop.sessions.modes import MODES, OPS, check_pcr, parse_list

    ops = parse_list(args.ops, OPS, "op")
    if args.n < 1 or args.warmup < 0:
        raise UsageError("-n must be ≥ 1 and --warmup ≥ 0")
    if getattr(args, "read_only", False):
        raise UsageError("--read-only: recording a profile extends a PCR and starts sessions; refusing")
    check_pcr(args.pcr, args.allow_pcr)
    _check_output(args)
    name = _name(args, "recorded")
    per_op = (args.n + args.warmup) * len(MODES)
    # Every command of the run is kept, so the recorder must not drop any (it is a ring).
    rec = Recorder(capacity=max(100_000, per_op * len(ops) * 4 + 1000))
    with tpm_from_args(args, recorder=rec) as conn:
        extends = (args.n + args.warmup) * len(MODES) if "extend" in ops else 0
        notice(f"safety: this extends PCR {args.pcr} about {extends} times"
               + (" (PCR 16 is the debug PCR: no boot measurement, sealed secret or attestation should "
                  "depend on it; it keeps the new value until reboot or PCR_Reset)" if args.pcr == 16 else "")
               + ("" if conn.simulated else "; on Linux 6.12+ each command also ends the kernel's kept HMAC "
                  "session, so its next PCR extend pays the full session set-up"))
        progress = Bar("recording", unit="ops", quiet=args.quiet)
        try:
            prof, _ = record(conn, args.n, args.pcr, ops=ops, warmup=args.warmup, progress=progress)
        finally:
            progress.close()
    prof.name = name
    return _write(args, prof)


def _from_capture(args: argparse.Namespace) -> int:
    from tpmtop.profiles.derive import profile_from_capture

    _check_output(args, inputs=[args.capture])
    prof, warnings = profile_from_capture(args.capture, _name(args, "capture"))
    return _write(args, prof, warnings)


def _from_trace(args: argparse.Namespace) -> int:
    from tpmtop.errors import UsageError
    from tpmtop.profiles.derive import profile_from_traces

    if args.calls is not None and args.calls < 1:
        raise UsageError("--calls must be ≥ 1")
    _check_output(args, inputs=args.trace)
    prof, warnings = profile_from_traces(args.trace, _name(args, "trace"), calls=args.calls, unit=args.unit)
    prof.chip = {k: v for k, v in (("manufacturer", args.manufacturer), ("model", args.model)) if v}
    return _write(args, prof, warnings)


def _chip_text(chip: dict[str, Any]) -> str:
    """The chip line of ``profile show``: "manufacturer IFX, model …, a real chip" — the
    ``simulated`` flag in words, not Python's True/False."""
    parts = []
    for k, v in chip.items():
        if k == "simulated":
            parts.append("measured on a simulator" if v else "a real chip")
        elif k == "tcti":
            parts.append(f"through {v}")
        else:
            parts.append(f"{k} {v}")
    return ", ".join(parts)


def _show(args: argparse.Namespace) -> int:
    from tpmtop.cli.common import table
    from tpmtop.profiles.loader import load_profile
    from tpmtop.tpm import names

    p = load_profile(args.profile_ref)
    chip = _chip_text(p.chip)
    print(f"# profile {p.name}" + (f": {p.description}" if p.description else ""))
    if chip:
        print(f"# chip: {chip}")
    rows, details = [], []
    for cc in sorted(p.commands, key=lambda c: names.cc_short(c)):
        for variant, f in p.commands[cc].items():
            if f.p10_us is not None:
                spread = f"{f.p10_us:,.0f} – {f.p90_us:,.0f}"
            else:
                spread = "histogram" if f.histogram else "-"
            d = f.source.get("detail", "")
            if d not in details:
                details.append(d)
            rows.append([names.cc_short(cc), variant.replace("_", " "), f"{f.median_us:,.0f}", spread,
                         f"{f.source.get('kind', '?')} [{details.index(d) + 1}]"])
    print(table(rows, ["command", "session", "median µs", "p10 – p90 µs", "source"], right={2, 3}))
    for i, d in enumerate(details, 1):
        print(f"[{i}] {d}")
    for n in p.notes:
        print(f"# {n}")
    return 0


def _list(args: argparse.Namespace) -> int:
    import textwrap

    from tpmtop.cli.common import print_json, table
    from tpmtop.profiles.coverage import coverage

    rows = coverage()
    if args.json:
        print_json({"profiles": [r.to_json() for r in rows]})
        return 0
    print(table([[r.name, r.model, str(r.published), str(r.estimated), str(len(r.not_published)),
                  f"{len(r.modes)}/{r.all_modes}"] for r in rows],
                ["chip", "model", "published", "estimated", "not publ.", "modes"], right={2, 3, 4, 5}))
    print("not published (a what-if counts these as uncovered, never prices them):")
    for r in rows:
        if r.not_published:
            for line in textwrap.wrap(f"{r.name}: {', '.join(r.not_published)}", 80, initial_indent="  ",
                                      subsequent_indent="    "):
                print(line)
    print("Any other command is uncovered too. Sources: tpmtop profile show CHIP.")
    return 0
