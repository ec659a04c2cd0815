"""tpmtop.profile/1: schema round trips, the built-in profile's provenance, sampling, and bad
files refused with one line and exit status 2 (before any TPM is started)."""

from __future__ import annotations

import json
import random
import statistics
from importlib import resources

import pytest
from jsonschema import Draft202012Validator

from tests.helpers.paths import TESTS
from tpmtop.cli import main
from tpmtop.profiles import load_profile
from tpmtop.profiles.derive import figure_from_ns, profile_from_samples
from tpmtop.profiles.loader import dumps, from_json, schema
from tpmtop.profiles.profile import ANY, HMAC_SESSION, NO_SESSION, Figure
from tpmtop.tpm import names, wire

CC = {n: names.cc_from_name(n) for n in ("PCR_Extend", "ContextLoad", "StartAuthSession", "FlushContext",
                                        "ContextSave", "GetRandom")}


def test_schema_is_valid_draft_2020_12():
    Draft202012Validator.check_schema(schema())
    assert schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_builtin_round_trips_through_schema():
    raw = json.loads(resources.files("tpmtop.profiles").joinpath("slb9670.json").read_text("utf-8"))
    Draft202012Validator(schema()).validate(raw)
    p = load_profile("slb9670")
    out = json.loads(dumps(p))
    Draft202012Validator(schema()).validate(out)
    assert out == raw
    assert from_json(out).to_json() == out


def test_builtin_says_where_every_figure_comes_from():
    p = load_profile("slb9670")
    kinds = {}
    for cc, entry in p.commands.items():
        for variant, f in entry.items():
            kinds[(names.cc_short(cc), variant)] = f.source["kind"]
            assert f.source["detail"].startswith(f.source["kind"])  # "published, …" / "estimated: …"
            if f.source["kind"] == "published":  # the seeds' trace, or wolfTPM's table (issue 56)
                assert ("linux-integrity thread, Sept 2024, kernel 6.11-rc2 ftrace" in f.source["detail"]
                        or "wolfTPM docs/benchmarks.md" in f.source["detail"])
    # The five published steps of the September 2024 trace are published; the rest estimated.
    for key in [("PCR_Extend", NO_SESSION), ("PCR_Extend", HMAC_SESSION), ("ContextLoad", ANY),
                ("StartAuthSession", ANY), ("FlushContext", ANY)]:
        assert kinds[key] == "published", key
    assert kinds[("ContextSave", ANY)] == "estimated"
    assert kinds[("GetRandom", HMAC_SESSION)] == "estimated"


def test_builtin_matches_the_published_trace():
    """The built-in figures are the ones `profile from-trace` reads from the thread's ftrace."""
    from tpmtop.profiles.derive import profile_from_traces

    fx = TESTS / "profile_fixtures"
    traced, _ = profile_from_traces([f"{fx}/ftrace-graph-extend-hmac-slb9670.txt",
                                     f"{fx}/ftrace-graph-extend-nohmac-slb9670.txt"], "t")
    built = load_profile("slb9670")
    assert set(traced.commands) <= set(built.commands)
    for cc, entry in traced.commands.items():
        for variant, f in entry.items():
            assert abs(built.figure(cc, variant).median_us - f.median_us) < 1.0, (names.cc_short(cc), variant)


def test_recorded_profile_round_trips_with_spread():
    rng = random.Random(1)
    samples = {(CC["PCR_Extend"], NO_SESSION): [int(rng.gauss(6e6, 3e5)) for _ in range(40)],
               (CC["PCR_Extend"], HMAC_SESSION): [int(rng.gauss(24e6, 1e6)) for _ in range(40)],
               (CC["FlushContext"], ANY): [3_000_000, 3_100_000, 3_300_000]}
    p = profile_from_samples("lab-chip", {"manufacturer": "IFX"}, samples,
                             {"kind": "recorded", "detail": "test data"})
    doc = json.loads(dumps(p))
    Draft202012Validator(schema()).validate(doc)
    ext = doc["commands"]["PCR_Extend"]
    assert ext["no_session"]["p10_us"] < ext["no_session"]["median_us"] < ext["no_session"]["p90_us"]
    assert "histogram" in ext["hmac_session"]
    assert "p10_us" not in doc["commands"]["FlushContext"]["any"]  # 3 samples: no spread claimed
    assert from_json(doc).to_json() == doc


def _info(cc, sessions=()):
    return wire.CommandInfo(cc, 10, (), tuple(sessions), None, False)


def test_shaper_picks_variant_by_session_type():
    p = load_profile("slb9670")
    shape = p.shaper()
    ext = CC["PCR_Extend"]
    assert shape(_info(ext)) == 6_360_000
    assert shape(_info(ext, [(0x40000009, 0)])) == 6_360_000  # password auth is not a session
    assert shape(_info(ext, [(0x02000000, 1)])) == 24_356_000
    assert shape(_info(ext, [(0x03000001, 1)])) == 24_356_000  # policy session
    assert shape(_info(CC["ContextLoad"], [])) == 36_977_000  # "any"
    assert shape(_info(names.cc_from_name("CreatePrimary"))) is None  # not in the profile: not held
    assert shape(_info(None)) is None  # garbled command


