"""The claims report: verdicts on synthetic tidy tables (a planted effect holds, its reverse
is contradicted, noise is inconclusive), every kind of quantity and comparison, and the
failure paths of the claim format."""

import logging
import math

import numpy as np
import pandas as pd
import pytest

from calib_pipeline.calibration.stats import holm_adjusted, seeds_needed
from calib_pipeline.reports.claim_specs import check_study_claims, parse_claim
from calib_pipeline.reports.claims import (
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    NOT_APPLICABLE,
    NOT_MEASURED,
    claims_metrics,
    first_lr_drop,
    judge,
    summary_line,
)
from calib_pipeline.reports.registry import StudyOutline, build_report, check_report
from tests.reports import synthetic

SEEDS = [0, 1, 2, 3, 4]
METHODS = {
    "ce": "CE",
    "focal_gamma_1": "Focal (γ=1)",
    "focal_gamma_3": "Focal (γ=3)",
    "focal_gamma_5": "Focal (γ=5)",
}
GROUPS = {"focal_gamma_1": "focal", "focal_gamma_3": "focal", "focal_gamma_5": "focal"}
NOISE = np.random.default_rng(3).normal(0, 0.02, size=len(SEEDS))
VALUES = {
    # planted: focal γ=3 has a clearly lower ECE than CE on every seed
    ("ce", "none", "test", "ece"): [0.10, 0.11, 0.12, 0.10, 0.11],
    ("focal_gamma_3", "none", "test", "ece"): [0.03, 0.04, 0.03, 0.05, 0.04],
    # noise: the AUROC of focal γ=1 and CE differ by small random amounts of both signs
    ("ce", "none", "test", "auroc"): [0.90] * 5,
    ("focal_gamma_1", "none", "test", "auroc"): list(0.90 + NOISE),
    # a trend along the focal sweep after TS: (0.02 + 0.002 seed) per member
    **{
        (m, "ts", "test", "ece"): [(0.02 + 0.002 * s) * (i + 1) for s in SEEDS]
        for i, m in enumerate(["focal_gamma_1", "focal_gamma_3", "focal_gamma_5"])
    },
    ("ce", "none", "test", "decomp_alpha"): [0.95, 0.96, 0.94, 0.95, 0.95],
}


def _histories():
    """Per run: the rate falls after epoch 3's step (the lr column holds the rate of the
    next epoch), so epoch 4 is the first at 0.01; from there CE's test NLL rises by
    0.5 + 0.01 seed and every other method's falls by 0.2 + 0.01 seed; the γ std grows."""
    out = {}
    for method in METHODS:
        for seed in SEEDS:
            after = [1.25, 1.5 + 0.01 * seed] if method == "ce" else [0.9, 0.8 - 0.01 * seed]
            out[(method, seed)] = pd.DataFrame(
                {
                    "epoch": [1, 2, 3, 4, 5, 6],
                    "lr": [0.1, 0.1, 0.01, 0.01, 0.01, 0.01],
                    "test_nll": [2.0, 1.5, 1.2, 1.0, *after],
                    "test_gamma_std": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5 + 0.01 * seed],
                }
            )
    return out


def _shifted_table():
    """The tidy table with corrupted test rows whose ECE after TS falls with severity
    (and rises without it) -- every other cell random."""
    table = synthetic.tidy(
        METHODS,
        SEEDS,
        ["ts"],
        VALUES,
        shifts=[("noise", s) for s in (1, 3, 5)] + [("blur", 1), ("blur", 3), ("blur", 5)],
    )
    shifted = (table["shift"] != "none") & (table["metric"] == "ece") & (table["method"] == "ce")
    raw = shifted & (table["calibrator"] == "none")
    ts = shifted & (table["calibrator"] == "ts")
    # slopes per severity: raw 0.02 + 0.001 seed, after TS 0.005 + 0.0005 seed
    table.loc[raw, "value"] = (
        0.1 + (0.02 + 0.001 * table.loc[raw, "seed"]) * table.loc[raw, "severity"]
    )
    table.loc[ts, "value"] = (
        0.05 + (0.005 + 0.0005 * table.loc[ts, "seed"]) * table.loc[ts, "severity"]
    )
    return table


