"""The calibrator arena's computation: PHI by hand, ranks and win rates on sets whose
answer is known, failure recording, refusal without sets, and the parameters' checks."""

from __future__ import annotations

import math
from functools import partial
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
import torch

from calib_pipeline.calibration.posthoc import CALIBRATORS, build_calibrator
from calib_pipeline.calibration.predictions import PredictionsFile
from calib_pipeline.reports.arena import (
    FAILED,
    NOT_APPLICABLE,
    OK,
    ArenaOptions,
    ArenaRun,
    NoPredictionSetsError,
    RankOptions,
    arena_report,
    arena_scores,
    arena_tables,
    bootstrap_weights,
    mean_ranks,
    pairwise_wins,
    win_rates,
)
from calib_pipeline.reports.common import UNCALIBRATED


class UniformCalibrator:
    """A calibrator that forgets the model: every class equally likely."""

    needs_logits = False
    warnings: ClassVar[list[str]] = []

    def fit(self, logits, labels):
        return self

    def predict_proba(self, logits):
        n, k = torch.as_tensor(logits).shape
        return torch.full((n, k), 1.0 / k, dtype=torch.float64)


class BrokenCalibrator(UniformCalibrator):
    def fit(self, logits, labels):
        raise ValueError("singular Hessian")


def overconfident_run(name: str, seed: int, method: str = "ce", n: int = 400) -> ArenaRun:
    """Labels drawn from softmax(z), the model reporting 3 z: over-confident by T = 3, and
    still better than uniform (z = 3 x a standard normal: about 78 % accuracy)."""
    generator = torch.Generator().manual_seed(seed)
    true = 3.0 * torch.randn(2 * n, 4, generator=generator)
    labels = torch.multinomial(torch.softmax(true, 1), 1, generator=generator).squeeze(1)
    logits = 3.0 * true
    return ArenaRun(name, method, (logits[:n], labels[:n]), {"test": (logits[n:], labels[n:])})


CRAFTED = {
    "ts": partial(build_calibrator, "temperature_nll"),
    "uniform": UniformCalibrator,
}


@pytest.fixture(scope="module")
def crafted_scores() -> pd.DataFrame:
    runs = [overconfident_run(f"ce.seed_{s}", s) for s in range(4)]
    runs += [overconfident_run(f"focal.seed_{s}", 10 + s, "focal") for s in range(2)]
    return arena_scores(runs, CRAFTED, ["nll", "brier", "ece", "accuracy"], n_bins=10)


def test_temperature_scaling_wins_on_logits_scaled_by_three_and_uniform_loses(crafted_scores):
    tables = arena_tables(crafted_scores, RankOptions(("nll", "brier"), 200, 0.95, 0))
    board = tables["leaderboard"].set_index("calibrator")
    assert list(board.index) == ["ts", UNCALIBRATED, "uniform"]
    assert board.loc["ts", "win_nll"] == 1.0 and board.loc["uniform", "win_nll"] == 0.0
    assert list(board["rank_nll"]) == [1.0, 2.0, 3.0]
    assert board.loc["ts", "phi_nll"] > 0.3 and board.loc["uniform", "phi_nll"] < 0
    assert board.loc["ts", "phi_accuracy"] == 0.0, "a temperature keeps the argmax"
    assert (board["n_sets"] == 6).all() and (board["n_failed"] == 0).all()
    by_method = tables["by_method"]
    assert set(by_method["method"]) == {"ce", "focal"}
    assert (by_method.groupby("method")["calibrator"].first() == "ts").all()
    assert by_method.set_index(["method", "calibrator"]).loc[("focal", "ts"), "n_sets"] == 2


