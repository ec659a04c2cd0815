"""Projection arithmetic, checked against sums done by hand."""

import json
from decimal import Decimal

import pytest

from tests.helpers.captures import capture_doc
from tpmtop.boot import projection as pj
from tpmtop.errors import UsageError


def comps(**us):
    return {k: pj.Cost(Decimal(v), "test") for k, v in us.items()}


FULL = dict(E0="6360", L="36977", S="84747", F="3195", Eh="24356", C="36977")


def test_every_mode_from_components():
    p = pj.project(87, "test", comps(**FULL))
    # none: 87 × 6360 µs = 553,320 µs
    assert p.modes["none"].total_s == Decimal("0.55332")
    # per-command: 87 × (36977 + 84747 + 3195 + 24356 = 149,275) = 12,986,925 µs
    assert p.modes["per-command"].total_s == Decimal("12.986925")
    # reuse: 124,919 + 87 × 24,356 (= 2,118,972) = 2,243,891 µs
    assert p.modes["reuse"].total_s == Decimal("2.243891")
    # saved, ContextSave included: 124,919 + 87 × (36,977 + 24,356 + 36,977 = 98,310 → 8,552,970)
    # = 8,677,889 µs (bench measures ~98.8 ms an operation on the slb9670 profile: one price)
    assert p.modes["saved"].total_s == Decimal("8.677889")
    assert [p.modes[m].estimate_s for m in pj.MODES] == [Decimal("0.55"), Decimal("13"), Decimal("2.2"),
                                                           Decimal("8.7")]
    assert p.modes["per-command"].arithmetic == (
        "87 × (36,977 + 84,747 + 3,195 + 24,356) µs = 87 × 149,275 µs = 12.99 s")
    assert p.modes["saved"].arithmetic == (
        "(36,977 + 84,747 + 3,195) µs + 87 × (36,977 + 24,356 + 36,977) µs = 124,919 µs + 87 × 98,310 µs = 8.678 s")
    assert p.modes["none"].arithmetic == "87 × 6,360 µs = 553.3 ms"


def test_decimals_of_trace_costs_are_kept():
    p = pj.project(1000, "t", comps(E0="6360.029", L="36976.99", S="84746.51", F="3195.083", Eh="24356.46"))
    # 36976.99 + 84746.51 + 3195.083 + 24356.46 = 149275.043 µs; × 1000 = 149.275043 s
    assert p.modes["per-command"].total_s == Decimal("149.275043")
    assert p.modes["per-command"].estimate_s == Decimal("150")


def test_missing_component_or_count_gives_a_reason_not_a_number():
    p = pj.project(10, "t", comps(E0="100"))
    assert p.modes["none"].total_s == Decimal("0.001")
    assert p.modes["per-command"].total_s is None
    assert p.modes["per-command"].reason == ("no cost for L (ContextLoad), S (StartAuthSession), "
                                             "F (FlushContext), Eh (PCR_Extend (HMAC session))")
    q = pj.project(None, "t", comps(**FULL))
    assert all(q.modes[m].total_s is None and q.modes[m].reason == "number of extends unknown" for m in pj.MODES)


SUMMARY = {"count": 200, "p50": 1.0, "p90": 1.0, "p99": 1.0, "max": 1.0, "mean": 1.0}


def run(engine, mode, op, p50):
    return {"engine": engine, "mode": mode, "op": op, "ops": 200, "op_us": dict(SUMMARY, p50=p50),
            "wire_us": SUMMARY, "host_us": SUMMARY, "commands_per_op": {}, "commands": {}}


def test_capture_wins_for_its_modes(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(capture_doc([
        run("esys", "per-command", "extend", 9000.0),
        run("native", "per-command", "extend", 1900.5),
        run("native", "none", "extend", 120.0),
        run("native", "reuse", "get_random", 1.0),
    ])))
    per_mode, _notes = pj.load_capture_costs(str(path))
    assert per_mode["per-command"].us == Decimal("1900.5")  # native preferred over esys
    assert per_mode["none"].us == Decimal("120.0")
    assert set(per_mode) == {"per-command", "none"}
    assert "a simulator" in per_mode["none"].source
    p = pj.project(400, "t", comps(**FULL), per_mode)
    assert p.modes["per-command"].total_s == Decimal("0.7602")  # 400 × 1900.5 µs
    assert p.modes["none"].total_s == Decimal("0.048")  # 400 × 120 µs
    assert p.modes["reuse"].total_s == Decimal("9.867319")  # components: 124,919 + 400 × 24,356


