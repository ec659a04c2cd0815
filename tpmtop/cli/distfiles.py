"""The files installed beside the package, generated from the argparse definitions: a man page
for ``tpmtop`` and one per subcommand (``tpmtop-bench.1`` …, as tpm2-tools ships one per tool),
with argparse-manpage, and bash/zsh/fish completions, with shtab.

Build time only: ``setup.py`` writes them into the wheel (``share/man/man1``,
``share/bash-completion/completions``, ``share/zsh/site-functions``,
``share/fish/vendor_completions.d``) and ``make man completions`` into ``build/share``:

    python -m tpmtop.cli.distfiles [--man] [--completions] SHARE_DIR

Nothing here is imported when tpmtop runs; argparse-manpage and shtab are build requirements
(and test extras), imported inside the functions. Everything comes from
:func:`tpmtop.cli.build_parser`, so an option added to a subcommand is in the next build's
man page and completions without a change here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tpmtop import __version__
from tpmtop.cli import SUBCOMMANDS, build_parser

MAN_DIR = Path("man/man1")
COMPLETION_FILES = {  # shell -> where its completion loader looks, under a prefix's share/
    "bash": Path("bash-completion/completions/tpmtop"),
    "zsh": Path("zsh/site-functions/_tpmtop"),
    "fish": Path("fish/vendor_completions.d/tpmtop.fish"),
}

# Arguments whose value is a path, known by their metavar: completed with file (or directory)
# names. A new option with one of these metavars is completed so with no change here.
_FILE_METAVARS = {"FILE", "PATH", "PEM", "CAPTURE", "CAPTURE.json", "TRACE", "HEX|FILE", "NAME|FILE"}
_DIR_METAVARS = {"DIR"}


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _manpage(parser: argparse.ArgumentParser, name: str, description: str) -> Any:
    """argparse-manpage's page for ``parser``, titled ``name``. Its header and NAME line are set
    as attributes, as the library asks; the date is today's, or SOURCE_DATE_EPOCH's for a
    reproducible build."""
    from argparse_manpage.manpage import Manpage

    page = Manpage(parser)
    page.prog = name  # the title and NAME; the synopsis keeps the parser's `tpmtop bench`
    page.source = f"tpmtop {__version__}"
    page.manual = "tpmtop manual"
    page.description = description
    return page


def man_pages() -> dict[str, str]:
    """File name -> roff text: ``tpmtop.1``, then ``tpmtop-<subcommand>.1`` for each subcommand."""
    pages: dict[str, str] = {}
    names = list(SUBCOMMANDS)

    # tpmtop.1: the dashboard's options and the list of subcommands (each has its own page).
    # From the lazily built parser: an eager one would put every subcommand's options here too.
    top = build_parser()
    page = _manpage(top, "tpmtop", "see what a TPM 2.0 is doing (the dashboard and its subcommands)")
    sub = _subparsers(top)
    sub.help = argparse.SUPPRESS  # listed as COMMANDS below, not as an empty section per command
    page.add_section("commands", "=", "\n".join(
        f".TP\n.BR tpmtop-{n} (1)\n{_roff(SUBCOMMANDS[n][1])}" for n in names))
    page.add_section("see also", "=", ",\n".join([*(f".BR tpmtop-{n} (1)" for n in names), ".BR tpm2 (1)",
                                                    ".BR swtpm (8)"]))
    pages["tpmtop.1"] = str(page)

    eager = build_parser(eager=True)
    for name, sp in _subparsers(eager).choices.items():
        page = _manpage(sp, f"tpmtop-{name}", SUBCOMMANDS[name][1])
        page.add_section("see also", "=", ".BR tpmtop (1)")
        pages[f"tpmtop-{name}.1"] = str(page)
    return {name: _guard_control_lines(text) for name, text in pages.items()}


# The requests argparse-manpage writes; any other line that begins with '.' or "'" is help text
# that roff would take for a request (--tls-key's help begins "... and this private key").
_REQUESTS = {"TH", "SH", "SS", "TP", "B", "BR", "I", "IR", "RS", "RE", "nf", "fi", "UR", "UE", "PP", "br"}


def _guard_control_lines(text: str) -> str:
    def guard(line: str) -> str:
        if line.startswith("'") or (line.startswith(".") and line[1:].split(" ", 1)[0] not in _REQUESTS):
            return "\\&" + line
        return line

    return "\n".join(guard(line) for line in text.split("\n"))


def _roff(text: str) -> str:
    """Plain text for a roff line, as argparse-manpage escapes the text it formats itself (a
    leading '.' is left to _guard_control_lines)."""
    return text.replace("\\", "\\e").replace("-", "\\-")


def completions() -> dict[str, str]:
    """Shell -> completion script, for bash, zsh and fish."""
    import shtab

    parser = build_parser(eager=True)
    _mark_paths(parser, shtab.FILE, shtab.DIRECTORY)
    return {shell: shtab.complete(parser, shell=shell) for shell in COMPLETION_FILES}


def _mark_paths(parser: argparse.ArgumentParser, file: object, directory: object) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in action.choices.values():
                _mark_paths(sp, file, directory)
        elif action.metavar in _FILE_METAVARS:
            action.complete = file  # type: ignore[attr-defined]  # shtab's hook
        elif action.metavar in _DIR_METAVARS:
            action.complete = directory  # type: ignore[attr-defined]


def write(share: Path, *, man: bool = True, shells: bool = True) -> list[Path]:
    """Write under ``share`` (a prefix's share/ directory); return the files written."""
    out: list[Path] = []
    if man:
        (share / MAN_DIR).mkdir(parents=True, exist_ok=True)
        for name, text in man_pages().items():
            out.append(_write(share / MAN_DIR / name, text))
    if shells:
        for shell, text in completions().items():
            path = share / COMPLETION_FILES[shell]
            path.parent.mkdir(parents=True, exist_ok=True)
            out.append(_write(path, text))
    return out


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tpmtop.cli.distfiles",
                                 description="write tpmtop's man pages and shell completions under SHARE_DIR")
    ap.add_argument("share", metavar="SHARE_DIR", type=Path, help="e.g. build/share or /usr/local/share")
    ap.add_argument("--man", action="store_true", help="only the man pages")
    ap.add_argument("--completions", action="store_true", help="only the completions")
    args = ap.parse_args(argv)
    both = not (args.man or args.completions)
    for path in write(args.share, man=both or args.man, shells=both or args.completions):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
