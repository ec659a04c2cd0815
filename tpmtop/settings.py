"""Every tuning knob tpmtop has, in one typed object: defaults, a file, ``TPMTOP_*`` and ``--set``.

A knob is a choice the code could make either way and that changes how fast or how exactly
tpmtop measures, not what it measures: moving a private swtpm's threads, polling for an
answer instead of sleeping, spinning out a latency profile's hold, a second process for an
export. Each has an off switch here, each is documented in docs/settings.md (generated from
the field descriptions below and checked by a test), and the values in force are written into
every capture (``tuning``, :func:`in_force`), so two captures can be told apart by more than
their kernel.

Where a value comes from, later beating earlier:

1. the defaults below — a knob is on by default only where ``benchmarks/tuning.py`` measured it
   helping both session engines, idle and under two busy loops, in one run (docs/benchmarks.md);
2. the file ``$TPMTOP_SETTINGS_FILE``, else ``$XDG_CONFIG_HOME/tpmtop/settings.toml`` (else
   ``~/.config/tpmtop/settings.toml``), if it exists: TOML, one ``name = value`` per knob;
3. the environment: ``TPMTOP_<NAME>`` (``TPMTOP_PLACEMENT=1``, ``TPMTOP_BUSY_POLL=0``);
4. the command line: ``--set NAME=VALUE``, repeatable, before or after the subcommand.

The model is msgspec's ``Struct`` (a dependency already, for captures): it types and checks
the values from all three sources (``"16"`` from the environment becomes 16, ``"yes"`` for a
number is refused) at a fraction of pydantic-settings' import time, which every ``tpmtop
info`` over SSH would pay. No Textual here: the core reads it.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from tpmtop.errors import UsageError

ENV_PREFIX = "TPMTOP_"
FILE_ENV = "TPMTOP_SETTINGS_FILE"


def _knob(description: str, **limits: Any) -> Any:
    return msgspec.Meta(description=description, **limits)


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The knobs; see the module's docstring for where each value comes from."""

    placement: Annotated[bool, _knob(
        "Move a private swtpm's threads (one tpmtop started itself, never another program) to "
        "the CPU of the thread that sends it a command, and hold a caller that keeps moving on "
        "that CPU during each exchange (tpmtop/tpm/placement.py). Off by default: measured on "
        "2026-12-06 it helped neither engine both idle and under two busy loops (esys reuse "
        "×0.70–2.43 idle, ×0.74–1.29 under load from run to run; docs/benchmarks.md).")] = False
    placement_warm: Annotated[int, _knob(
        "Placement: commands sent before swtpm is first moved (a short command such as "
        "`tpmtop info` never moves it).", ge=0)] = 16
    placement_bounce_after: Annotated[int, _knob(
        "Placement: a move within this many commands of the last one counts as a bounce.", ge=0)] = 8
    placement_bounces: Annotated[int, _knob(
        "Placement: this many bounces in a row and the caller is held on swtpm's CPU during "
        "each exchange.", ge=1)] = 3
    placement_hold: Annotated[int, _knob(
        "Placement: for this many commands, then it is let go to see whether it still moves.", ge=1)] = 2048
    busy_poll: Annotated[bool, _knob(
        "Poll (without sleeping) for an answer expected within busy_poll_cap_us, where polling "
        "measured faster than sleeping for that command code (tpmtop/tpm/busypoll.py); the "
        "proxy polls for the rest of a request and a busy client's next one. Never on one CPU. "
        "Off by default: measured on 2026-12-06 it helped neither engine both idle and under "
        "two busy loops (with an external swtpm, idle, ×1.21–1.82 slower; docs/benchmarks.md).")] = False
    busy_poll_cap_us: Annotated[int, _knob(
        "Busy poll: the longest a receive polls before it sleeps, in µs.", ge=1, le=10_000)] = 200
    hold_clock: Annotated[bool, _knob(
        "A latency profile's hold ends on time: the thread's timer slack goes to 1 ns and the "
        "last stretch before the deadline is spun on the clock (tpmtop/tpm/holdclock.py). "
        "Off: a plain time.sleep, late by the scheduler's wake-up (benchmarks/shaper_bias.py).")] = True
    export_split: Annotated[bool, _knob(
        "`tpmtop export --format chrome-trace` converts half of a large capture's events in a "
        "second process (on a machine with two CPUs or more). Off by default: measured on "
        "2026-12-06 it made a 1,000,000-event export ×1.09 slower without busy loops and ×0.74 "
        "with two (benchmarks/export.py --split-knob; docs/benchmarks.md).")] = False
    tpm_deadline: Annotated[float, _knob(
        "Seconds tpmtop waits for the TPM to answer one command before it reports the command "
        "and the wait and gives up (exit status 1): a stalled TPM is a finding, not a hang. The "
        "kernel gives a listed command at most 2 s (TPM_LONG) and 120 s to one it does not "
        "list; 30 s leaves a loaded machine and a queue at a resource manager room. "
        "--timeout SECONDS replaces this and tpm_deadline_long for one run.", gt=0, le=86400)] = 30.0
    tpm_deadline_long: Annotated[float, _knob(
        "Seconds for the commands the kernel itself waits longest for (CreatePrimary, Create, "
        "CreateLoaded, VerifySignature: its TPM_LONG_LONG, 300 s before Linux 6.18): a slow "
        "chip's RSA key generation takes seconds to tens of seconds.", gt=0, le=86400)] = 300.0
    proxy_max_turn_s: Annotated[float, _knob(
        "`tpmtop proxy` over a raw TPM: the longest a client holds its turn while another client "
        "waits, in seconds; then the waiting client gets the TPM after the holder's command in "
        "flight, and the holder waits behind it (a client polling every second otherwise kept "
        "the turn until it exited: issue 50). 0: off, a turn ends only when its holder leaves or "
        "is idle for --turn-idle. A holder cut short may find the TPM's object or session slots "
        "taken by the next client (TPM_RC_OBJECT_MEMORY 0x902).", ge=0)] = 10.0
    refresh_s: Annotated[float, _knob(
        "The dashboard's refresh interval at start, in seconds ([ and ] change it live). 0.2: at "
        "most 5 frames a second, so a paused dashboard stays idle; each frame costs the UI thread "
        "a few ms (benchmarks/ui_load.py).", gt=0, le=60)] = 0.2