@pytest.fixture(scope="module")
def study():
    _, calibrators = synthetic.fitted_runs(list(METHODS), SEEDS, keys=("ts",))
    return synthetic.study(
        METHODS, SEEDS, _shifted_table(), GROUPS, histories=_histories(), calibrators=calibrators
    )


def claim(claim_id, expect, a, b=None, **fields):
    """A claim entry; a side given as a string is that method."""
    entry = {"id": claim_id, "source": "test", "quote": "a planted effect", "expect": expect}
    for key, side in (("a", a), ("b", b)):
        if side is not None:
            entry[key] = {"method": side} if isinstance(side, str) else side
    return {**entry, **fields}


ECE, AUROC = {"metric": "ece"}, {"metric": "auroc"}
NLL_AFTER_DROP = {"history": "test_nll", "change": ["first_lr_drop", "last"]}
NOISY = claim("noise", "lower", "focal_gamma_1", "ce", quantity=AUROC)


def run(study, *claims, **options):
    artifacts = build_report("claims", study, claims=list(claims), **options)
    return artifacts, artifacts["claims"].set_index("id")


# --- verdicts on synthetic tables --------------------------------------------------------


def test_a_planted_effect_holds_its_reverse_is_contradicted_and_noise_is_inconclusive(study):
    planted = claim("planted", "lower", "focal_gamma_3", "ce", quantity=ECE)
    reverse = claim("reverse", "higher", "focal_gamma_3", "ce", quantity=ECE)
    artifacts, table = run(study, planted, reverse, NOISY)
    assert table.loc["planted", "verdict"] == HOLDS
    assert table.loc["reverse", "verdict"] == CONTRADICTED
    assert table.loc["noise", "verdict"] == INCONCLUSIVE
    # paired by seed: the effect is focal - CE per seed, and its mean matches
    effects = artifacts["effects"].query("id == 'planted'")["effect"].to_numpy()
    assert effects == pytest.approx(
        np.subtract(
            VALUES[("focal_gamma_3", "none", "test", "ece")], VALUES[("ce", "none", "test", "ece")]
        )
    )
    assert table.loc["planted", "effect"] == pytest.approx(effects.mean())
    assert table.loc["planted", "ci_high"] < 0
    # two-sided: the reverse claim is the same test, significant the other way
    assert table.loc["reverse", "p_value"] == table.loc["planted", "p_value"]
    assert table.loc["planted", "p_value"] < 0.05 and table.loc["planted", "n_seeds"] == 5


def test_an_inconclusive_claim_says_how_many_seeds_it_would_need(study):
    _, table = run(study, NOISY)
    row = table.loc["noise"]
    effects = NOISE
    if effects.mean() < 0:  # the observed effect in the claimed direction: a number of seeds
        assert row["seeds_needed"] == seeds_needed(effects.mean(), effects.std(ddof=1))
        assert row["seeds_needed"] > len(SEEDS)
    else:
        assert pd.isna(row["seeds_needed"]) and "against the claim" in row["note"]


def test_temperature_and_distance_from_a_value(study):
    # fitted_runs sharpens later runs, so their NLL temperatures grow with the run index
    temperature = {"temperature": "ts"}
    higher = claim("t", "higher", "focal_gamma_5", "ce", quantity=temperature)
    above = claim("t1", "higher", "ce", threshold=0, quantity=temperature)
    near = {**temperature, "distance_from": 0}
    closer = claim("near", "lower", "ce", "focal_gamma_5", quantity=near)
    _, table = run(study, higher, above, closer)
    assert table.loc["t", "verdict"] == HOLDS
    assert table.loc["t1", "verdict"] == HOLDS
    assert table.loc["near", "verdict"] == HOLDS
    assert table.loc["t", "claim"] == "fitted T of ts of Focal (γ=5) higher than CE"


