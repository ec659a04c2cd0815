"""The firmware advisory table: a row matches a recorded identity inside the range its source
names and misses one outside it; a line the source does not name and a source without a range
are said so, never judged; every row's source is cited in docs/health.md."""

from __future__ import annotations

from tests.helpers.paths import REPO
from tpmtop.health import advisories
from tpmtop.tpm.identity import firmware_string


def _identity(manufacturer: str, fw1: int, fw2: int = 0) -> dict:
    # as `tpmtop health` records it: TPM_PT_MANUFACTURER, FIRMWARE_VERSION_1/2 through identity.py
    return {"manufacturer": manufacturer, "vendor": "", "firmware": firmware_string(fw1, fw2)}


def _result(v, adv_id: str) -> str:
    return next(a["result"] for a in dict(v.data)["advisories"] if a["id"] == adv_id)


def test_roca_matches_inside_its_range_and_misses_outside():
    inside = advisories.verdict(_identity("IFX", 0x00040020))  # 4.32
    assert inside.level.value == "warn"
    assert inside.text == "firmware 4.32.0.0 is in the range ROCA (CVE-2017-15361) names"
    assert "https://nvd.nist.gov/vuln/detail/CVE-2017-15361" in " ".join(inside.evidence)
    fixed = advisories.verdict(_identity("IFX", 0x00040022))  # 4.34: the first version outside
    assert fixed.level.value == "info" and _result(fixed, "ROCA") == "outside"
    other_line = advisories.verdict(_identity("IFX", 0x00070055))  # 7.85: a line the source does not name
    assert other_line.level.value == "info" and _result(other_line, "ROCA") == "unnamed"
    assert any("not judged" in e and "CVE-2017-15361" in e for e in other_line.evidence)


def test_a_source_without_a_version_range_is_said_so_and_another_makers_row_is_left_out():
    st = advisories.verdict(_identity("STM", 0x00490004))
    assert st.level.value == "info" and _result(st, "TPM-Fail (ST33)") == "no-range"
    assert any("gives no firmware version range" in e and "2019-09-12" in e for e in st.evidence)
    assert "ROCA" not in {a["id"] for a in dict(st.data)["advisories"]}


def test_every_row_cites_its_source_in_the_docs():
    page = (REPO / "docs" / "health.md").read_text(encoding="utf-8")
    for adv in advisories.table():
        assert adv.sources
        for url in adv.sources:
            assert url in page, f"docs/health.md does not cite {url} ({adv.name})"
        for cve in adv.cves:
            assert cve in page
