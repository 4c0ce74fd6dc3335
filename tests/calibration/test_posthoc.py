"""Post-hoc calibrators: parity with reference implementations, properties, failure paths."""

from __future__ import annotations

import itertools
import json
import logging
import math
import pickle

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from calib_pipeline.calibration import metrics
from calib_pipeline.calibration._posthoc_binning import BinnedMap, fit_platt
from calib_pipeline.calibration.posthoc import (
    CALIBRATORS,
    LogitCalibrator,
    TopLabelCalibrator,
    build_calibrator,
    calibrator_from_state,
    temperature_grid,
)

ALL_NAMES = CALIBRATORS.names()
TEMPERATURE_NAMES = [n for n in ALL_NAMES if n.startswith("temperature_")]
TOP_LABEL_NAMES = ["histogram_binning", "isotonic_top_label", "platt_top_label", "scaling_binning"]
AFFINE_NAMES = ["vector_scaling", "matrix_scaling", "dirichlet"]


def make_logits(n: int, k: int, *, scale: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of a model calibrated at ``scale = 1``; labels drawn from ``softmax(base)``.

    ``scale > 1`` makes it overconfident (optimal T ≈ scale), ``< 1`` underconfident.
    """
    generator = torch.Generator().manual_seed(seed)
    base = 2.5 * torch.randn(n, k, generator=generator, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(base, dim=1), 1, generator=generator).squeeze(1)
    return (scale * base).to(torch.float32), labels


@pytest.fixture(scope="module")
def data() -> dict[str, torch.Tensor]:
    val_logits, val_labels = make_logits(600, 5, scale=2.0, seed=1)
    test_logits, test_labels = make_logits(400, 5, scale=2.0, seed=2)
    return {
        "val": val_logits,
        "val_labels": val_labels,
        "test": test_logits,
        "test_labels": test_labels,
    }


@pytest.fixture(scope="module")
def fitted(data) -> dict[str, object]:
    return {name: build_calibrator(name).fit(data["val"], data["val_labels"]) for name in ALL_NAMES}


def float64_nll(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> float:
    return float(torch.nn.functional.cross_entropy(logits.double() / temperature, labels))


# --------------------------------------------------------------------------- registry


def test_registry_lists_every_calibrator():
    assert set(ALL_NAMES) == {
        "temperature_nll",
        "temperature_grid_ece",
        "temperature_sb_ece",
        "temperature_fixed",
        "histogram_binning",
        "isotonic_top_label",
        "isotonic_one_vs_rest",
        "platt_top_label",
        "scaling_binning",
        "vector_scaling",
        "matrix_scaling",
        "dirichlet",
        "dirichlet_cv",
        "ets",
        "irm",
        "spline",
        "bbq",
        "structured_vector_scaling",
        "structured_matrix_scaling",
        "parameterized_ts",
    }


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match=r"unknown calibrator 'temp_scaling'.*temperature_nll"):
        build_calibrator("temp_scaling")


@pytest.mark.parametrize(
    ("name", "hyperparameters", "message"),
    [
        ("temperature_nll", {"lr": 0.01}, r"unknown parameter.*\['lr'\].*t_min"),
        ("temperature_nll", {"t_min": 0}, r"t_min must be in \[1e-06"),
        ("temperature_nll", {"t_min": 5, "t_max": 2}, r"t_max must be in \(5"),
        ("temperature_fixed", {"temperature": 0}, r"temperature must be in \(0"),
        (
            "temperature_grid_ece",
            {"preset": "guo"},
            r"unknown temperature grid preset 'guo'.*mukhoti, wang",
        ),
        (
            "temperature_grid_ece",
            {"preset": "wang", "step": 0.1},
            "either preset or start/stop/step",
        ),
        ("temperature_grid_ece", {"start": 0.1, "stop": 2.0}, "needs start, stop and step"),
        (
            "temperature_grid_ece",
            {"start": 0.1, "stop": 2.0, "step": -1},
            r"step must be in \(1.8999",
        ),
        (
            "temperature_grid_ece",
            {"start": 0.1, "stop": 10.1, "step": 1e-6},
            r"step must be in \(0.0001",
        ),
        ("temperature_grid_ece", {"n_bins": 1.5}, "n_bins must be an integer >= 1"),
        (
            "temperature_sb_ece",
            {"soft_bin_temperature": -1.0},
            r"soft_bin_temperature must be in \(0",
        ),
        ("temperature_sb_ece", {"label_binned": "yes"}, "label_binned must be true or false"),
        ("histogram_binning", {"n_bins": 0}, "n_bins must be an integer >= 1"),
        ("histogram_binning", {"n_bins": 2.5}, "n_bins must be an integer >= 1"),
        (
            "histogram_binning",
            {"binning": "quantile"},
            "binning must be one of 'equal_size', 'equal_mass'",
        ),
        ("scaling_binning", {"fit_fraction": 1.0}, r"fit_fraction must be in \(0.0, 1.0\)"),
        ("dirichlet", {"off_diagonal_l2": -1}, r"off_diagonal_l2 must be in \[0"),
        ("matrix_scaling", {"max_iter": -3}, "max_iter must be an integer >= 0"),
        ("vector_scaling", {"off_diagonal_l2": 1.0}, r"unknown parameter.*off_diagonal_l2"),
        ("dirichlet_cv", {"l2_grid": []}, "l2_grid must be a non-empty list"),
        ("dirichlet_cv", {"l2_grid": [1.0, -1.0]}, r"l2_grid value must be in \[0"),
        ("dirichlet_cv", {"l2_grid": [1.0, 1.0]}, "l2_grid must hold distinct values"),
        ("dirichlet_cv", {"folds": 1}, "folds must be an integer >= 2"),
        ("dirichlet_cv", {"off_diagonal_l2": 1.0}, r"unknown parameter.*off_diagonal_l2"),
        ("isotonic_top_label", {"n_bins": 15}, "accepts: no parameters"),
    ],
)
def test_bad_hyperparameters_fail_at_build_time(name, hyperparameters, message):
    with pytest.raises(ValueError, match=message):
        build_calibrator(name, **hyperparameters)


def test_name_and_hyperparameters_are_recorded():
    calibrator = build_calibrator("temperature_grid_ece", preset="wang", n_bins=10)
    assert calibrator.name == "temperature_grid_ece"
    assert calibrator.hyperparameters == {
        "preset": "wang",
        "start": 0.01,
        "stop": 10.0,
        "step": 0.01,
        "n_bins": 10,
    }
    json.dumps(calibrator.hyperparameters)


# --------------------------------------------------------------------------- input validation


@pytest.mark.parametrize("name", ALL_NAMES)
def test_bad_validation_input_raises_before_fitting(name, data, monkeypatch):
    calibrator = build_calibrator(name)
    monkeypatch.setattr(type(calibrator), "_fit", lambda *_: pytest.fail("fitted bad input"))
    nan_logits = data["val"].clone()
    nan_logits[3, 1] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        calibrator.fit(nan_logits, data["val_labels"])
    bad_labels = data["val_labels"].clone()
    bad_labels[0] = 5
    with pytest.raises(ValueError, match="labels out of range: found 5"):
        calibrator.fit(data["val"], bad_labels)
    with pytest.raises(ValueError, match="empty input"):
        calibrator.fit(torch.empty(0, 5), torch.empty(0, dtype=torch.long))
    with pytest.raises(ValueError, match="shape mismatch"):
        calibrator.fit(data["val"], data["val_labels"][:-1])
    assert calibrator.n_classes is None


@pytest.mark.parametrize("name", ALL_NAMES)
def test_predict_checks_fitted_state_and_class_count(name, fitted, data):
    with pytest.raises(ValueError, match="not fitted"):
        build_calibrator(name).predict_proba(data["test"])
    with pytest.raises(ValueError, match="fitted on 5 classes but got logits with 4 classes"):
        fitted[name].predict_proba(data["test"][:, :4])
    nan_logits = data["test"].clone()
    nan_logits[0, 0] = math.inf
    with pytest.raises(ValueError, match="inf"):
        fitted[name].predict_proba(nan_logits)


def test_single_class_problem_is_rejected():
    with pytest.raises(ValueError, match="at least 2 classes"):
        build_calibrator("temperature_nll").fit(
            torch.randn(10, 1), torch.zeros(10, dtype=torch.long)
        )


# --------------------------------------------------------------------------- outputs, pickle


@pytest.mark.parametrize("name", ALL_NAMES)
def test_outputs_are_probabilities_and_numpy_input_matches_torch(name, fitted, data):
    calibrator = fitted[name]
    probabilities = calibrator.predict_proba(data["test"])
    assert probabilities.dtype == torch.float64 and probabilities.shape == data["test"].shape
    assert bool((probabilities >= 0).all())
    torch.testing.assert_close(probabilities.sum(dim=1), torch.ones(400, dtype=torch.float64))
    torch.testing.assert_close(calibrator.predict_proba(data["test"].numpy()), probabilities)
    if isinstance(calibrator, LogitCalibrator):
        torch.testing.assert_close(
            torch.softmax(calibrator.transform_logits(data["test"]), dim=1), probabilities
        )
    refit = build_calibrator(name).fit(data["val"].numpy(), data["val_labels"].numpy())
    torch.testing.assert_close(refit.predict_proba(data["test"]), probabilities)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_pickle_round_trip_and_json_learned(name, fitted, data):
    calibrator = fitted[name]
    restored = pickle.loads(pickle.dumps(calibrator))
    assert torch.equal(restored.predict_proba(data["test"]), calibrator.predict_proba(data["test"]))
    assert restored.learned() == calibrator.learned()
    assert (restored.name, restored.hyperparameters) == (
        calibrator.name,
        calibrator.hyperparameters,
    )
    assert restored.converged is calibrator.converged is True
    assert restored.warnings == calibrator.warnings == []
    json.dumps(calibrator.learned(), allow_nan=False)


def test_binary_one_column_logits_are_accepted():
    logits, labels = make_logits(300, 2, scale=3.0, seed=5)
    margin = logits[:, 1] - logits[:, 0]
    calibrator = build_calibrator("temperature_nll").fit(margin, labels)
    two_column = build_calibrator("temperature_nll").fit(
        torch.stack([0 * margin, margin], 1), labels
    )
    assert calibrator.temperature == pytest.approx(two_column.temperature, rel=1e-12)
    assert calibrator.predict_proba(margin).shape == (300, 2)


# --------------------------------------------------------------------------- temperature scaling


@pytest.mark.parametrize(
    ("scale", "k", "seed"), [(0.4, 3, 0), (1.0, 10, 1), (3.0, 10, 2), (8.0, 50, 3)]
)
def test_nll_temperature_matches_scipy_on_the_float64_objective(scale, k, seed):
    logits, labels = make_logits(1500, k, scale=scale, seed=seed)
    calibrator = build_calibrator("temperature_nll").fit(logits, labels)
    reference = minimize_scalar(
        lambda t: float64_nll(logits, labels, t),
        bounds=(0.01, 100.0),
        method="bounded",
        options={"xatol": 1e-10},
    )
    assert calibrator.converged and not calibrator.warnings
    assert float64_nll(logits, labels, calibrator.temperature) <= reference.fun + 1e-9
    assert calibrator.temperature == pytest.approx(reference.x, rel=1e-4)


def test_nll_temperature_at_bound_warns(caplog):
    labels = torch.arange(40) % 4
    separable = 5.0 * torch.nn.functional.one_hot(labels, 4).float()
    with caplog.at_level(logging.WARNING, logger="calib_pipeline.calibration.posthoc"):
        calibrator = build_calibrator("temperature_nll", t_min=0.05, on_separable="bound").fit(
            separable, labels
        )
    assert calibrator.temperature == pytest.approx(0.05)
    assert calibrator.learned()["at_bound"] is True
    assert calibrator.learned()["separable"] is True
    assert "search bound" in calibrator.warnings[0]
    assert "search bound" in caplog.text


def test_nll_temperature_upper_bound_on_chance_level_logits_warns():
    # every prediction wrong with a margin: the NLL keeps falling as T grows
    labels = torch.arange(40) % 4
    wrong = 5.0 * torch.nn.functional.one_hot((labels + 1) % 4, 4).float()
    calibrator = build_calibrator("temperature_nll", t_max=20.0).fit(wrong, labels)
    assert calibrator.temperature == pytest.approx(20.0)
    assert calibrator.learned()["at_bound"] is True and calibrator.learned()["separable"] is False
    assert "search bound" in calibrator.warnings[0]


def test_separable_validation_set_keeps_identity_temperature_by_default(caplog):
    # no misclassified sample: NLL(T) decreases monotonically as T -> 0, no finite optimum
    logits, labels = make_logits(300, 5, scale=2.0, seed=11)
    labels = logits.argmax(dim=1)
    with caplog.at_level(logging.WARNING, logger="calib_pipeline.calibration.posthoc"):
        calibrator = build_calibrator("temperature_nll").fit(logits, labels)
    nll = [float64_nll(logits, labels, t) for t in (2.0, 1.0, 0.5, 0.1, 0.02)]
    assert all(a > b for a, b in itertools.pairwise(nll))
    assert calibrator.temperature == 1.0
    assert calibrator.learned()["separable"] is True
    assert calibrator.learned()["at_bound"] is False
    assert "no finite optimum" in calibrator.warnings[0] and "no finite optimum" in caplog.text
    torch.testing.assert_close(calibrator.predict_proba(logits), torch.softmax(logits.double(), 1))
    # one misclassified sample makes the optimum finite again: no separable warning
    flipped = labels.clone()
    flipped[0] = (flipped[0] + 1) % 5
    finite = build_calibrator("temperature_nll").fit(logits, flipped)
    assert finite.learned()["separable"] is False
    assert 0.01 < finite.temperature < 1.0 and not finite.warnings


def test_nll_temperature_rejects_an_unknown_separable_policy():
    with pytest.raises(
        ValueError, match=r"on_separable must be one of 'identity', 'bound', got 'skip'"
    ):
        build_calibrator("temperature_nll", on_separable="skip")


def test_constant_logits_warn_that_temperature_is_not_identifiable():
    calibrator = build_calibrator("temperature_nll").fit(torch.ones(20, 3), torch.arange(20) % 3)
    assert calibrator.temperature == 1.0
    assert "not identifiable" in calibrator.warnings[0]


def test_temperature_grid_includes_stop_and_rounds_clean_values():
    grid = temperature_grid(0.1, 10.0, 0.1)
    assert len(grid) == 100 and grid[0] == 0.1 and grid[2] == 0.3 and grid[-1] == 10.0
    assert len(temperature_grid(0.01, 10.0, 0.01)) == 1000


@pytest.mark.parametrize(
    "hyperparameters",
    [{}, {"preset": "wang"}, {"start": 0.5, "stop": 4.0, "step": 0.25, "n_bins": 10}],
)
def test_grid_temperature_picks_the_brute_force_minimiser(data, hyperparameters):
    calibrator = build_calibrator("temperature_grid_ece", **hyperparameters)
    options = calibrator.hyperparameters
    best_t, best_ece = None, math.inf
    t = options["start"]
    index = 0
    while t <= options["stop"] + 1e-9:
        value = float(metrics.ece(data["val"] / t, data["val_labels"], n_bins=options["n_bins"]))
        if value < best_ece:
            best_t, best_ece = t, value
        index += 1
        t = round(options["start"] + index * options["step"], 12)
    calibrator.fit(data["val"], data["val_labels"])
    assert calibrator.temperature == best_t
    assert calibrator.learned()["ece"] == pytest.approx(best_ece, abs=1e-15)


def test_grid_temperature_at_grid_bound_warns():
    logits, labels = make_logits(500, 5, scale=0.05, seed=4)  # needs T ≈ 0.05 < 0.1
    calibrator = build_calibrator("temperature_grid_ece", preset="mukhoti").fit(logits, labels)
    assert calibrator.temperature == 0.1
    assert calibrator.learned()["at_bound"] is True
    assert "grid bound" in calibrator.warnings[0]


def test_sb_ece_temperature_minimises_the_soft_binned_objective(data):
    calibrator = build_calibrator("temperature_sb_ece").fit(data["val"], data["val_labels"])
    z = data["val"].double()

    def objective(t: float) -> float:
        return float(metrics.sb_ece(z / t, data["val_labels"]))

    dense = np.exp(np.linspace(math.log(0.05), math.log(20.0), 400))
    assert calibrator.learned()["sb_ece"] == pytest.approx(
        objective(calibrator.temperature), rel=1e-12
    )
    assert objective(calibrator.temperature) <= min(objective(t) for t in dense) + 1e-9
    assert calibrator.converged


@pytest.mark.parametrize("name", TEMPERATURE_NAMES)
def test_temperature_scaling_never_changes_accuracy(name, fitted, data):
    calibrator = fitted[name]
    assert calibrator.temperature > 0
    assert torch.equal(calibrator.predict_proba(data["test"]).argmax(1), data["test"].argmax(1))
    torch.testing.assert_close(
        calibrator.transform_logits(data["test"]), data["test"].double() / calibrator.temperature
    )


def test_fixed_temperature_defaults_to_singh_value(fitted):
    assert fitted["temperature_fixed"].learned() == {"temperature": 1.5}


# --------------------------------------------------------------------------- top-label calibrators


def test_bins_are_closed_on_the_right_and_empty_bins_keep_the_score():
    binned = BinnedMap(
        np.array([0.0, 0.25, 0.5, 0.75, 1.0]),
        np.array([0.1, np.nan, 0.6, 0.8]),
        np.array([1, 0, 1, 1]),
    )
    scores = torch.tensor([0.0, 0.1, 0.25, 0.26, 0.5, 0.75, 0.9, 1.0], dtype=torch.float64)
    assert binned(scores).tolist() == [0.1, 0.1, 0.1, 0.26, 0.5, 0.6, 0.8, 0.8]
    assert binned.learned()["bin_values"] == [0.1, None, 0.6, 0.8]


def binary_logits(
    confidences: list[float], correct: list[bool]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two-class logits whose class 1 has the given confidence; labels make it (in)correct."""
    c = torch.tensor(confidences, dtype=torch.float64)
    logits = torch.stack([torch.zeros_like(c), torch.log(c / (1 - c))], dim=1)
    labels = torch.tensor([1 if ok else 0 for ok in correct])
    return logits, labels


def test_histogram_binning_matches_hand_computed_example():
    # 4 equal-size bins: (0.5, 0.75] holds 0.6 ✓, 0.7 ✗, 0.72 ✓ -> 2/3;
    # (0.75, 1] holds 0.8 ✓, 0.9 ✓, 0.95 ✗, 0.99 ✓ -> 3/4; bins 0 and 1 stay empty.
    logits, labels = binary_logits(
        [0.6, 0.7, 0.72, 0.8, 0.9, 0.95, 0.99], [True, False, True, True, True, False, True]
    )
    calibrator = build_calibrator("histogram_binning", n_bins=4).fit(logits, labels)
    assert calibrator.learned() == {
        "bin_edges": [0.0, 0.25, 0.5, 0.75, 1.0],
        "bin_values": [None, None, pytest.approx(2 / 3), pytest.approx(3 / 4)],
        "bin_counts": [0, 0, 3, 4],
    }
    query, _ = binary_logits([0.55, 0.74, 0.76, 0.999], [True] * 4)
    probabilities = calibrator.predict_proba(query)
    torch.testing.assert_close(
        probabilities[:, 1], torch.tensor([2 / 3, 2 / 3, 3 / 4, 3 / 4], dtype=torch.float64)
    )
    torch.testing.assert_close(probabilities[:, 0], 1 - probabilities[:, 1])


def test_histogram_binning_empty_bin_keeps_the_confidence():
    logits, labels = binary_logits([0.9, 0.95], [True, False])
    calibrator = build_calibrator("histogram_binning", n_bins=4).fit(logits, labels)
    query, _ = binary_logits([0.6], [True])
    assert float(calibrator.predict_proba(query)[0, 1]) == pytest.approx(0.6)


def test_equal_mass_histogram_binning_hand_computed_edges():
    # 8 confidences, 4 bins: inner edges are midpoints of ranks (1,2), (3,4), (5,6).
    confidences = [0.55, 0.6, 0.65, 0.7, 0.8, 0.85, 0.9, 0.95]
    correct = [False, True, True, False, True, True, True, True]
    logits, labels = binary_logits(confidences, correct)
    calibrator = build_calibrator("histogram_binning", n_bins=4, binning="equal_mass").fit(
        logits, labels
    )
    learned = calibrator.learned()
    assert learned["bin_edges"] == pytest.approx([0.0, 0.625, 0.75, 0.875, 1.0])
    assert learned["bin_counts"] == [2, 2, 2, 2]
    assert learned["bin_values"] == pytest.approx([0.5, 0.5, 1.0, 1.0])


def test_equal_mass_binning_never_splits_ties():
    logits, labels = binary_logits([0.7] * 6 + [0.9, 0.95], [True, False] * 4)
    calibrator = build_calibrator("histogram_binning", n_bins=4, binning="equal_mass").fit(
        logits, labels
    )
    learned = calibrator.learned()
    assert learned["bin_edges"] == pytest.approx([0.0, 0.7, 0.7, 0.8, 1.0])
    assert learned["bin_counts"] == [6, 0, 0, 2]
    assert learned["bin_values"] == [pytest.approx(0.5), None, None, pytest.approx(0.5)]


def test_top_label_isotonic_equals_scikit_learn(data):
    calibrator = build_calibrator("isotonic_top_label").fit(data["val"], data["val_labels"])
    probabilities = torch.softmax(data["val"].double(), 1)
    confidence, prediction = probabilities.max(1)
    reference = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(
        confidence.numpy(), (prediction == data["val_labels"]).double().numpy()
    )
    test_confidence = torch.softmax(data["test"].double(), 1).max(1).values.numpy()
    expected = reference.predict(test_confidence)
    np.testing.assert_allclose(
        calibrator.calibrate_confidence(data["test"]).numpy(), expected, rtol=1e-12
    )
    top = calibrator.predict_proba(data["test"]).max(1).values.numpy()
    np.testing.assert_allclose(top, np.maximum(expected, 1 / 5 + 1e-9), rtol=1e-12)
    assert calibrator.learned()["x_thresholds"] == pytest.approx(reference.X_thresholds_.tolist())


def test_isotonic_output_is_monotone_in_confidence(fitted):
    margins = torch.linspace(-3.0, 12.0, 400, dtype=torch.float64)
    logits = torch.stack([torch.zeros_like(margins)] * 4 + [margins], dim=1)
    confidence = torch.softmax(logits, 1).max(1).values
    order = torch.argsort(confidence)
    calibrated = fitted["isotonic_top_label"].predict_proba(logits).max(1).values[order]
    assert bool((calibrated[1:] >= calibrated[:-1]).all())


def test_one_vs_rest_isotonic_equals_scikit_learn_per_class(data, fitted):
    probabilities = torch.softmax(data["val"].double(), 1).numpy()
    test_probabilities = torch.softmax(data["test"].double(), 1).numpy()
    columns = np.stack(
        [
            IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip")
            .fit(probabilities[:, k], (data["val_labels"].numpy() == k).astype(float))
            .predict(test_probabilities[:, k])
            for k in range(5)
        ],
        axis=1,
    )
    expected = columns / columns.sum(1, keepdims=True)
    np.testing.assert_allclose(
        fitted["isotonic_one_vs_rest"].predict_proba(data["test"]).numpy(), expected
    )


def test_isotonic_with_one_distinct_confidence_warns():
    calibrator = build_calibrator("isotonic_top_label").fit(
        torch.tensor([[2.0, 0.0]] * 6), torch.tensor([0, 0, 1, 0, 1, 0])
    )
    assert "fewer than 2 distinct" in calibrator.warnings[0]


@pytest.mark.parametrize("name", TOP_LABEL_NAMES)
def test_top_label_calibrators_preserve_the_prediction(name, fitted, data):
    noise = torch.randn(300, 5, generator=torch.Generator().manual_seed(9))  # forces the 1/K floor
    for logits in (data["test"], noise):
        probabilities = fitted[name].predict_proba(logits)
        assert torch.equal(probabilities.argmax(1), logits.argmax(1))
    assert isinstance(fitted[name], TopLabelCalibrator)


def test_platt_matches_unregularised_logistic_regression(data):
    probabilities = torch.softmax(data["val"].double(), 1)
    confidence, prediction = probabilities.max(1)
    correct = (prediction == data["val_labels"]).double()
    log_odds = torch.log(confidence) - torch.log1p(-confidence)
    slope, intercept, converged, _ = fit_platt(log_odds, correct, target_smoothing=False)
    reference = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(
        log_odds.numpy()[:, None], correct.numpy()
    )
    assert converged
    assert slope == pytest.approx(reference.coef_[0, 0], rel=1e-5)
    assert intercept == pytest.approx(reference.intercept_[0], rel=1e-5, abs=1e-6)


def test_platt_all_correct_stays_finite_with_target_smoothing():
    logits = torch.tensor([[3.0, 0.0], [0.0, 2.0], [4.0, 1.0], [0.5, 1.0]])
    calibrator = build_calibrator("platt_top_label").fit(logits, logits.argmax(1))
    assert "every validation prediction is correct" in calibrator.warnings[0]
    assert all(math.isfinite(v) for v in calibrator.learned().values())


def test_scaling_binning_outputs_bin_means_of_the_scaled_confidence(fitted, data):
    calibrator = fitted["scaling_binning"]
    learned = calibrator.learned()
    values = [v for v in learned["bin_values"] if v is not None]
    assert len(values) == 15 and sum(learned["bin_counts"]) == 300
    edges = learned["bin_edges"]
    for j, value in enumerate(learned["bin_values"]):
        assert edges[j] <= value <= edges[j + 1]
    distinct = torch.unique(calibrator.calibrate_confidence(data["test"]))
    assert distinct.numel() <= 15


# --------------------------------------------------------------------------- affine calibrators


@pytest.mark.parametrize("name", AFFINE_NAMES)
def test_affine_identity_initialisation_reproduces_the_input(name, data):
    calibrator = build_calibrator(name, max_iter=0).fit(data["val"], data["val_labels"])
    assert not calibrator.converged and "identity" in calibrator.warnings[0]
    z = data["test"].double()
    torch.testing.assert_close(calibrator.predict_proba(z), torch.softmax(z, 1), rtol=0, atol=1e-14)
    expected_logits = torch.log_softmax(z, 1) if name == "dirichlet" else z
    torch.testing.assert_close(calibrator.transform_logits(z), expected_logits, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", AFFINE_NAMES)
def test_affine_fit_lowers_validation_nll_and_reports_weights(name, fitted, data):
    calibrator = fitted[name]
    z, y = data["val"].double(), data["val_labels"]
    before = float(torch.nn.functional.cross_entropy(z, y))
    after = float(torch.nn.functional.nll_loss(calibrator.predict_proba(z).log(), y))
    assert after < before
    learned = calibrator.learned()
    assert len(learned["bias"]) == 5
    assert np.asarray(learned["weights"]).shape == ((5,) if name == "vector_scaling" else (5, 5))


def test_matrix_scaling_odir_shrinks_off_diagonal_weights(data):
    def off_diagonal_norm(l2: float) -> float:
        weights = np.asarray(
            build_calibrator("matrix_scaling", off_diagonal_l2=l2, intercept_l2=l2)
            .fit(data["val"], data["val_labels"])
            .learned()["weights"]
        )
        return float(np.linalg.norm(weights - np.diag(np.diag(weights))))

    assert off_diagonal_norm(100.0) < 0.2 * off_diagonal_norm(0.0)


def test_vector_scaling_recovers_a_temperature(data):
    calibrator = build_calibrator("vector_scaling").fit(data["val"], data["val_labels"])
    temperature = (
        build_calibrator("temperature_nll").fit(data["val"], data["val_labels"]).temperature
    )
    weights = np.asarray(calibrator.learned()["weights"])
    np.testing.assert_allclose(weights, 1 / temperature, rtol=0.35)


# --------------------------------------------------------------------------- degenerate fits


@pytest.mark.parametrize("name", ALL_NAMES)
def test_single_class_validation_set_warns_and_logs(name, data, caplog):
    labels = torch.zeros(60, dtype=torch.long)
    with caplog.at_level(logging.WARNING, logger="calib_pipeline.calibration.posthoc"):
        calibrator = build_calibrator(name).fit(data["val"][:60], labels)
    assert any("single class (0)" in w for w in calibrator.warnings)
    assert f"{name}: validation labels contain a single class" in caplog.text
    probabilities = calibrator.predict_proba(data["test"])
    assert bool(torch.isfinite(probabilities).all())


def test_a_new_posthoc_module_is_registered_without_an_import_line(tmp_path):
    """docs/architecture.md: a calibrator goes in a new ``calibration/_posthoc_*.py``; the
    package imports every such module, so the calibrator is buildable by name."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import calib_pipeline

    package = tmp_path / "calib_pipeline"
    shutil.copytree(
        Path(calib_pipeline.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__")
    )
    (package / "calibration" / "_posthoc_probe.py").write_text(
        "from calib_pipeline.calibration._posthoc_base import LogitCalibrator, register\n\n\n"
        "@register\nclass Probe(LogitCalibrator):\n    name = 'probe'\n"
    )
    code = (
        "from calib_pipeline.calibration.posthoc import CALIBRATORS\n"
        "assert 'probe' in CALIBRATORS.names(), CALIBRATORS.names()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def many_classes(k: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Overconfident logits of a k-class problem (true class +2.5 over unit noise, ×3)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(k, (n,), generator=generator)
    logits = torch.randn(n, k, generator=generator, dtype=torch.float64)
    logits[torch.arange(n), labels] += 2.5
    return 3.0 * logits, labels


def test_dirichlet_cv_chooses_its_regulariser_on_held_out_folds_and_keeps_accuracy():
    """Many classes and few validation samples: a fixed ODIR strength overfits the K(K+1)
    parameters and loses accuracy (the issue's Dirichlet on 100 classes); the λ chosen by
    cross-validation keeps it."""
    val, val_labels = many_classes(30, 600, seed=0)
    test, test_labels = many_classes(30, 2000, seed=1)

    def accuracy(probabilities: torch.Tensor) -> float:
        return float((probabilities.argmax(1) == test_labels).double().mean())

    grid = [1.0, 100.0, 1e4, 1e6]
    calibrator = build_calibrator("dirichlet_cv", l2_grid=grid, folds=3).fit(val, val_labels)
    learned = calibrator.learned()
    assert len(learned["cv_nll"]) == len(grid)
    tried = {l2: nll for l2, nll in zip(grid, learned["cv_nll"]) if nll is not None}
    assert learned["chosen_l2"] == min(tried, key=tried.get) > 1.0
    # the final fit converged; of the 3 x 4 fold fits, at most the weakest λ's hit max_iter
    assert calibrator.converged and learned["cv_unconverged"] <= 3
    uncalibrated = accuracy(torch.softmax(test, 1))
    assert accuracy(calibrator.predict_proba(test)) > uncalibrated - 0.01
    fixed = build_calibrator("dirichlet", off_diagonal_l2=1.0, intercept_l2=1.0).fit(
        val, val_labels
    )
    assert accuracy(fixed.predict_proba(test)) < uncalibrated - 0.05
    # same data, folds and seed: the same choice; the state stores it
    again = build_calibrator("dirichlet_cv", l2_grid=grid, folds=3).fit(val, val_labels)
    assert again.learned()["cv_nll"] == learned["cv_nll"]
    restored = calibrator_from_state(calibrator.state_dict())
    torch.testing.assert_close(restored.predict_proba(test), calibrator.predict_proba(test))


def test_dirichlet_cv_stops_weakening_after_two_worse_strengths():
    """On few samples of many classes the held-out NLL rises as λ weakens: the weakest λ,
    the slowest fits, are not tried (None) once two in a row did worse than the best."""
    val, val_labels = many_classes(30, 600, seed=0)
    grid = [1e-2, 1.0, 100.0, 1e4, 1e6]
    learned = build_calibrator("dirichlet_cv", l2_grid=grid, folds=3).fit(val, val_labels).learned()
    tried = [nll for nll in learned["cv_nll"] if nll is not None]
    assert learned["cv_nll"][0] is None and len(tried) >= 3
    assert tried[:2] == sorted(tried[:2], reverse=True)  # weaker, worse


def test_dirichlet_cv_warns_when_the_choice_is_at_an_end_of_its_grid(data):
    calibrator = build_calibrator("dirichlet_cv", l2_grid=[1e6, 1e7], folds=2)
    calibrator.fit(data["val"], data["val_labels"])
    assert any("at an end of l2_grid" in w and "widen the grid" in w for w in calibrator.warnings)
    with pytest.raises(ValueError, match="5-fold cross-validation needs at least 5 samples"):
        build_calibrator("dirichlet_cv").fit(data["val"][:3], data["val_labels"][:3])
