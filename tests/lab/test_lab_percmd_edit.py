"""scripts/lab-percmd-edit.sh, the build-time edit that makes the lab's 6.12-percmd kernel: it
removes the continueSession that 6.12's lazy flush (df745e25098d) forces on in
tpm_buf_append_hmac_session(), and nothing else; on a source it does not fit it refuses in one
line. Light (part of `make test`); the run on Debian's real file needs the source the lab
unpacks (`make lab-kernels`) and skips, saying so, without it."""

from __future__ import annotations

import difflib
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

EDIT = str(REPO / "scripts" / "lab-percmd-edit.sh")
FORCED = "\tattributes |= TPM2_SA_CONTINUE_SESSION;"
COMMENT = "\t/* The first write to /dev/tpm{rm0} will flush the session. */"

# a C fragment written for this test: the shape the edit looks for, and the same statement in
# another function, which it must leave alone
FRAGMENT = f"""static void other(u8 attributes)
{{
{FORCED}
}}

void tpm_buf_append_hmac_session(struct tpm_chip *chip, struct tpm_buf *buf,
\t\t\t\t u8 attributes, u8 *passphrase,
\t\t\t\t int passphrase_len)
{{
\tif (!tpm2_chip_auth(chip))
\t\treturn;

{COMMENT}
{FORCED}

\tauth->attrs = attributes;
}}
"""


def _edit(text: str) -> subprocess.CompletedProcess:
    return subprocess.run([EDIT], input=text, capture_output=True, text=True)


def test_the_edit_drops_the_forced_continue_session_in_that_function_only():
    p = _edit(FRAGMENT)
    assert p.returncode == 0, p.stderr
    body = p.stdout.split("void tpm_buf_append_hmac_session(")[1]
    assert FORCED not in body and COMMENT not in body
    assert "\tauth->attrs = attributes;" in body  # the caller's attributes are what is sent
    assert p.stdout.split("void tpm_buf_append_hmac_session(")[0].count(FORCED) == 1  # other() untouched
    removed = [ln for ln in difflib.ndiff(FRAGMENT.splitlines(), p.stdout.splitlines()) if ln.startswith("- ")]
    assert removed == ["- " + COMMENT, "- " + FORCED]


@pytest.mark.parametrize("text", [FRAGMENT.replace(FORCED + "\n\n\tauth", "\tauth"),
                                  FRAGMENT.replace(FORCED + "\n\n", FORCED + "\n" + FORCED + "\n\n")],
                         ids=["absent", "twice"])
def test_on_a_source_it_does_not_fit_it_refuses_in_one_line_and_writes_nothing(text):
    p = _edit(text)
    assert p.returncode == 1 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "lab-percmd-edit:" in p.stderr


def _debian_source() -> str | None:
    for cache in ("/var/cache/tpmtop-lab", os.path.expanduser("~/.cache/tpmtop-lab")):
        for src in sorted(Path(cache).glob("src/linux-source-6.12-*/drivers/char/tpm/tpm2-sessions.c")):
            return str(src)
    return None


def test_on_debians_linux_source_6_12_only_the_forced_continue_session_goes():
    src = _debian_source()
    if src is None:
        pytest.skip("Debian's linux-source-6.12 is not unpacked here (scripts/lab-kernels.sh unpacks it)")
    with open(src) as f:
        original = f.read()
    p = _edit(original)
    assert p.returncode == 0, p.stderr
    diff = [ln for ln in difflib.unified_diff(original.splitlines(), p.stdout.splitlines(), n=0, lineterm="")
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert [ln for ln in diff if ln.startswith("-")] == ["-" + COMMENT, "-" + FORCED]
    assert all(ln[1:].strip().startswith(("/*", "*")) for ln in diff if ln[0] == "+")  # a comment of ours
    # 6.12's other continueSession users keep theirs: get_random asks for it itself
    assert p.stdout.count("TPM2_SA_CONTINUE_SESSION") == original.count("TPM2_SA_CONTINUE_SESSION") - 1