def test_history_change_after_the_first_learning_rate_drop(study):
    history = _histories()[("ce", 0)]
    assert first_lr_drop(history) == 4
    rises = claim("rises", "higher", "ce", threshold=0, quantity=NLL_AFTER_DROP)
    more = claim("more", "higher", "ce", "focal_gamma_3", quantity=NLL_AFTER_DROP)
    flat = claim("flat", "higher", "focal_gamma_3", threshold=0, quantity=NLL_AFTER_DROP)
    gamma = {"history": "test_gamma_std", "change": ["first", "last"]}
    spread = claim("spread", "higher", "focal_gamma_1", threshold=0, quantity=gamma)
    at_end = claim(
        "end", "lower", "focal_gamma_3", "ce", quantity={"history": "test_nll", "at": "last"}
    )
    _, table = run(study, rises, more, flat, spread, at_end)
    assert table.loc["rises", "verdict"] == HOLDS
    assert table.loc["rises", "effect"] == pytest.approx(0.5 + 0.01 * np.mean(SEEDS))
    assert table.loc["more", "verdict"] == HOLDS and table.loc["spread", "verdict"] == HOLDS
    # focal's NLL falls after the drop: the claim that it rises is contradicted
    assert table.loc["flat", "verdict"] == CONTRADICTED
    assert table.loc["end", "verdict"] == HOLDS


def test_trend_over_the_members_of_a_sweep_group(study):
    ts_ece = {**ECE, "calibrator": "ts"}
    grows = claim("grows", "increasing", "focal", over="members", quantity=ts_ece)
    falls = {**grows, "id": "falls", "expect": "decreasing"}
    _, table = run(study, grows, falls)
    assert table.loc["grows", "verdict"] == HOLDS and table.loc["falls", "verdict"] == CONTRADICTED
    assert table.loc["grows", "effect"] == pytest.approx(
        0.024
    )  # per member step, mean of 0.02 + 0.002 seed
    assert table.loc["grows", "effect_is"] == "slope per member step"
    assert "Focal (γ=1) → Focal (γ=3) → Focal (γ=5)" in table.loc["grows", "claim"]


def test_trend_over_severity_and_shifted_comparisons(study):
    corrupted = {**ECE, "shift": "corrupted"}
    raw = claim("raw", "increasing", "ce", over="severity", quantity=corrupted)
    # the gap TS - raw shrinks with severity, and TS is lower at severity 5
    gap = {**raw, "id": "gap", "expect": "decreasing", "a": {"method": "ce", "calibrator": "ts"}}
    gap["b"] = {"method": "ce"}
    ts = {**gap, "id": "ts", "expect": "lower", "quantity": {**raw["quantity"], "severity": 5}}
    del ts["over"]
    _, table = run(study, raw, gap, ts)
    assert table.loc["raw", "verdict"] == HOLDS
    assert table.loc["raw", "effect"] == pytest.approx(0.022)  # per severity unit
    assert table.loc["gap", "effect"] == pytest.approx(0.006 - 0.022)
    assert table.loc["gap", "verdict"] == HOLDS and table.loc["ts", "verdict"] == HOLDS


def test_within_a_tolerance_uses_two_one_sided_tests(study):
    # CE's ECE (~0.11) against a weighted sum of metrics: decomp_alpha - 0.84 (~0.11)
    close = claim(
        "close",
        "within",
        {"method": "ce", "metric": "ece"},
        {"method": "ce", "metric": {"decomp_alpha": 1, "decomp_gamma": 0}},
        tolerance=0.05,
    )
    shifted = {**close, "id": "shifted", "b": {"method": "ce", "metric": {"decomp_alpha": 1}}}
    _, table = run(study, shifted)
    assert table.loc["shifted", "verdict"] == CONTRADICTED  # 0.11 - 0.95 is far outside ±0.05
    assert (
        table.loc["shifted", "claim"]
        == "ECE (test, uncalibrated) of CE within ±0.05 of α (test, uncalibrated) of CE"
    )
    near = judge([0.001, -0.002, 0.0, 0.002, -0.001], expect="within", tolerance=0.01)
    assert near["verdict"] == HOLDS and near["p_value"] < 0.05
    wide = judge([0.03, -0.02, 0.0, 0.02, -0.03], expect="within", tolerance=0.01)
    assert wide["verdict"] == INCONCLUSIVE


