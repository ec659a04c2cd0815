"""Reading, validating and writing ``tpmtop.profile/1`` files; the built-in profiles.

Any problem with a profile file is a :class:`UsageError` (exit 2) worded as one line that
names the file and the place in it: a profile is user input, and a bad one must never get
as far as a TPM.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from collections.abc import Iterable
from importlib import resources
from typing import Any, cast

from tpmtop import strictjson
from tpmtop.errors import UsageError
from tpmtop.profiles.profile import SCHEMA_ID, Figure, Profile
from tpmtop.profiles.published import CHIPS

# every chip of wolfTPM's table (tpmtop.profiles.published), slb9670 first
BUILTIN = tuple(c.name for c in CHIPS)


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    text = resources.files("tpmtop").joinpath("schema/profile-1.json").read_text("utf-8")
    return cast("dict[str, Any]", json.loads(text))


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema())


def _where(err: Any) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
    return path.lstrip(".") or "(top level)"


def validate(doc: Any, label: str) -> None:
    """Schema check plus what a schema cannot say; raises UsageError with one line."""
    from jsonschema.exceptions import best_match

    bad = _non_finite(doc)
    if bad is not None:  # a document built in memory (derive, the dashboard), not parsed
        raise UsageError(f"profile {label}: {bad}: not a finite number")

    if isinstance(doc, dict) and doc.get("schema") not in (None, SCHEMA_ID) and isinstance(doc.get("schema"), str):
        raise UsageError(f"profile {label}: schema is '{doc['schema']}', expected '{SCHEMA_ID}'"
                         + (" (that is a capture: use `tpmtop profile from-capture`)"
                            if doc["schema"].startswith("tpmtop.capture") else ""))
    err = best_match(_validator().iter_errors(doc))
    if err is not None:
        msg = err.message if len(err.message) <= 160 else err.message[:157] + "..."
        raise UsageError(f"profile {label}: {_where(err)}: {msg}")

    seen: dict[int, str] = {}
    for key, entry in doc["commands"].items():
        cc = _cc_of(key)
        if cc is None:
            raise UsageError(f"profile {label}: commands.{key}: unknown TPM command "
                             "(use the spec name without TPM2_CC_, e.g. PCR_Extend, or 0x%08x)")
        if cc in seen:
            raise UsageError(f"profile {label}: commands.{key}: same command as commands.{seen[cc]}")
        seen[cc] = key
        for variant, fig in entry.items():
            here = f"commands.{key}.{variant}"
            p10, med, p90 = fig.get("p10_us"), fig["median_us"], fig.get("p90_us")
            if p10 is not None and not p10 <= med <= p90:
                raise UsageError(f"profile {label}: {here}: needs p10_us ≤ median_us ≤ p90_us "
                                 f"(got {p10}, {med}, {p90})")
            hist = fig.get("histogram")
            if hist:
                bounds = [b for b, _ in hist]
                if any(b2 <= b1 for b1, b2 in itertools.pairwise(bounds)):
                    raise UsageError(f"profile {label}: {here}.histogram: bucket bounds must ascend")
                if not any(c for _, c in hist):
                    raise UsageError(f"profile {label}: {here}.histogram: all counts are zero")
    for key in doc.get("not_published", {}):
        cc = _cc_of(key)
        if cc is None:
            raise UsageError(f"profile {label}: not_published.{key}: unknown TPM command")
        if cc in seen:
            raise UsageError(f"profile {label}: not_published.{key}: also has a figure (commands.{seen[cc]})")


def _non_finite(obj: Any, path: str = "") -> str | None:
    if isinstance(obj, float):
        return None if obj - obj == 0.0 else (path or "(top level)")
    items: Iterable[tuple[Any, Any]]
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, list):
        items = enumerate(obj)
    else:
        return None
    for k, v in items:
        hit = _non_finite(v, f"{path}[{k}]" if isinstance(k, int) else f"{path}.{k}".lstrip("."))
        if hit is not None:
            return hit
    return None


def _cc_of(key: str) -> int | None:
    from tpmtop.tpm import names

    if key.startswith("0x"):
        return int(key, 16)
    return names.cc_from_name(key)


def from_json(doc: dict[str, Any], label: str = "(document)", origin: str | None = None) -> Profile:
    try:
        validate(doc, label)
    except RecursionError:  # nesting the parser took but the schema walk does not
        raise UsageError(f"profile {label}: JSON nested too deeply to be a profile") from None
    from tpmtop.textsafe import safe_tree

    doc = safe_tree(doc)  # from a file: its strings are shown (profile show, headers) as they are
    # Every key names a command (validate() refused the others).
    cmds = {cast(int, _cc_of(k)): {v: Figure.from_json(f) for v, f in entry.items()}
            for k, entry in doc["commands"].items()}
    missing = {cast(int, _cc_of(k)): why for k, why in doc.get("not_published", {}).items()}
    return Profile(name=doc["name"], chip=dict(doc["chip"]), commands=cmds, description=doc.get("description", ""),
                   created=doc.get("created"), notes=list(doc.get("notes", [])), origin=origin,
                   not_published=missing)


def load_builtin(name: str) -> Profile:
    text = resources.files("tpmtop.profiles").joinpath(f"{name}.json").read_text("utf-8")
    return from_json(parse(text, f"built-in '{name}'"), f"built-in '{name}'", origin="built-in")


def load_file(path: str) -> Profile:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise UsageError(f"profile {path}: no such file (built-in profiles: {', '.join(BUILTIN)})") from None
    except IsADirectoryError:
        raise UsageError(f"profile {path}: is a directory") from None
    except UnicodeDecodeError:
        raise UsageError(f"profile {path}: not a text file (expected tpmtop.profile/1 JSON)") from None
    except OSError as e:
        raise UsageError(f"profile {path}: cannot read: {e.strerror}") from None
    return from_json(parse(text, path), path, origin=path)


def parse(text: str, label: str) -> Any:
    """JSON text of a profile: NaN, Infinity and numbers beyond a double are refused here
    (a schema's "minimum" does not catch NaN, and a NaN median would reach the TPM shaper),
    and so is nesting too deep for Python's parser. Every failure: UsageError, one line."""
    try:
        return strictjson.loads(text)
    except strictjson.NotFinite as e:
        raise UsageError(f"profile {label}: {str(e)[:40]} is not a finite number "
                         f"(a profile's figures are microseconds)") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"profile {label}: not JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise UsageError(f"profile {label}: JSON nested too deeply to be a profile") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise UsageError(f"profile {label}: not a profile: {str(e).split(';')[0][:80]}") from None


def load_profile(spec: str) -> Profile:
    """``spec`` is a built-in name (``slb9670``) or a file path."""
    if spec in BUILTIN and not os.path.exists(spec):
        return load_builtin(spec)
    if os.sep in spec or spec.endswith(".json") or os.path.exists(spec):
        return load_file(spec)
    raise UsageError(f"no profile '{spec}': not a built-in ({', '.join(BUILTIN)}) and no such file")


def dumps(profile: Profile) -> str:
    doc = profile.to_json()
    validate(doc, profile.name)  # never write a file we would refuse to read
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    # One histogram bucket per line ([bound, count]), not four: profiles are read by people.
    text = _PAIR.sub(lambda m: f"[{m.group(1)}, {m.group(2)}]", text)
    return str(text) + "\n"


_PAIR = __import__("re").compile(r"\[\s*(-?[0-9.eE+-]+),\s*(-?[0-9.eE+-]+)\s*\]")


def write_profile(path: Any, profile: Profile) -> None:
    """By the output rules of tpmtop.output (``path`` may be a checked Output): atomically for
    a regular file (a half-written profile must not replace a good one), through for a pipe or
    device, ``-`` for stdout; a late failure keeps the profile in a fallback file."""
    from tpmtop.output import Output

    text = dumps(profile)
    out = path if isinstance(path, Output) else Output(path)
    out.write_keeping(lambda: [text.encode("utf-8")], label="profile")
