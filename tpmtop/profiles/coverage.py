"""What each built-in chip profile covers (``tpmtop profile list``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpmtop.profiles.loader import BUILTIN, load_builtin
from tpmtop.profiles.profile import Profile
from tpmtop.sessions.modes import MODE_INFO
from tpmtop.tpm import names


@dataclass
class Coverage:
    name: str
    model: str
    published: int  # figures (command × session variant) of kind "published"
    estimated: int  # any other kind (estimated, capture, trace, recorded)
    not_published: list[str] = field(default_factory=list)  # commands the sources give nothing for
    modes: list[str] = field(default_factory=list)  # session modes all of whose commands it prices
    all_modes: int = len(MODE_INFO)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "published_figures": self.published,
                "estimated_figures": self.estimated, "not_published": self.not_published,
                "modes_priced": self.modes}


def of(p: Profile) -> Coverage:
    from tpmtop.profiles.whatif import letter_us

    figs = [f for entry in p.commands.values() for f in entry.values()]
    pub = sum(1 for f in figs if f.source.get("kind") == "published")
    modes = [str(m) for m, info in MODE_INFO.items() if all(letter_us(p, x) is not None for x in info.once + info.each)]
    return Coverage(p.name, str(p.chip.get("model", "")), pub, len(figs) - pub,
                    sorted(names.cc_short(cc) for cc in p.not_published), modes)


def coverage() -> list[Coverage]:
    return [of(load_builtin(n)) for n in BUILTIN]
