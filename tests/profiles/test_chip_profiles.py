"""The nine built-in chip profiles (issue 56): each figure cites its source and derivation,
the generated files are what tpmtop.profiles.published makes, and docs/profiles.md's table
holds exactly the profiles' figures (the test parses the table: no figure typed twice unchecked)."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers.paths import REPO
from tests.helpers.processes import run_tpmtop
from tpmtop.profiles import published
from tpmtop.profiles.loader import BUILTIN, load_builtin
from tpmtop.profiles.profile import Profile
from tpmtop.tpm import names

DOCS = REPO / "docs" / "profiles.md"
VARIANT_WORDS = {"no_session": "none", "hmac_session": "HMAC", "any": "–"}


def cell(p: Profile, command: str, variant: str) -> str:
    """What docs/profiles.md's table says for one figure: ms and p (published) or e
    (estimated), or "not published"."""
    cc = names.cc_from_name(command)
    if cc in p.not_published:
        return "not published"
    f = p.figure(cc, variant)
    assert f is not None, (p.name, command, variant)
    ms = f"{f.median_us / 1000:,.3f}".rstrip("0").rstrip(".")
    return f"{ms} {'p' if f.source['kind'] == 'published' else 'e'}"


def docs_table() -> tuple[list[str], list[list[str]]]:
    text = DOCS.read_text()
    block = text.split("<!-- chip-figures: begin -->", 1)[1].split("<!-- chip-figures: end -->", 1)[0]
    lines = [line.strip() for line in block.strip().splitlines() if line.strip().startswith("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return rows[0], rows[2:]


def test_generated_profiles_are_what_the_module_makes():
    for chip in published.CHIPS:
        if chip is published.BASE:
            continue
        assert published.builtin_text(chip.name) == published.dumps(published.profile_doc(chip)), chip.name


def test_nine_chips_of_wolftpms_table():
    assert BUILTIN == ("slb9670", "slb9672", "slb9673", "st33ktpm2x", "st33tphf2x", "attpm20", "npct650",
                       "npct750", "jetson-orin-ftpm")


def test_slb9670_keeps_the_seeds_breakdown():
    p = load_builtin("slb9670")
    for (command, variant), us in {("ContextLoad", "any"): 36977, ("StartAuthSession", "any"): 84747,
                                   ("FlushContext", "any"): 3195, ("PCR_Extend", "no_session"): 6360,
                                   ("PCR_Extend", "hmac_session"): 24356}.items():
        f = p.figure(names.cc_from_name(command), variant)
        assert f is not None and f.median_us == us and f.source["kind"] == "published"
    # its wolfTPM entries are the module's, not typed again
    for command, (op, what) in published.DIRECT.items():
        if op in published.BASE.ms:
            got = json.loads(published.builtin_text("slb9670"))["commands"][command]["any"]
            assert got == published._published(published.BASE, op, what)


@pytest.mark.parametrize("name", BUILTIN)
def test_every_figure_cites_source_and_derivation(name):
    p = load_builtin(name)
    assert any("Source" in n and ("wolfTPM" in n or "linux-integrity" in n) for n in p.notes), p.notes
    for entry in p.commands.values():
        for f in entry.values():
            d = f.source["detail"]
            assert f.source["kind"] in ("published", "estimated")
            if f.source["kind"] == "published":
                assert d.startswith("published") and ("wolfTPM" in d or "ftrace" in d), d
            else:
                # an estimate says what it scaled or equated, and by what
                assert d.startswith("estimated") and ("×" in d or "equal" in d or "plus" in d), d
    for cc, why in p.not_published.items():
        assert "publishes no" in why and cc not in p.commands


def test_docs_table_holds_every_figure():
    header, rows = docs_table()
    assert header[:2] == ["command", "session"] and header[2:] == list(BUILTIN)
    profiles = [load_builtin(n) for n in BUILTIN]
    want = set()
    for p in profiles:
        want |= {(names.cc_short(cc), v) for cc, entry in p.commands.items() for v in entry}
        want |= {(names.cc_short(cc), "any") for cc in p.not_published}
    seen = set()
    inverse = {w: v for v, w in VARIANT_WORDS.items()}
    for command, session, *cells in rows:
        variant = inverse[session]
        seen.add((command, variant))
        for p, got in zip(profiles, cells, strict=True):
            assert got == cell(p, command, variant), (p.name, command, session)
    assert seen == want


def test_profile_list_shows_coverage():
    r = run_tpmtop("profile", "list")
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[2:11]}
    assert list(rows) == list(BUILTIN)
    for name in BUILTIN:
        p = load_builtin(name)
        figs = [f for e in p.commands.values() for f in e.values()]
        pub = sum(f.source["kind"] == "published" for f in figs)
        assert re.search(rf"\s{pub}\s+{len(figs) - pub}\s+{len(p.not_published)}\s+4/4$", rows[name]), rows[name]
    assert "slb9670: CreatePrimary, ECDH_ZGen, RSA_Encrypt" in r.stdout
    doc = json.loads(run_tpmtop("profile", "list", "--json").stdout)
    assert [x["name"] for x in doc["profiles"]] == list(BUILTIN)
    assert doc["profiles"][1]["not_published"] == []  # the SLB9672 has every operation wolfTPM times


def test_not_published_is_checked_like_commands(tmp_path):
    raw = json.loads(published.builtin_text("slb9670"))
    for bad, words in ((dict(raw["not_published"], NoSuchCommand="x"), "unknown TPM command"),
                       (dict(raw["not_published"], ContextLoad="x"), "also has a figure")):
        f = tmp_path / "bad.json"
        f.write_text(json.dumps(dict(raw, not_published=bad)))
        r = run_tpmtop("profile", "show", str(f))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