def test_missing_data_is_not_measured_and_other_datasets_not_applicable(study):
    natural = claim(
        "natural", "lower", "focal_gamma_3", "ce", quantity={**AUROC, "shift": "cifar10_1"}
    )
    elsewhere = claim(
        "elsewhere", "lower", "focal_gamma_3", "ce", quantity=ECE, datasets=["cifar10"]
    )
    column = claim(
        "column", "higher", "ce", threshold=0, quantity={"history": "test_ece", "at": "last"}
    )
    artifacts, table = run(study, natural, elsewhere, column)
    assert (
        table.loc["natural", "verdict"] == NOT_MEASURED
        and "no such shifted set" in table.loc["natural", "note"]
    )
    assert table.loc["elsewhere", "verdict"] == NOT_APPLICABLE
    assert (
        table.loc["column", "verdict"] == NOT_MEASURED and "test_nll" in table.loc["column", "note"]
    )
    line = "study on toy: 0 of 2 claims hold, 0 contradicted, 0 inconclusive, 2 not measured"
    assert line in artifacts["summary"] and artifacts["verdicts"]["line"].startswith(line)
    assert artifacts["verdicts"]["metrics"]["claims.not_measured"] == 2.0
    assert "(1 more apply to other datasets)" in artifacts["summary"]


def test_the_report_logs_its_line(study, caplog):
    with caplog.at_level(logging.INFO, logger="calib_pipeline.reports.claims"):
        run(study, NOISY)
    assert "study on toy: 0 of 1 claims hold, 0 contradicted, 1 inconclusive" in caplog.text


# --- the rules of judge ------------------------------------------------------------------


def test_one_seed_is_inconclusive_without_a_spread():
    result = judge([-0.3], expect="lower")
    assert result["verdict"] == INCONCLUSIVE and result["n_seeds"] == 1
    assert math.isnan(result["p_value"]) and result["seeds_needed"] is None
    assert "one seed" in result["note"]


def test_zero_spread_takes_the_t_tests_limit_so_agreement_never_weakens_a_verdict():
    three = judge([-0.1] * 3, expect="lower")
    assert three["verdict"] == HOLDS and three["p_value"] == 0.0 and "zero spread" in three["note"]
    assert three["ci_low"] == pytest.approx(-0.1) and three["ci_high"] == pytest.approx(-0.1)
    assert judge([-0.1] * 2, expect="higher")["verdict"] == CONTRADICTED
    one_sided = judge([-0.1] * 3, expect="higher", test="one-sided")
    assert one_sided["verdict"] == CONTRADICTED and one_sided["p_value"] == 1.0
    # temperatures on a 0.1 grid, claim T > 1: five equal ones are at least as strong as
    # four equal ones and a fifth a step higher (the exact sign test made them weaker)
    equal = judge(np.array([1.1] * 5) - 1, expect="higher")
    spread = judge(np.array([1.1] * 4 + [1.2]) - 1, expect="higher")
    assert spread["verdict"] == HOLDS and spread["p_value"] < 0.05
    assert equal["verdict"] == HOLDS and equal["p_value"] <= spread["p_value"]
    nearly = judge([-0.01, -0.01, -0.01 + 1e-10], expect="lower")
    assert nearly["verdict"] == judge([-0.01] * 3, expect="lower")["verdict"] == HOLDS
    assert judge([0.001] * 5, expect="within", tolerance=0.01)["verdict"] == HOLDS
    assert judge([0.1] * 5, expect="within", tolerance=0.01)["verdict"] == CONTRADICTED
    assert judge([0.01] * 3, expect="within", tolerance=0.01)["verdict"] == INCONCLUSIVE
    rounding = judge([1e-13, -2e-13, 4e-13], expect="higher")  # zero up to rounding, mixed signs
    assert rounding["verdict"] == INCONCLUSIVE and "exactly no effect" in rounding["note"]
    none = judge([0.0, 0.0, 0.0], expect="lower")
    assert none["verdict"] == INCONCLUSIVE and "exactly no effect" in none["note"]
    assert none["seeds_needed"] is None


