"""``--profile NAME|FILE`` and ``--seed N`` for ``tpmtop`` and ``tpmtop bench``.

A profile only ever slows down a *simulator*. On real hardware it would make tpmtop lie
about the chip in front of the user, so it is refused, with one line and exit status 2,
before anything is opened or sent. Only an explicit ``--sim`` counts: the fallback swtpm
(no /dev/tpmrm0 here) would make the same command line mean different things on different
machines.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tpmtop.errors import UsageError

if TYPE_CHECKING:
    from tpmtop.profiles.profile import Profile
    from tpmtop.tpm import wire
    from tpmtop.tpm.connection import TpmConnection


def add_profile_options(parser: argparse.ArgumentParser, top: bool = False) -> None:
    """On subcommands the defaults are suppressed, like the TPM selection options, so that
    ``tpmtop --profile X bench --sim`` and ``tpmtop bench --sim --profile X`` agree."""
    d = (lambda v: v) if top else (lambda v: argparse.SUPPRESS)
    g = parser.add_argument_group("chip latency profile (simulator only)")
    g.add_argument("--profile", default=d(None), metavar="NAME|FILE",
                   help="make the simulator answer as slowly as a real chip: a built-in profile "
                        "(slb9670 …: tpmtop profile list) or a tpmtop.profile/1 file; needs --sim")
    g.add_argument("--seed", type=int, default=d(None), metavar="N",
                   help="seed for sampling latencies from a profile's spread (repeatable runs)")


def profile_from_args(args: argparse.Namespace) -> Profile | None:
    """The profile to apply (or None), checked against the TPM selection. Raises UsageError."""
    spec = getattr(args, "profile", None)
    seed = getattr(args, "seed", None)
    if spec is None:
        if seed is not None:
            raise UsageError("--seed goes with --profile")
        return None
    if not getattr(args, "sim", False):
        where = getattr(args, "tcti", None) or "the default TPM"
        raise UsageError(f"--profile {spec}: only a simulator can be slowed down to a chip's latencies; "
                         f"add --sim (refusing to apply it to {where})")
    from tpmtop.profiles.loader import load_profile

    return load_profile(spec)


def apply_profile(conn: TpmConnection, profile: Profile | None, seed: int | None = None) -> None:
    """Hold each response as the profile says; captures and headers then name the profile."""
    if profile is None:
        return
    if not conn.simulated:  # second line of defence: a caller that skipped profile_from_args
        raise UsageError(f"--profile {profile.name}: refusing to apply a latency profile to a real TPM "
                         f"({conn.target.tcti})")
    shape = profile.shaper(seed)
    unheld = conn.profile_unheld

    def shaped(info: wire.CommandInfo) -> int | None:
        # a command the profile does not cover runs at swtpm speed: remembered, so that every
        # row and ratio that depends on it can say so (tpmtop.profiles.apply.gaps)
        ns = shape(info)
        if ns is None and info.cc is not None:
            unheld.add(info.cc)
        return ns

    if conn.transport is None:
        raise UsageError(f"--profile {profile.name}: the TPM is not open")
    conn.transport.shaper = shaped
    conn.profile_name = profile.name


def gaps(conn: Any, commands: Iterable[int | str | None]) -> list[str]:
    """Of ``commands`` (a run's command codes, or their TPM2_CC_ names), those the applied
    profile did not cover (they ran at the simulator's speed), as TPM2_CC_ names, sorted."""
    from tpmtop.tpm import names

    unheld = {names.cc_name(cc) for cc in getattr(conn, "profile_unheld", ())}
    if not getattr(conn, "profile_name", None) or not unheld:
        return []
    have = {c if isinstance(c, str) else names.cc_name(c) for c in commands if c is not None}
    return sorted(have & unheld)


def describe(profile: Profile, seed: int | None = None) -> str:
    """One line for headers: which profile, and that latencies are the profile's, not the host's."""
    chip = " ".join(str(profile.chip[k]) for k in ("manufacturer", "model") if profile.chip.get(k))
    s = f"profile {profile.name}" + (f" ({chip})" if chip else "")
    if seed is not None:
        s += f", seed {seed}"
    return s + ": latencies are the chip's where it has a figure, reproduced on the simulator (others: swtpm speed)"


# A kept session loaded from its saved context: the profile has one ContextLoad figure, the
# null primary's (nothing is published for a session's), so a mode that loads its session
# each operation has that command priced by analogy.
_SESSION_LOADS = {"saved"}


def estimated(profile: Profile | None, commands: Iterable[int | str | None], mode: str) -> list[str]:
    """Of a run's ``commands`` (codes or TPM2_CC_ names), those whose latency under ``profile``
    is an estimate rather than a published or recorded figure, each with why ("ContextSave
    estimated", "ContextLoad priced as the null primary's"): the row must not read as the
    chip's own."""
    from tpmtop.profiles.profile import HMAC_SESSION, NO_SESSION
    from tpmtop.tpm import names

    if profile is None:
        return []
    by_name = {names.cc_name(k): k for k in profile.commands}
    out = []
    for c in sorted({c if isinstance(c, str) else names.cc_name(c) for c in commands if c is not None}):
        cc = by_name.get(c)
        short = c.removeprefix("TPM2_CC_")
        fig = profile.figure(cc, NO_SESSION if mode == "none" else HMAC_SESSION) if cc is not None else None
        if fig is not None and fig.source.get("kind") == "estimated":
            out.append(f"{short} estimated")
        elif fig is not None and short == "ContextLoad" and mode in _SESSION_LOADS:
            out.append(f"{short} priced as the null primary's")
    return out
