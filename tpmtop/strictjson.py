"""JSON numbers as a file format means them: finite.

Python's ``json`` accepts ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON at all) and turns
``1e400`` into infinity. In a capture or a profile any of them poisons every figure computed
from it (a NaN median reached the TPM shaper as "cannot convert float NaN to integer"), so
tpmtop's readers decode with the hooks here and say which number it was.
No dependencies (the lowest layer).
"""

from __future__ import annotations

import json
from typing import Any, NoReturn


class NotFinite(ValueError):
    """A number that is not finite; ``str()`` is its text as written."""


def _no_constant(name: str) -> NoReturn:
    raise NotFinite(name)


def _finite_float(text: str) -> float:
    v = float(text)
    if v - v != 0.0:  # inf (1e400) or nan
        raise NotFinite(text)
    return v


def decoder() -> json.JSONDecoder:
    """A decoder that raises :class:`NotFinite` for NaN, ±Infinity and overflowing numbers."""
    return json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def loads(text: str) -> Any:
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