def test_seeds_whose_effects_cancel_point_nowhere():
    # e.g. |T - 1| of focal minus CE's on a 0.1 temperature grid: +0.1, 0, -0.1
    cancelled = judge([0.1, 0.0, -0.1], expect="lower")
    assert cancelled["verdict"] == INCONCLUSIVE and cancelled["p_value"] == pytest.approx(1.0)
    assert (
        cancelled["note"] == "the mean effect is exactly zero" and cancelled["seeds_needed"] is None
    )
    against = judge([0.1, 0.05, -0.1], expect="lower")
    assert against["note"] == "the observed effect points against the claim"


def test_one_sided_tests_halve_the_p_value_and_use_the_matching_interval():
    effects = [-0.02, -0.05, 0.01, -0.03, -0.04]
    two = judge(effects, expect="lower")
    one = judge(effects, expect="lower", test="one-sided")
    assert one["p_value"] == pytest.approx(two["p_value"] / 2)
    # the 1 - 2 alpha interval of a one-sided test is narrower than the 1 - alpha one
    assert one["ci_high"] < two["ci_high"] and one["ci_low"] > two["ci_low"]
    assert (one["verdict"] == HOLDS) == (one["ci_high"] < 0)


# --- counts, the summary line and MLflow -------------------------------------------------


def test_summary_line_and_mlflow_metrics():
    table = pd.DataFrame(
        {"verdict": [HOLDS] * 5 + [CONTRADICTED] + [INCONCLUSIVE] * 3 + [NOT_APPLICABLE]}
    )
    assert summary_line("focal_meta", "digits", table) == (
        "focal_meta on digits: 5 of 9 paper claims hold, 1 contradicted, 3 inconclusive"
        " (1 more apply to other datasets)"
    )
    assert claims_metrics(table) == {
        "claims.holds": 5.0,
        "claims.contradicted": 1.0,
        "claims.inconclusive": 3.0,
        "claims.not_measured": 0.0,
        "claims.not_applicable": 1.0,
        "claims.total": 9.0,
    }


# --- the format and its checks -----------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            claim("x", "lower", "ce", "ls", quantity={"metric": "eec"}),
            r"unknown metric\(s\) \['eec'\]",
        ),
        (
            claim("x", "lower", "ce", "ls", colour="red"),
            r"unknown key\(s\) \['colour'\]",
        ),
        (
            claim("x", "lower", "ce", "ls", threshold=1),
            "exactly one of 'b'",
        ),
        (claim("x", "increasing", "ls"), "needs 'over'"),
        (claim("x", "within", "ce", threshold=0), "needs a tolerance"),
        (
            claim("x", "lower", "ce", threshold=0, quantity={"history": "test_nll"}),
            "exactly one of 'at'",
        ),
        (
            claim(
                "x",
                "lower",
                {"method": "ce"},
                threshold=0,
                quantity={"history": "test_nll", "at": "middle"},
            ),
            "an epoch must be",
        ),
        (
            claim(
                "x",
                "lower",
                {"method": "ce"},
                threshold=0,
                quantity={"temperature": "ts", "split": "val"},
            ),
            r"\['split'\] do not apply",
        ),
        (claim("x", "rises", "ce", threshold=0), "expect must be one of"),
        ({"id": "x", "expect": "lower", "a": {"method": "ce"}, "threshold": 0}, "source must be"),
    ],
)
def test_a_malformed_claim_fails_with_its_id(entry, message):
    with pytest.raises(ValueError, match=message):
        parse_claim(entry, "study")
    with pytest.raises(ValueError, match=message):
        check_report("claims", {"claims": [entry]})


OUTLINE = StudyOutline(
    "toy",
    ("ce", "focal_gamma_1", "focal_gamma_3"),
    {"focal_gamma_1": "focal", "focal_gamma_3": "focal"},
    ("ts",),
)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"claims": [claim("x", "lower", "brier", "ce")]},
            r"method 'brier' is not in study 'toy'.*groups: focal",
        ),
        (
            {
                "claims": [
                    claim("x", "lower", {"method": "ce", "calibrator": "ts_grid"}, {"method": "ce"})
                ]
            },
            r"calibrator 'ts_grid' is not evaluated.*none, ts",
        ),
        (
            {
                "claims": [
                    claim(
                        "x", "lower", {"method": "ce"}, threshold=1, quantity={"temperature": "hb"}
                    )
                ]
            },
            "calibrator 'hb'",
        ),
        ({"papers": ["mukhoti"]}, "method 'brier' is not in study"),
        (
            {"papers": ["mukhoti"], "only": ["no_such_claim"], "rename": {"ts_grid_mukhoti": "ts"}},
            r"no claim with id\(s\) \['no_such_claim'\]",
        ),
        ({}, "no claims to check"),
    ],
)
def test_a_claim_the_study_cannot_measure_fails_when_checked_against_it(options, message):
    with pytest.raises(ValueError, match=message):
        check_study_claims(OUTLINE, options)
    with pytest.raises(ValueError, match=message):
        check_report("claims", options, study=OUTLINE)


