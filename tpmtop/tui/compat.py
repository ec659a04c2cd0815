"""The Textual hooks tpmtop cannot do without, each with the check that fails, at start-up and
in ``tests/unit/test_textual_public_api.py``, when a Textual release changes it.

There are none: the dashboard uses Textual's public API only. A hook added here names its
module and a check of the exact attribute it uses; the test walks the TUI's code for any private
Textual name used outside this file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Hook:
    module: str  # where the attribute lives: "textual.widgets._data_table"
    why: str  # what tpmtop needs it for, and why no public route does it
    check: Callable[[ModuleType], bool]  # True while the attribute is as tpmtop uses it


HOOKS: tuple[Hook, ...] = ()


def check_hooks() -> list[str]:
    """What does not hold any more (start-up: the dashboard says so and refuses to start)."""
    import importlib

    broken = []
    for hook in HOOKS:
        try:
            ok = hook.check(importlib.import_module(hook.module))
        except Exception:
            ok = False
        if not ok:
            broken.append(f"{hook.module}: {hook.why}")
    return broken
