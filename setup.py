"""setuptools' build (everything else is in pyproject.toml), plus one step: the man pages and the
bash/zsh/fish completions, generated from the command line's parser by tpmtop/cli/distfiles.py,
go into the wheel as data files under the install prefix's share/ (share/man/man1,
share/bash-completion/completions, share/zsh/site-functions, share/fish/vendor_completions.d).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import ClassVar

from setuptools import Command, setup
from setuptools.command.build import build
from setuptools.warnings import InformationOnly

HERE = Path(__file__).resolve().parent

# `pip install -e .` (scripts/bootstrap.sh) would end on setuptools' notice that a folder in the
# working directory named like the package may shadow it: here that folder is the package.
warnings.filterwarnings("ignore", message="Editable installation", category=InformationOnly)


class build_distfiles(Command):
    description = "man pages and shell completions from tpmtop's argparse definitions"
    user_options: ClassVar[list[tuple[str, str | None, str]]] = []

    def initialize_options(self) -> None:
        self.build_base: str | None = None

    def finalize_options(self) -> None:
        self.set_undefined_options("build", ("build_base", "build_base"))

    def run(self) -> None:
        # The parser is argparse and tpmtop's own modules only (tests/test_import_hygiene.py
        # keeps it so), so the source tree imports without tpmtop's dependencies installed.
        sys.path.insert(0, str(HERE))
        try:
            from tpmtop.cli.distfiles import write
        finally:
            sys.path.remove(str(HERE))
        assert self.build_base is not None
        share = Path(self.build_base) / "share"
        by_dir: dict[str, list[str]] = {}
        for path in write(share):
            target = Path("share") / path.parent.relative_to(share)
            by_dir.setdefault(str(target), []).append(os.path.relpath(path, HERE))
        self.distribution.data_files = sorted(by_dir.items())


class build_with_distfiles(build):
    sub_commands: ClassVar = [*build.sub_commands, ("build_distfiles", None)]


setup(cmdclass={"build": build_with_distfiles, "build_distfiles": build_distfiles})