NAMES: tuple[str, ...] = Settings.__struct_fields__


def describe() -> list[tuple[str, str, Any, str]]:
    """(name, type, default, description) of every knob, in declaration order: docs/settings.md
    is written from this (tests/unit/test_settings.py checks the page lists each one)."""
    info = msgspec.inspect.type_info(Settings)
    assert isinstance(info, msgspec.inspect.StructType)
    out = []
    for f in info.fields:
        t = f.type
        desc = ""
        if isinstance(t, msgspec.inspect.Metadata):
            desc = str((t.extra_json_schema or {}).get("description", ""))
            t = t.type
        out.append((f.name, type(t).__name__.removesuffix("Type").lower(), f.default, desc))
    return out


def settings_file(env: Mapping[str, str]) -> Path:
    given = env.get(FILE_ENV)
    if given:
        return Path(given)
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tpmtop" / "settings.toml"


_BOOL_WORDS = {"on": "true", "yes": "true", "off": "false", "no": "false"}


def _convert(values: Mapping[str, Any], where: str, base: Settings, *, strings: bool) -> Settings:
    values = {k: _BOOL_WORDS.get(v.lower(), v) if strings and isinstance(v, str) and
              isinstance(getattr(base, k), bool) else v for k, v in values.items()}
    merged = msgspec.structs.asdict(base) | values
    try:
        return msgspec.convert(merged, Settings, strict=not strings)
    except msgspec.ValidationError as e:
        # "Expected `int`, got `str` - at `$.placement_hold`": name the knob and the value given
        name = str(e).rpartition("$.")[2].rstrip("`")
        got = f" {values[name]!r}" if name in values else ""
        raise UsageError(f"{where}: {name} ={got}: {str(e).partition(' - at ')[0]}") from None


def load(env: Mapping[str, str] | None = None, flags: Iterable[str] = ()) -> Settings:
    """Defaults, then the file, the environment and ``--set`` flags (``NAME=VALUE``)."""
    env = os.environ if env is None else env
    s = Settings()
    path = settings_file(env)
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        text = None
    except OSError as e:
        raise UsageError(f"cannot read the settings file {path}: {e.strerror}") from None
    if text is not None:
        try:
            doc = tomllib.loads(text.decode("utf-8", "replace"))
        except tomllib.TOMLDecodeError as e:
            raise UsageError(f"{path}: not valid TOML: {e}") from None
        unknown = sorted(set(doc) - set(NAMES))
        if unknown:
            raise UsageError(f"{path}: unknown setting {unknown[0]!r} (known: {', '.join(NAMES)})")
        s = _convert(doc, str(path), s, strings=False)
    from_env = {n: env[ENV_PREFIX + n.upper()] for n in NAMES if ENV_PREFIX + n.upper() in env}
    if from_env:
        s = _convert(from_env, "the environment (" + ", ".join(ENV_PREFIX + n.upper() for n in from_env) + ")",
                     s, strings=True)
    given: dict[str, str] = {}
    for flag in flags:
        name, eq, value = flag.partition("=")
        name = name.strip().replace("-", "_")
        if not eq or name not in NAMES:
            raise UsageError(f"--set {flag}: expected NAME=VALUE with NAME one of {', '.join(NAMES)}")
        given[name] = value.strip()
    if given:
        s = _convert(given, "--set", s, strings=True)
    return s


_current: Settings | None = None


def current() -> Settings:
    """The settings in force in this process: loaded from the file and the environment the
    first time they are asked for, unless :func:`use` set them first (the command line does)."""
    global _current
    if _current is None:
        _current = load()
    return _current


def use(settings: Settings | None) -> None:
    """Put ``settings`` in force (None: load them again when next asked). Read when a
    transport, a swtpm or an export is made: set them before opening the TPM."""
    global _current
    _current = settings


def in_force() -> dict[str, Any]:
    """The knobs in force, as a capture's ``tuning`` member records them."""
    return msgspec.structs.asdict(current())
