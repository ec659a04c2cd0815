"""Chip latency profiles (``tpmtop.profile/1``): what a TPM's commands cost, and the shaper
that makes a simulator take that long.

A profile maps a command code to one or two *figures* — the wire latency (from the command
being sent to its response being read, what the kernel's ``tpm_transmit_cmd`` measures) —
for commands without an HMAC session and with one, because a chip's cost for the same command
differs a lot (SLB9670 PCR_Extend: 6.4 ms bare, 24.4 ms with a salted HMAC session). Every
figure carries where it came from; a profile that cannot say so is not accepted.

No Textual and no tpm2-pytss session machinery here: the bench, the dashboard and the tests
all use this module.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tpmtop.tpm import wire

SCHEMA_ID = "tpmtop.profile/1"

# Variant keys inside one command's entry. "any" applies when the specific one is absent.
NO_SESSION = "no_session"
HMAC_SESSION = "hmac_session"
ANY = "any"
VARIANTS = (NO_SESSION, HMAC_SESSION, ANY)

# Session handle types (top byte): 0x02 HMAC session, 0x03 policy session. A password
# authorization (TPM_RS_PW, 0x40000009) is *not* a session for a chip's costs: it needs no
# HMAC, no nonce and no session slot.
_SESSION_TYPES = (0x02, 0x03)


def has_hmac_session(sessions: Iterable[tuple[int, Any]]) -> bool:
    return any((h >> 24) in _SESSION_TYPES for h, _ in sessions)


def variant_of(info: wire.CommandInfo) -> str:
    return HMAC_SESSION if has_hmac_session(info.sessions) else NO_SESSION


@dataclass
class Figure:
    """One latency figure in µs: a median and, when known, a spread."""

    median_us: float
    source: dict[str, Any]
    p10_us: float | None = None
    p90_us: float | None = None
    histogram: list[list[float]] | None = None  # [[upper bound µs, count], …], bounds ascending
    min_us: float | None = None  # lower bound of the histogram's first bucket
    samples: int | None = None

    @property
    def has_spread(self) -> bool:
        return (self.p10_us is not None and self.p90_us is not None) or bool(self.histogram)

    def sample_us(self, rng: random.Random) -> float:
        """One latency drawn from the spread (the median when there is none).

        With p10/p90 the inverse CDF is piecewise linear through (0.1, p10), (0.5, median),
        (0.9, p90) and flat outside: the median and both deciles are reproduced exactly, and
        no tail is invented that the profile has no data for. Only a histogram (which has
        seen the tails) is sampled bucket by bucket, uniformly inside a bucket.
        """
        if self.p10_us is not None and self.p90_us is not None:
            u = rng.random()
            if u <= 0.1:
                return self.p10_us
            if u <= 0.5:
                return self.p10_us + (self.median_us - self.p10_us) * (u - 0.1) / 0.4
            if u <= 0.9:
                return self.median_us + (self.p90_us - self.median_us) * (u - 0.5) / 0.4
            return self.p90_us
        if self.histogram and sum(c for _, c in self.histogram) > 0:
            # Buckets can be coarse (a capture's are 4 per decade): the draw is rescaled so
            # that the histogram's own median lands on median_us, which is exact.
            mid = self._hist_quantile(0.5)
            v = self._hist_quantile(rng.random())
            return v * self.median_us / mid if mid > 0 else self.median_us
        return self.median_us

    def _hist_quantile(self, u: float) -> float:
        """Inverse CDF of the histogram, uniform inside each bucket."""
        h = self.histogram or []  # called only when there is one (sample)
        total = sum(c for _, c in h)
        cum, acc = [], 0.0
        for _, c in h:
            acc += c
            cum.append(acc)
        target = u * total
        i = min(bisect.bisect_left(cum, target), len(h) - 1)
        while i < len(h) - 1 and h[i][1] == 0:
            i += 1
        hi = h[i][0]
        lo = h[i - 1][0] if i > 0 else (self.min_us if self.min_us is not None else hi)
        before = cum[i - 1] if i > 0 else 0.0
        frac = (target - before) / h[i][1] if h[i][1] else 1.0
        return lo + (hi - lo) * min(max(frac, 0.0), 1.0)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"median_us": _num(self.median_us)}
        if self.p10_us is not None:
            d["p10_us"] = _num(self.p10_us)
        if self.p90_us is not None:
            d["p90_us"] = _num(self.p90_us)
        if self.histogram:
            d["histogram"] = [[_num(b), int(c)] for b, c in self.histogram]
        if self.min_us is not None:
            d["min_us"] = _num(self.min_us)
        if self.samples is not None:
            d["samples"] = self.samples
        d["source"] = self.source
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Figure:
        return cls(median_us=float(d["median_us"]), source=dict(d["source"]), p10_us=_opt(d.get("p10_us")),
                   p90_us=_opt(d.get("p90_us")), histogram=d.get("histogram"), min_us=_opt(d.get("min_us")),
                   samples=d.get("samples"))


def _num(v: float) -> int | float:
    v = round(float(v), 3)
    return int(v) if v == int(v) else v


def _opt(v: Any) -> float | None:
    return None if v is None else float(v)


@dataclass
class Profile:
    name: str
    chip: dict[str, Any]
    commands: dict[int, dict[str, Figure]]  # cc -> variant -> figure
    description: str = ""
    created: str | None = None
    notes: list[str] = field(default_factory=list)
    origin: str | None = None  # "built-in" or the file it was read from (not serialised)
    # cc -> why no figure exists (what was looked for): a what-if counts and marks these
    not_published: dict[int, str] = field(default_factory=dict)

    def figure(self, cc: int | None, variant: str) -> Figure | None:
        entry = self.commands.get(cc) if cc is not None else None
        if not entry:
            return None
        return entry.get(variant) or entry.get(ANY)

    def figure_for(self, info: wire.CommandInfo) -> Figure | None:
        return self.figure(info.cc, variant_of(info))

    def shaper(self, seed: int | None = None) -> Callable[[wire.CommandInfo], int | None]:
        """The transport's shaper: ns to hold each response, measured from the send.

        Commands the profile does not list are not held (the simulator's own time stands):
        better an honest "unknown" than an invented figure. Sampling uses its own
        ``random.Random``, so a seed makes runs repeat whatever else draws random numbers.
        """
        rng = random.Random(seed)
        figure_for = self.figure_for

        def shape(info: wire.CommandInfo) -> int | None:
            f = figure_for(info)
            if f is None:
                return None
            return int(f.sample_us(rng) * 1000)

        return shape

    def to_json(self) -> dict[str, Any]:
        from tpmtop.tpm import names

        d: dict[str, Any] = {"schema": SCHEMA_ID, "name": self.name}
        if self.description:
            d["description"] = self.description
        if self.created:
            d["created"] = self.created
        d["chip"] = self.chip
        cmds = {}
        for cc in sorted(self.commands):
            cmds[names.cc_short(cc)] = {v: f.to_json() for v, f in self.commands[cc].items()}
        d["commands"] = cmds
        if self.not_published:
            d["not_published"] = {names.cc_short(cc): why for cc, why in sorted(self.not_published.items())}
        if self.notes:
            d["notes"] = list(self.notes)
        return d