def test_esys_only_capture_is_flagged():
    per_mode, notes = pj.capture_costs(capture_doc([run("esys", "none", "extend", 130.0)]), "c.json")
    assert per_mode["none"].us == Decimal("130.0")
    assert any("only ESAPI runs" in n for n in notes)


@pytest.mark.parametrize("doc, match", [
    ({"schema": "other"}, r"not a tpmtop capture"),
    ({"schema": "tpmtop.capture/1"}, r"no \"runs\" list"),
    ({"schema": "tpmtop.capture/1", "runs": [{"op": "extend", "mode": "none", "op_us": {"p50": -1}}]},
     r"runs\[0\] \(extend, none\) has no positive op_us.p50"),
])
def test_capture_checks(doc, match):
    with pytest.raises(UsageError, match=match):
        pj.capture_costs(doc, "c.json")


@pytest.mark.parametrize("content", ["{not json", '{"schema": "other"}', "[]", ""])
def test_unreadable_capture_files_are_usage_errors(tmp_path, content):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(UsageError, match=r"c.json"):
        pj.load_capture_costs(str(path))


@pytest.mark.parametrize("x, n, out", [("12.986925", 2, "13"), ("0.55332", 2, "0.55"), ("628.4", 2, "6.3E+2"),
                                       ("0.0449", 1, "0.04"), ("0", 2, "0")])
def test_round_sig(x, n, out):
    assert str(pj.round_sig(Decimal(x), n)) == out


def test_formatting_never_adds_digits():
    assert pj.fmt_estimate(Decimal("6.3E+2")) == "about 630 s"
    assert pj.fmt_estimate(Decimal("0.55")) == "about 550 ms"
    assert pj.fmt_us(Decimal("36976.99")) == "36,976.99"
    assert pj.fmt_us(Decimal("6360")) == "6,360"


# A kept session not run, priced from the baseline's bursts: the measured modes' op p50s and
# every command's host work, as the Modes panel passes them (tpmtop.viewmodel.rows.modes).
KEPT = dict(FULL, hL="10", hS="200", hF="5", Eb="30", hEb="6", hM="9")
MEASURED = {"none": pj.Cost(Decimal(40), "test"), "per-command": pj.Cost(Decimal(500), "test")}


def test_a_kept_sessions_tpm_hmac_work_is_priced_where_the_hmacd_extend_is_told_apart():
    """A chip's HMAC'd extend sits wholly above its plain one (its p25 above the plain one's
    p75): T = Eh10 − Ew10, in the formula, the arithmetic and the note."""
    p = pj.project(1000, "test", comps(**KEPT, Eh10="24000", Ew10="6300", Eh25="24100", Ew75="6400"), MEASURED)
    reuse = p.modes["reuse"]
    assert reuse.formula == "(L + S + F + hL + hS + hF) + N × (Eb + T + hEb + hM)"
    assert "T = Eh10 − Ew10 = 17,700 µs" in reuse.note
    # (36,977 + 84,747 + 3,195 + 10 + 200 + 5 = 125,134) + 1,000 × (30 + 17,700 + 6 + 9 = 17,745)
    assert reuse.total_s == Decimal("17.870134")


def test_an_hmacd_extend_not_told_apart_from_a_plain_one_adds_no_tpm_work():
    """On swtpm the TPM's HMAC work is about a microsecond and the burst-first extends are few:
    where the HMAC'd extend's p25 is not above the plain one's p75, Eh10 − Ew10 is their noise,
    and T is 0, said so with the figures; it must not fire on a difference that small."""
    p = pj.project(1000, "test", comps(**KEPT, Eh10="64", Ew10="41", Eh25="70", Ew75="82"), MEASURED)
    reuse = p.modes["reuse"]
    assert reuse.formula == "(L + S + F + hL + hS + hF) + N × (Eb + T + hEb + hM)"
    assert "T = 0: the HMAC'd extend is not told apart from the plain one (Eh's p25 70 µs not above " \
           "Ew's p75 82 µs; Eh10 − Ew10 would be 23 µs)" in reuse.note
    # 125,134 + 1,000 × (30 + 0 + 6 + 9 = 45)
    assert reuse.total_s == Decimal("0.170134")