def test_sampling_is_seeded_and_stays_in_the_spread():
    f = Figure(median_us=1000, p10_us=800, p90_us=1500, source={"kind": "estimated", "detail": "x"})
    def draw(seed):
        rng = random.Random(seed)
        return [f.sample_us(rng) for _ in range(200)]

    a, b, c = draw(7), draw(7), draw(8)
    assert a == b and a != c
    assert min(a) >= 800 and max(a) <= 1500
    assert 900 < statistics.median(a) < 1100


def test_histogram_only_figure_keeps_its_median():
    # Coarse buckets (a capture's 4 per decade) would move the median; the draw is rescaled.
    f = Figure(median_us=6400, histogram=[[5623.413, 10], [10000.0, 30], [17782.794, 5]], min_us=3162.278,
               source={"kind": "capture", "detail": "x"})
    rng = random.Random(3)
    xs = [f.sample_us(rng) for _ in range(2000)]
    assert abs(statistics.median(xs) - 6400) / 6400 < 0.05
    assert max(xs) > 6400 * 1.3  # and the spread is still there


def test_figure_from_ns_deciles():
    f = figure_from_ns(list(range(1_000_000, 2_000_001, 10_000)), {"kind": "recorded", "detail": "x"})
    assert f.median_us == pytest.approx(1500, abs=1)
    assert f.p10_us == pytest.approx(1100, abs=1) and f.p90_us == pytest.approx(1900, abs=1)


GOOD = json.loads(resources.files("tpmtop.profiles").joinpath("slb9670.json").read_text("utf-8"))


def _mutate(fn):
    d = json.loads(json.dumps(GOOD))
    fn(d)
    return json.dumps(d)


BAD = {
    "not-json": ("{ \"schema\": ", "not JSON"),
    "capture": (json.dumps({"schema": "tpmtop.capture/1"}), "from-capture"),
    "no-source": (_mutate(lambda d: d["commands"]["FlushContext"]["any"].pop("source")), "'source' is a required"),
    "negative": (_mutate(lambda d: d["commands"]["FlushContext"]["any"].update(median_us=-3)), "FlushContext"),
    "deciles": (_mutate(lambda d: d["commands"]["FlushContext"]["any"].update(p10_us=5000, p90_us=6000)),
                "p10_us ≤ median_us ≤ p90_us"),
    "unknown-cc": (_mutate(lambda d: d["commands"].update(Frobnicate={"any": GOOD["commands"]["FlushContext"]["any"]})),
                   "unknown TPM command"),
    "bad-variant": (_mutate(lambda d: d["commands"]["FlushContext"].update(with_password={"median_us": 1})),
                    "FlushContext"),
    "binary": (b"\xff\xfe\x00garbage", "not a text file"),
}


@pytest.mark.parametrize("case", sorted(BAD) + ["missing", "directory"])
def test_bad_profile_is_one_line_exit_2(case, tmp_path, capsys):
    path = tmp_path / f"{case}.json"
    if case == "missing":
        want = "no such file"
    elif case == "directory":
        path = tmp_path / "dir.json"
        path.mkdir()
        want = "is a directory"
    else:
        content, want = BAD[case]
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    rc = main(["bench", "--sim", "--profile", str(path), "-n", "1", "--warmup", "0", "-q"])
    out, err = capsys.readouterr()
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0] and want in lines[0], lines[0]
    assert out == ""  # refused before the TPM was opened: no header line


def test_unknown_builtin_and_stray_seed(capsys):
    assert main(["bench", "--sim", "--profile", "slb9999", "-n", "1"]) == 2
    assert "not a built-in" in capsys.readouterr().err
    assert main(["bench", "--sim", "--seed", "3", "-n", "1"]) == 2
    assert "--seed goes with --profile" in capsys.readouterr().err


def test_from_trace_bpftrace_sums_need_calls(tmp_path, capsys):
    trace = str(TESTS / "profile_fixtures" / "bpftrace-ima-extend-nohmac.txt")
    out = tmp_path / "bp.json"
    assert main(["profile", "from-trace", trace, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--calls N" in err[0] and not out.exists()
    assert main(["profile", "from-trace", trace, "--calls", "2", "-o", str(out), "--model", "SLB9670"]) == 0
    p = load_profile(str(out))
    f = p.figure(CC["PCR_Extend"], NO_SESSION)
    assert f.median_us == pytest.approx(5_273.648 / 2, abs=0.01)  # the fixture's sum over 2 calls
    assert f.source["kind"] == "trace" and "a mean, not a median" in f.source["detail"]
    assert p.chip == {"model": "SLB9670"}