def test_phi_is_the_uncalibrated_score_minus_the_calibrated_one_by_hand():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    labels = torch.tensor([0, 0])
    run = ArenaRun("r", "m", (logits, labels), {"test": (logits, labels)})
    halve = partial(build_calibrator, "temperature_fixed", temperature=2.0)
    scores = arena_scores([run], {"t2": halve}, ["nll", "accuracy"])
    row = scores.set_index(["calibrator", "metric"])
    base = (math.log1p(math.exp(-2.0)) + math.log1p(math.exp(1.0))) / 2
    calibrated = (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(0.5))) / 2
    assert row.loc[("t2", "nll"), "uncalibrated"] == pytest.approx(base)
    assert row.loc[("t2", "nll"), "value"] == pytest.approx(calibrated)
    assert row.loc[("t2", "nll"), "phi"] == pytest.approx(base - calibrated)
    assert row.loc[("t2", "nll"), "phi_relative"] == pytest.approx((base - calibrated) / base)
    assert row.loc[("t2", "accuracy"), "phi"] == 0.0, "higher is better: calibrated - base"
    assert row.loc[(UNCALIBRATED, "nll"), "phi"] == 0.0


def test_ranks_average_ties_and_put_failures_last():
    losses = np.array([[1.0, 2.0, 3.0], [2.0, 1.0, np.nan], [1.0, 1.0, 2.0]])
    np.testing.assert_allclose(mean_ranks(losses), [(1 + 2 + 1.5) / 3, (2 + 1 + 1.5) / 3, 3.0])
    wins = pairwise_wins(losses)
    np.testing.assert_array_equal(wins + wins.transpose(0, 2, 1), np.ones((3, 3, 3)))


def test_the_win_rate_interval_covers_the_true_rate_on_a_seeded_example():
    rng = np.random.default_rng(7)
    a_wins = rng.random(300) < 0.7
    losses = np.stack([np.where(a_wins, 0.0, 1.0), np.where(a_wins, 1.0, 0.0)], axis=1)
    rates = win_rates(losses, [f"run{i}" for i in range(300)], 1000, 0.95, seed=0)
    assert rates.pairwise[0, 1] == pytest.approx(a_wins.mean())
    assert rates.pairwise_low[0, 1] < 0.7 < rates.pairwise_high[0, 1]
    assert rates.pairwise_high[0, 1] - rates.pairwise_low[0, 1] < 0.15
    assert rates.field[0] == pytest.approx(rates.pairwise[0, 1]), "two entrants: field = pair"


def test_the_bootstrap_resamples_a_runs_sets_together():
    weights = bootstrap_weights(["a", "a", "b", "c"], 50, seed=1)
    assert weights.shape == (50, 4)
    np.testing.assert_array_equal(weights[:, 0], weights[:, 1])
    assert (weights[:, [0, 2, 3]].sum(axis=1) == 3).all(), "three runs drawn each time"


def test_a_calibrator_that_fails_is_recorded_with_its_reason_and_ranked_last():
    runs = [overconfident_run("ce.seed_0", 0), overconfident_run("ce.seed_1", 1)]
    scores = arena_scores(runs, {**CRAFTED, "broken": BrokenCalibrator}, ["nll", "brier"])
    broken = scores[scores["calibrator"] == "broken"]
    assert len(broken) == 4 and (broken["status"] == FAILED).all()
    assert broken["reason"].str.contains("fit: ValueError: singular Hessian").all()
    assert broken["value"].isna().all()
    tables = arena_tables(scores, RankOptions(("nll",), 100, 0.9, 0))
    board = tables["leaderboard"].set_index("calibrator")
    assert board.loc["broken", "n_failed"] == 2 and board.loc["broken", "rank_nll"] == 4.0
    assert np.isnan(board.loc["broken", "phi_nll"])
    assert set(tables["failures"]["calibrator"]) == {"broken"}
    summary = arena_report(scores, RankOptions(("nll",), 100, 0.9, 0))["summary"]
    assert "2 (set, calibrator) pair(s) did not run" in summary