def test_only_and_rename_map_a_papers_claims_onto_a_smaller_study():
    check_study_claims(
        OUTLINE,
        {
            "papers": ["mukhoti"],
            "only": ["focal3_temperature_closer_to_one", "focal3_lower_incorrect_nll_at_end"],
            "rename": {"ts_grid_mukhoti": "ts"},
        },
    )
    with pytest.raises(ValueError, match="calibrator 'ts_grid_mukhoti'"):
        check_study_claims(
            OUTLINE, {"papers": ["mukhoti"], "only": ["focal3_temperature_closer_to_one"]}
        )


def test_an_infinite_seed_value_is_not_measured_and_the_other_claims_still_judged():
    """NLL after histogram binning is +inf when a test label gets probability 0: no mean
    or t-test exists for it, but it must not cost the report its other claims."""
    values = {
        **VALUES,
        # an infinite seed, as NLL after histogram binning can be (the toy table has no NLL)
        ("ce", "none", "test", "brier"): [math.inf, 0.5, 0.5, 0.6, 0.5],
        ("focal_gamma_3", "none", "test", "brier"): [0.4, 0.41, 0.4, 0.42, 0.4],
    }
    results = synthetic.study(METHODS, SEEDS, synthetic.tidy(METHODS, SEEDS, ["ts"], values))
    infinite = claim("nll", "lower", "focal_gamma_3", "ce", quantity={"metric": "brier"})
    planted = claim("planted", "lower", "focal_gamma_3", "ce", quantity=ECE)
    _, table = run(results, infinite, planted)
    assert table.loc["nll", "verdict"] == NOT_MEASURED
    assert "ce has an infinite value at seed(s) [0]" in table.loc["nll", "note"]
    assert table.loc["planted", "verdict"] == HOLDS


def test_only_the_kept_claims_decide_whether_the_study_needs_shifted_sets():
    from calib_pipeline.reports.registry import uses_shift

    assert uses_shift("claims", {"papers": ["karandikar"]}), "karandikar has shift claims"
    kept = {"papers": ["karandikar"], "only": ["avuc_gs_beats_avuc"]}
    assert not uses_shift("claims", kept), "the kept claim reads no shifted set"
    shifted = {"papers": ["karandikar"], "only": ["ts_sb_ece_beats_ts_under_shift"]}
    assert uses_shift("claims", shifted)


def test_holm_adjusted_p_values_across_the_studys_claims(study):
    planted = claim("planted", "lower", "focal_gamma_3", "ce", quantity=ECE)
    reverse = claim("reverse", "higher", "focal_gamma_3", "ce", quantity=ECE)
    artifacts, table = run(study, planted, reverse, NOISY)
    tested = table["p_value"].dropna()
    assert table["p_holm"].to_numpy() == pytest.approx(holm_adjusted(table["p_value"]), nan_ok=True)
    assert (table.loc[tested.index, "p_holm"] >= tested).all()
    smallest = tested.idxmin()  # Holm multiplies the smallest p by the number of tested claims
    assert table.loc[smallest, "p_holm"] == pytest.approx(min(1.0, len(tested) * tested.min()))
    survivors = int(((table["verdict"] == HOLDS) & (table["p_holm"] < 0.05)).sum())
    assert artifacts["verdicts"]["holds_after_holm"] == survivors
    assert f"{survivors} of the 1 claims that hold still hold after it" in artifacts["summary"]
    assert "p (Holm)" in artifacts["summary"]
