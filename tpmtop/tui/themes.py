"""Themes as files (``themes/*.toml`` at the top of the repository) and the remembered choice.

The files are found through ``importlib.resources`` as ``tpmtop/themes``: in the repository that
is a symbolic link to the top-level ``themes/`` (the one source), and the wheel carries the files
themselves as package data, so a checkout, an editable install and ``pip install`` all see the
same four. Each file is parsed with ``tomllib``, every colour validated with ``Color.parse``, and
turned into a ``textual.theme.Theme`` whose ``variables`` carry tpmtop's meaning-carrying colours
(``$latency-slow``, ``$handle-foreign`` …). A bad file is skipped with a notice, never fatal;
without a good ``dark.toml`` the built-in copy of the dark theme below is used so the dashboard
still has its colours.

The choice is remembered in ``$XDG_CONFIG_HOME/tpmtop/dashboard.toml`` (``~/.config`` when
unset). ``NO_COLOR`` needs nothing here: Textual strips colour when it is set.
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from dataclasses import dataclass, field
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from textual.theme import Theme

DEFAULT_THEME = "dark"

# Defaults for the app-specific variables (also the fallback when a theme omits one).
VARIABLE_DEFAULTS = {
    "latency-fast": "#5fd787",
    "latency-mid": "#ffd75f",
    "latency-slow": "#ff875f",
    "handle-ours": "#5fafff",
    "handle-foreign": "#ffaf5f",
    "handle-new": "#5fd787",
    "handle-gone": "#ff5f5f",
    "gauge-ok": "#5fd787",
    "gauge-warn": "#ffd75f",
    "gauge-full": "#ff5f5f",
    "bar-baseline": "#5fafff",
    "bar-session": "#ff875f",
}

BUILTIN_DARK = {
    "name": "dark",
    "dark": True,
    "colors": {"primary": "#5fafff", "secondary": "#af87ff", "accent": "#ffaf5f",
               "warning": "#ffd75f", "error": "#ff5f5f", "success": "#5fd787",
               "foreground": "#e4e4e4", "background": "#121418", "surface": "#1a1d23",
               "panel": "#252a33"},
    "variables": dict(VARIABLE_DEFAULTS),
}

COLOR_FIELDS = ("primary", "secondary", "accent", "warning", "error", "success", "foreground",
                "background", "surface", "panel", "boost")


class ThemeError(ValueError):
    pass


@dataclass
class LoadedThemes:
    themes: list[Theme]  # textual.theme.Theme, in file-name order, the default first
    notices: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.themes]


def theme_from_dict(data: dict[str, Any], fallback_name: str) -> Theme:
    from textual.color import Color, ColorParseError
    from textual.theme import Theme

    name = str(data.get("name") or fallback_name)
    colors = data.get("colors", {})
    variables = data.get("variables", {})
    if not isinstance(colors, dict) or not isinstance(variables, dict):
        raise ThemeError("[colors] and [variables] must be tables")
    if "primary" not in colors:
        raise ThemeError("[colors] needs at least 'primary'")
    for key, value in list(colors.items()) + list(variables.items()):
        try:
            Color.parse(str(value))
        except ColorParseError:
            raise ThemeError(f"'{key}' = {value!r} is not a colour") from None
    unknown = set(colors) - set(COLOR_FIELDS)
    if unknown:
        raise ThemeError(f"unknown colour field(s) in [colors]: {', '.join(sorted(unknown))}")
    fields: dict[str, Any] = {k: str(v) for k, v in colors.items()}  # COLOR_FIELDS only, checked above
    return Theme(name=name, dark=bool(data.get("dark", True)),
                 variables={**VARIABLE_DEFAULTS, **{k: str(v) for k, v in variables.items()}}, **fields)


@runtime_checkable
class CyclesThemes(Protocol):
    """An app that cycles through tpmtop's themes (tpmtop.tui.app.TpmtopApp)."""

    def cycle_theme(self) -> None: ...


def shipped_themes() -> Traversable:
    """The theme files installed with tpmtop (package data ``tpmtop/themes``)."""
    return files("tpmtop") / "themes"


def load_themes(directory: Traversable | None = None) -> LoadedThemes:
    directory = shipped_themes() if directory is None else directory
    out = LoadedThemes([])
    found = [p for p in directory.iterdir() if p.name.endswith(".toml")] if directory.is_dir() else []
    for path in sorted(found, key=lambda p: p.name):
        try:
            with path.open("rb") as f:
                data = tomllib.load(f)
            out.themes.append(theme_from_dict(data, path.name.removesuffix(".toml")))
        except (OSError, tomllib.TOMLDecodeError, ThemeError) as e:
            out.notices.append(f"theme file {path.name} skipped: {e}")
    if DEFAULT_THEME not in out.names:
        out.themes.append(theme_from_dict(BUILTIN_DARK, DEFAULT_THEME))
    out.themes.sort(key=lambda t: (t.name != DEFAULT_THEME, t.name))
    return out


# -- the remembered choice ------------------------------------------------------------------
def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "tpmtop"


def remembered_theme() -> str | None:
    try:
        with open(config_dir() / "dashboard.toml", "rb") as f:
            value = tomllib.load(f).get("theme")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return value if isinstance(value, str) and value else None


def remember_theme(name: str) -> str | None:
    """Write the choice atomically; return a notice on failure (a read-only home is no error)."""
    d = config_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".dashboard-", suffix=".toml", dir=d)
        with os.fdopen(fd, "w") as f:
            f.write(f"# written by tpmtop when you switch theme\ntheme = {_toml_str(name)}\n")
        os.replace(tmp, d / "dashboard.toml")
    except OSError as e:
        return f"could not remember the theme in {d}: {e.strerror or e}"
    return None


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