def test_a_calibrator_that_maps_logits_does_not_apply_to_probabilities():
    logits = 2.0 * torch.randn(300, 3, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(300) % 3
    probs = torch.softmax(logits, 1).double()
    file = PredictionsFile(
        "p.npz",
        "0" * 64,
        "probs",
        {"val": probs[:150], "test": probs[150:]},
        {"val": labels[:150], "test": labels[150:]},
    )
    run = ArenaRun.from_predictions("score.p", file)
    calibrators = {"vs": partial(build_calibrator, "vector_scaling"), **CRAFTED}
    scores = arena_scores([run], calibrators, ["nll"])
    status = scores.set_index("calibrator")["status"]
    assert status["vs"] == NOT_APPLICABLE and status["ts"] == OK
    assert run.method == "score" and set(scores["set"]) == {"score.p"}


def test_shifted_test_sets_are_sets_of_their_own_fitted_on_the_clean_val():
    run = overconfident_run("ce.seed_0", 0)
    shifted = ArenaRun(run.name, run.method, run.val, {**run.tests, "noise_5": run.tests["test"]})
    scores = arena_scores([shifted], CRAFTED, ["nll"])
    assert set(scores["set"]) == {"ce.seed_0", "ce.seed_0/noise_5"}
    assert set(scores["run"]) == {"ce.seed_0"}


def test_no_prediction_set_is_refused():
    with pytest.raises(NoPredictionSetsError, match="no prediction set"):
        arena_scores([], CRAFTED, ["nll"])


def test_the_parameters_default_to_every_registered_calibrator_and_take_configured_keys():
    everyone = ArenaOptions.from_params({"calibrators": None}, {})
    assert list(everyone.calibrators) == CALIBRATORS.names()
    configured = {"ts_fixed": {"name": "temperature_fixed", "params": {"temperature": 1.5}}}
    chosen = ArenaOptions.from_params({"calibrators": ["ts_fixed", "dirichlet"]}, configured)
    assert chosen.calibrators == {**configured, "dirichlet": {"name": "dirichlet"}}
    assert chosen.factories()["ts_fixed"]().temperature == 1.5


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"calibrators": ["nope"]}, "'nope' is neither a key of the calibrators parameters"),
        ({"calibrators": ["none"]}, "names the uncalibrated model"),
        ({"calibrators": []}, "non-empty list or null"),
        ({"metrics": ["nll", "mean_confidence"]}, r"\['mean_confidence'\] are not metrics"),
        ({"metrics": ["nll"], "rank_by": ["brier"]}, "must name one or more of"),
        ({"ci_level": 1.5}, "ci_level must be in"),
        ({"shuffle": True}, r"unknown key\(s\) \['shuffle'\]"),
        ({"shifted": "false"}, "shifted must be true or false"),
    ],
)
def test_bad_parameters_are_refused_naming_the_valid_values(entry, message):
    with pytest.raises(ValueError, match=message):
        ArenaOptions.from_params(entry, {})


def test_a_calibrators_bad_hyperparameter_is_refused_at_build_time():
    configured = {"bad": {"name": "temperature_fixed", "params": {"temperature": -1.0}}}
    with pytest.raises(ValueError, match=r"posthoc_arena\.calibrators: 'bad'"):
        ArenaOptions.from_params({"calibrators": ["bad"]}, configured)


def test_the_report_holds_the_tables_and_both_figures(crafted_scores):
    report = arena_report(crafted_scores, RankOptions(("nll", "brier"), 100, 0.95, 0))
    assert {"summary", "leaderboard", "pairwise", "by_method", "failures"} <= set(report)
    assert hasattr(report["leaderboard_figure"], "savefig")
    assert len(report["leaderboard_figure"].axes) == 2
    assert "Best overall: **ts**" in report["summary"]
    pairwise = report["pairwise"].set_index(["score", "calibrator", "opponent"])
    assert len(pairwise) == 2 * 3 * 2, "each ordered pair of 3 entrants, in each score"
    assert pairwise.loc[("nll", "ts", "uniform"), "win_rate"] == 1.0
    assert pairwise.loc[("brier", "uniform", "ts"), "win_rate"] == 0.0
