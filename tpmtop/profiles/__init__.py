"""Chip latency profiles: make a simulator answer as slowly as a real chip (issue 7).

The names below are loaded on first use (PEP 562): the CLI's parser imports
``tpmtop.profiles.apply`` for ``--profile``, and the loader (JSON schema, dataclasses, the
built-in profiles) is not worth ~25 ms of every ``tpmtop --version``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers only: at run time the names load on first use
    from tpmtop.profiles.loader import BUILTIN, load_profile, write_profile
    from tpmtop.profiles.profile import Figure, Profile

__all__ = ["BUILTIN", "Figure", "Profile", "load_profile", "write_profile"]
_WHERE = {"BUILTIN": "loader", "load_profile": "loader", "write_profile": "loader",
          "Figure": "profile", "Profile": "profile"}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value
