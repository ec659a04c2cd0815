"""``tpmtop whatif CAPTURE``: the capture's TPM work re-priced on each chip and in each session mode."""

from __future__ import annotations

import argparse
import os
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpmtop.profiles.whatif import WhatIf

HELP = """Every command of the capture is priced with each chip's profile (tpmtop profile list;
tpmtop profile show CHIP gives each figure's source and derivation). The capture's PCR_Extends
are re-timed by session mode with the commands that mode sends (none: PCR_Extend; per-command:
ContextLoad + StartAuthSession + FlushContext + PCR_Extend; reuse: the three set-up commands
once, then PCR_Extend; saved: set-up once, then ContextLoad + PCR_Extend + ContextSave),
replacing the set-ups the capture spent on them; every other command is priced as captured.
A command a profile has no figure for is counted in "uncovered", named under the table, and
left out of the TPM time and the ratio.

examples:
  tpmtop kernel --trace trace.txt --json k.json && tpmtop whatif k.json
  tpmtop whatif bench.json --chip slb9670,npct750 --mode none,reuse --json"""


def add_whatif_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = HELP + "\n\n" + (p.epilog or "")
    p.add_argument("capture", metavar="CAPTURE.json",
                   help="any tpmtop capture: bench, proxy, run, kernel, import, lab")
    p.add_argument("--chip", default="all", metavar="A,B|all",
                   help="built-in chip profiles (tpmtop profile list) or profile files (default: all)")
    p.add_argument("--mode", default="all", metavar="M,N|all",
                   help="session modes: none, per-command, reuse, saved (default: all)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def _chips(text: str) -> list[str]:
    from tpmtop.errors import UsageError
    from tpmtop.profiles.loader import BUILTIN

    items = [x.strip() for x in text.split(",") if x.strip()]
    if items == ["all"]:
        return list(BUILTIN)
    if not items:
        raise UsageError(f"--chip: no chip given (built-in: {', '.join(BUILTIN)}, or all)")
    return list(dict.fromkeys(items))


def run_whatif(args: argparse.Namespace) -> int:
    from tpmtop.cli.common import print_json
    from tpmtop.errors import UsageError
    from tpmtop.profiles.loader import BUILTIN, load_profile
    from tpmtop.profiles.whatif import all_modes, parse_choice, read_workload, whatif
    from tpmtop.textsafe import safe

    modes = parse_choice(args.mode, all_modes(), "mode")
    chips = []
    for name in _chips(args.chip):
        is_file = os.path.isfile(name)
        if name not in BUILTIN and not is_file and not name.endswith(".json") and "/" not in name:
            raise UsageError(f"unknown chip '{safe(name)}' (built-in: {', '.join(BUILTIN)}, or all; "
                             "or a profile file)")
        try:
            chips.append(load_profile(name))
        except UsageError as e:
            if name in BUILTIN or not is_file:
                raise
            # a file that is there but is no profile: say so, and why (the loader's reason)
            why = str(e).removeprefix(f"profile {name}: ")
            if not why.startswith("not "):
                why = f"not the profile schema: {why}"
            raise UsageError(f"--chip {safe(name)}: not a profile file: {why}") from None
    res = whatif(read_workload(args.capture), chips, modes)
    if args.json:
        print_json(res.to_json())
    else:
        print(render(res), end="")
    return 0


def _num(v: float | None, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def _seconds(us: float | None) -> str:
    if us is None:
        return "–"
    s = us / 1e6
    return f"{s:,.1f}" if s >= 1000 else f"{s:,.3f}"


def render(res: WhatIf) -> str:
    from tpmtop.cli.common import table
    from tpmtop.textsafe import safe as safe_text

    wl = res.workload
    # a long path stays whole on its own line (copied, not read): the rest fits 80 columns
    out = textwrap.wrap(f"# what-if: {wl.commands:,} TPM commands in {safe_text(wl.path)}"
                        + (" (from the runs' counts: the capture has no events)" if wl.basis == "runs" else ""),
                        80, subsequent_indent="# ", break_long_words=False, break_on_hyphens=False)
    setup = sum(wl.replaced.values())
    others = sum(wl.others.values())
    head = (f"# {wl.extends:,} PCR_Extend re-timed by mode"
            + (f" ({setup:,} session set-up commands they used, replaced by each mode's)" if setup else "")
            + f"; {others:,} other commands priced as captured")
    if not wl.extends:
        head += " (no PCR_Extend: the modes differ only in how the kernel's extends run, so they cost the same here)"
    out += textwrap.wrap(head, 80, subsequent_indent="# ")
    rows = []
    last = None
    for c in res.cells:
        rows.append([c.chip if c.chip != last else "", c.mode, _seconds(c.total_us),
                     _num(None if c.per_extend_us is None else c.per_extend_us / 1000, ",.2f"),
                     _num(c.ratio, ".2f"), f"{c.uncovered_count:,}"])
        last = c.chip
    out.append(table(rows, ["chip", "mode", "TPM s", "ms/extend", "× none", "uncovered"], right={2, 3, 4, 5}))
    seen: dict[str, list[str]] = {}
    for c in res.cells:
        if c.uncovered:
            text = ", ".join(f"{n} ×{k:,}" for n, k in sorted(c.uncovered.items()))
            chips = seen.setdefault(text, [])
            if c.chip not in chips:
                chips.append(c.chip)
    if seen:
        out.append("uncovered (no figure in the chip's profile; counted, not in TPM s or × none):")
        for text, chips in seen.items():
            out += textwrap.wrap(f"{', '.join(chips)}: {safe_text(text)}", 80, initial_indent="  ",
                                 subsequent_indent="    ")
    # the ms/extend note only where the column has figures: without a PCR_Extend it is all "–"
    notes = ("ms/extend: each extend after the mode's once-per-boot set-up (reuse and saved pay "
             "ContextLoad + StartAuthSession + FlushContext once, in TPM s); reuse is a lower bound (a "
             "user-space TPM command or resume pays the set-up again). " if wl.extends else "") + (
             "Figures and how each was derived: tpmtop profile show CHIP; estimated ones give the order "
             "of magnitude only.")
    out += textwrap.wrap(notes, 80)
    return "\n".join(out) + "\n"
