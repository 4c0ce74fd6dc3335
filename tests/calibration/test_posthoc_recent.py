"""The calibrators of issue 32: ETS and IRM (Zhang et al. 2020), spline (Gupta et al. 2021),
BBQ (Naeini et al. 2015), structured vector/matrix scaling (Berta et al. 2026) and
parameterised temperature scaling (Tomani et al. 2022). Hand-computed values, accuracy
preservation, saturated and tied inputs, failure paths; the generic checks (input
validation, round trips) run over every registered calibrator in test_posthoc*.py."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from calib_pipeline.calibration._posthoc_bbq import bdeu_binning, bin_counts_range
from calib_pipeline.calibration._posthoc_parameterized import sample_temperatures
from calib_pipeline.calibration._posthoc_spline import fit_spline_recalibration
from calib_pipeline.calibration._posthoc_temperature import fit_temperature_nll
from calib_pipeline.calibration.posthoc import (
    CALIBRATORS,
    build_calibrator,
    calibrator_from_state,
)

RECENT = [
    "ets",
    "irm",
    "spline",
    "bbq",
    "structured_vector_scaling",
    "structured_matrix_scaling",
    "parameterized_ts",
]
ACCURACY_PRESERVING = ["ets", "irm", "spline", "bbq", "parameterized_ts"]
# calibrators with a fitted temperature: netcal #61 returned the uncalibrated output
TEMPERATURE_FITTING = ["ets", "structured_vector_scaling", "structured_matrix_scaling"]


def overconfident(n: int, k: int, seed: int, scale: float = 3.0):
    """Logits of a calibrated model (labels drawn from its softmax) multiplied by ``scale``."""
    generator = torch.Generator().manual_seed(seed)
    base = 1.5 * torch.randn(n, k, generator=generator, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(base, dim=1), 1, generator=generator).squeeze(1)
    return scale * base, labels


def nll(probabilities: torch.Tensor, labels: torch.Tensor) -> float:
    label_probability = probabilities[torch.arange(labels.numel()), labels]
    return float(-label_probability.clamp(min=1e-300).log().mean())


@pytest.fixture(scope="module")
def split():
    val, val_labels = overconfident(1500, 6, seed=1)
    test, test_labels = overconfident(1500, 6, seed=2)
    return val, val_labels, test, test_labels


@pytest.fixture(scope="module")
def fitted(split):
    val, val_labels, _, _ = split
    return {name: build_calibrator(name).fit(val, val_labels) for name in RECENT}


# --------------------------------------------------------------------------- every one


@pytest.mark.parametrize("name", RECENT)
def test_each_lowers_the_test_nll_of_an_overconfident_model(name, fitted, split):
    _, _, test, test_labels = split
    uncalibrated = nll(torch.softmax(test, dim=1), test_labels)
    assert nll(fitted[name].predict_proba(test), test_labels) < uncalibrated - 0.1


@pytest.mark.parametrize("name", ACCURACY_PRESERVING)
def test_accuracy_preserving_ones_keep_every_test_prediction(name, fitted, split):
    test = split[2]
    assert torch.equal(fitted[name].predict_proba(test).argmax(dim=1), test.argmax(dim=1))


@pytest.mark.parametrize("name", TEMPERATURE_FITTING)
def test_a_fitted_temperature_is_used_not_just_reported(name, fitted, split):
    """netcal #61: the fitted temperature was reported but the uncalibrated output returned."""
    temperature = fitted[name].learned()["temperature"]
    assert temperature > 1.5  # the logits are 3× overconfident
    test = split[2]
    assert not torch.allclose(fitted[name].predict_proba(test), torch.softmax(test, dim=1))


@pytest.mark.parametrize("name", RECENT)
def test_saturated_confidences_and_ties_at_the_top_stay_finite_and_keep_the_first_maximum(
    name, split
):
    """torchmetrics #3510 / #1646: confidences of exactly 1 (and others of exactly 0) and
    rows tied at the top, at fit and at predict time."""
    val, val_labels, _, _ = split
    val = val.clone()
    val[:200] *= 1000.0  # softmax rounds to exactly 1 and 0
    val[200:300, 1] = val[200:300, 0] = val[200:300].max(dim=1).values  # a tie at the top
    calibrator = build_calibrator(name).fit(val, val_labels)
    probabilities = calibrator.predict_proba(val)
    assert bool(torch.isfinite(probabilities).all()) and bool((probabilities >= 0).all())
    torch.testing.assert_close(probabilities.sum(dim=1), torch.ones(1500, dtype=torch.float64))
    if name in ACCURACY_PRESERVING:
        kept = probabilities.argmax(dim=1) == val.argmax(dim=1)
        assert bool(kept.all()), f"{int((~kept).sum())} predictions changed"
    restored = calibrator_from_state(calibrator.state_dict())
    assert torch.equal(restored.predict_proba(val), probabilities)


@pytest.mark.parametrize(
    ("name", "hyperparameters", "message"),
    [
        ("ets", {"loss": "ce"}, "loss must be one of 'mse', 'nll'"),
        ("ets", {"t_min": 2.0, "t_max": 1.0}, r"t_max must be in \(2.0"),
        ("irm", {"n_bins": 15}, "accepts: no parameters"),
        ("spline", {"n_knots": 1}, r"n_knots must be an integer in \[2, 1000\], got 1"),
        ("spline", {"n_knots": 6.5}, "n_knots must be an integer"),
        ("bbq", {"equivalent_sample_size": 0.0}, r"equivalent_sample_size must be in \(0"),
        ("bbq", {"range_factor": 0.5}, r"range_factor must be in \[1"),
        ("structured_vector_scaling", {"diagonal_l2": -1.0}, r"diagonal_l2 must be in \[0"),
        ("structured_vector_scaling", {"off_diagonal_l2": 1.0}, "unknown parameter"),
        ("structured_matrix_scaling", {"tau": math.nan}, "tau must be a finite number"),
        ("structured_matrix_scaling", {"max_iter": -1}, "max_iter must be an integer >= 0"),
        ("parameterized_ts", {"hidden": 5}, "hidden must be a list of layer widths"),
        ("parameterized_ts", {"hidden": [5, 0]}, "hidden layer width must be an integer >= 1"),
        ("parameterized_ts", {"top_k": 0}, "top_k must be an integer >= 1"),
        ("parameterized_ts", {"loss": "focal"}, "loss must be one of 'mse', 'nll'"),
    ],
)
def test_bad_hyperparameters_fail_when_built(name, hyperparameters, message):
    with pytest.raises(ValueError, match=message):
        build_calibrator(name, **hyperparameters)


@pytest.mark.parametrize("name", RECENT)
def test_predicting_before_fitting_or_on_other_classes_fails(name, fitted, split):
    with pytest.raises(ValueError, match="not fitted"):
        build_calibrator(name).predict_proba(split[2])
    with pytest.raises(ValueError, match="fitted on 6 classes but got logits with 4 classes"):
        fitted[name].predict_proba(split[2][:, :4])
    with pytest.raises(ValueError, match="shape mismatch"):
        build_calibrator(name).fit(split[0], split[1][:-1])


# --------------------------------------------------------------------------- ETS


def test_ets_outputs_its_weighted_mixture(fitted, split):
    ets = fitted["ets"]
    learned, test = ets.learned(), split[2]
    w = learned["weights"]
    expected = (
        w[0] * torch.softmax(test / learned["temperature"], dim=1)
        + w[1] * torch.softmax(test, dim=1)
        + w[2] / test.shape[1]
    )
    torch.testing.assert_close(ets.predict_proba(test), expected, rtol=0, atol=1e-15)
    assert min(w) >= 0 and math.isclose(sum(w), 1.0, abs_tol=1e-12)


def test_ets_with_nll_uses_the_exact_nll_temperature(split):
    val, val_labels, _, _ = split
    ets = build_calibrator("ets", loss="nll").fit(val, val_labels)
    assert ets.learned()["temperature"] == fit_temperature_nll(val, val_labels).temperature


def test_ets_mostly_uniform_when_the_labels_ignore_the_logits():
    val, _ = overconfident(2000, 4, seed=3)
    random_labels = torch.randint(0, 4, (2000,), generator=torch.Generator().manual_seed(4))
    weights = build_calibrator("ets").fit(val, random_labels).learned()["weights"]
    # T → t_max also makes softmax(z/T) uniform; either way the output is near uniform
    probabilities = build_calibrator("ets").fit(val, random_labels).predict_proba(val)
    assert float((probabilities - 0.25).abs().max()) < 0.05, weights


def test_ets_hand_computed_two_sample_mixture():
    """One row ``[log 3, 0]`` (softmax 0.75/0.25) twice, labels 0 and 1: with loss="mse"
    the best p₀ is 0.5, the uniform distribution: every weight vector with
    ``0.75·(w₁' + w₂) + 0.5·w₃ = 0.5`` (w₁' the share of softmax(z/T)) is optimal, and the
    fitted output is 0.5 exactly whatever T."""
    logits = torch.tensor([[math.log(3.0), 0.0]] * 2, dtype=torch.float64)
    ets = build_calibrator("ets").fit(logits, torch.tensor([0, 1]))
    torch.testing.assert_close(
        ets.predict_proba(logits), torch.full((2, 2), 0.5, dtype=torch.float64), atol=1e-6, rtol=0
    )


# --------------------------------------------------------------------------- IRM


def test_irm_hand_computed_pooled_isotonic_map():
    """p = [.9,.1], [.6,.4], [.3,.7], labels 0, 1, 1: the six pairs sorted by p are
    (.1,0) (.3,0) (.4,1) (.6,0) (.7,1) (.9,1); pooling (.4,1)(.6,0) gives g = 0, 0, .5,
    .5, 1, 1. Rows: [1, 0], [.5, .5] tie-broken by 1e-9·p towards class 0, [0, 1]."""
    probabilities = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]], dtype=torch.float64)
    irm = build_calibrator("irm").fit(probabilities.log(), torch.tensor([0, 1, 1]))
    assert irm.learned()["y_thresholds"] == [0.0, 0.0, 0.5, 0.5, 1.0, 1.0]
    calibrated = irm.predict_proba(probabilities.log())
    expected = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(calibrated, expected, atol=1e-9, rtol=0)
    assert calibrated[1, 0] > calibrated[1, 1]  # the tie is broken by the input's order


# --------------------------------------------------------------------------- spline


def test_spline_with_two_knots_shifts_by_the_slope_of_a_straight_line():
    """Two knots: the natural spline is the least-squares line of (Ã − H̃) on x_i = i/(N−1),
    its derivative the line's slope b, and the recalibrated confidence c + b."""
    confidence = np.array([0.55, 0.6, 0.7, 0.8, 0.9, 0.95])
    correct = np.array([0.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    gap = (np.cumsum(correct) - np.cumsum(confidence)) / 6
    slope = np.polyfit(np.linspace(0, 1, 6), gap, 1)[0]
    scores, values = fit_spline_recalibration(confidence[::-1].copy(), correct[::-1].copy(), 2)
    np.testing.assert_allclose(scores, confidence)
    np.testing.assert_allclose(values, np.clip(confidence + slope, 0, 1), atol=1e-12)


def test_spline_tied_confidences_get_one_value_and_the_map_interpolates():
    scores, values = fit_spline_recalibration(
        np.array([0.5, 0.7, 0.7, 1.0, 1.0, 1.0]), np.array([0.0, 1, 0, 1, 1, 1]), 3
    )
    np.testing.assert_array_equal(scores, [0.5, 0.7, 1.0])
    assert values.shape == (3,) and bool(((values >= 0) & (values <= 1)).all())


# --------------------------------------------------------------------------- BBQ


def test_bdeu_score_and_posterior_means_by_hand():
    """Bins [0, .5] and (.5, 1], 2 samples each, 0 and 2 correct, N' = 2: strength 1,
    α = (.25, .75), β = (.75, .25); each bin contributes lnΓ(1) − lnΓ(3) + lnΓ(2.75) −
    lnΓ(.75) = ln(1.75·.75/2) = ln .65625; posterior means .25/3 and 2.75/3."""
    log_score, values = bdeu_binning(
        np.array([0.0, 0.5, 1.0]), np.array([2.0, 2.0]), np.array([0.0, 2.0]), 2.0
    )
    assert math.isclose(log_score, 2 * math.log(0.65625), rel_tol=1e-12)
    np.testing.assert_allclose(values, [1 / 12, 11 / 12], rtol=1e-12)


def test_bbq_bin_count_range_follows_the_cube_root_rule():
    assert bin_counts_range(1000, 10.0) == range(1, 101)
    assert bin_counts_range(8, 1.0) == range(2, 3)
    assert bin_counts_range(3, 10.0) == range(1, 4)  # never more bins than samples


def test_bbq_averages_its_models_by_their_normalised_scores(fitted, split):
    bbq, test = fitted["bbq"], split[2]
    learned = bbq.learned()
    assert learned["bin_counts"] == list(bin_counts_range(1500, 10.0))
    assert math.isclose(sum(learned["model_weights"]), 1.0, rel_tol=1e-12)
    confidence = bbq.calibrate_confidence(test)
    by_hand = sum(
        w * m(torch.softmax(test, 1).max(1).values) for w, m in zip(bbq.model_weights, bbq.maps)
    )
    torch.testing.assert_close(confidence, by_hand, atol=1e-12, rtol=0)


# --------------------------------------------------------------------------- structured scaling


def test_structured_penalties_scale_with_classes_and_samples():
    svs = build_calibrator("structured_vector_scaling", intercept_l2=2.0, diagonal_l2=3.0)
    assert svs._penalty_strengths(0.0, 0.0, 100, 4) == pytest.approx((0.0, 0.12, 0.08))
    sms = build_calibrator("structured_matrix_scaling", off_diagonal_l2=1.0, rho=1.0, tau=0.5)
    assert sms._penalty_strengths(0.0, 0.0, 100, 4) == pytest.approx((1.2, 0.4, 0.4))


@pytest.mark.parametrize("name", ["structured_vector_scaling", "structured_matrix_scaling"])
def test_structured_fit_is_a_stationary_point_of_its_objective(name, fitted, split):
    """The objective written out independently: mean NLL of W·log softmax(z/T) + b plus the
    three ridge terms; its autograd gradient vanishes at the fitted W, b."""
    calibrator, (val, val_labels, _, _) = fitted[name], split
    n, k = val.shape
    features = torch.log_softmax(val / calibrator.temperature, dim=1)
    weights = calibrator.weights.clone().requires_grad_(True)
    bias = calibrator.bias.clone().requires_grad_(True)
    matrix = torch.diag(weights) if weights.dim() == 1 else weights
    eye = torch.eye(k, dtype=torch.float64)
    loss = (
        torch.nn.functional.cross_entropy(features @ matrix.T + bias, val_labels)
        + k / n * (bias**2).sum()
        + k / n * ((torch.diagonal(matrix) - 1) ** 2).sum()
        + k * (k - 1) / n * ((matrix * (1 - eye)) ** 2).sum() * (weights.dim() == 2)
    )
    gradients = torch.autograd.grad(loss, [weights, bias])
    assert max(float(g.abs().max()) for g in gradients) < 1e-4


def test_strong_structured_penalty_leaves_temperature_scaling(split):
    val, val_labels, test, _ = split
    strong = build_calibrator(
        "structured_matrix_scaling", intercept_l2=1e9, diagonal_l2=1e9, off_diagonal_l2=1e9
    ).fit(val, val_labels)
    temperature = fit_temperature_nll(val, val_labels).temperature
    torch.testing.assert_close(
        strong.predict_proba(test), torch.softmax(test / temperature, dim=1), atol=1e-6, rtol=0
    )


# --------------------------------------------------------------------------- PTS


def test_pts_temperature_network_by_hand():
    """k = 2, one hidden unit: h = relu(1·z₍₁₎ − 1·z₍₂₎ + 0), T = |2·h − 1|."""
    layers = [
        (torch.tensor([[1.0, -1.0]]), torch.tensor([0.0])),
        (torch.tensor([[2.0]]), torch.tensor([-1.0])),
    ]
    logits = torch.tensor([[0.0, 3.0, 1.0], [0.0, 0.0, 0.0], [0.2, 0.0, 0.1]])
    temperatures = sample_temperatures(logits, layers, k=2)
    # gaps 2, 0 and 0.1: T = |4 − 1| = 3, |−1| = 1, |0.2 − 1| = 0.8
    torch.testing.assert_close(temperatures, torch.tensor([3.0, 1.0, 0.8]))


def test_pts_is_seeded_and_deterministic(split):
    val, val_labels, test, _ = split
    first = build_calibrator("parameterized_ts", seed=3).fit(val, val_labels)
    again = build_calibrator("parameterized_ts", seed=3).fit(val, val_labels)
    assert torch.equal(first.parameters, again.parameters)
    other = build_calibrator("parameterized_ts", seed=4).fit(val, val_labels)
    assert not torch.equal(first.parameters, other.parameters)
    temperatures = first.temperatures(test)
    assert float(temperatures.median()) > 2.0  # a 3× overconfident model is cooled
    torch.testing.assert_close(
        first.transform_logits(test), test / temperatures.unsqueeze(1), rtol=0, atol=0
    )


def test_pts_uses_at_most_the_available_classes():
    val, val_labels = overconfident(300, 3, seed=5)
    assert build_calibrator("parameterized_ts", top_k=10).fit(val, val_labels).learned()["k"] == 3


def test_every_registered_calibrator_has_a_row_in_docs_posthoc():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "posthoc.md").read_text()
    missing = [name for name in CALIBRATORS.names() if f"\n| `{name}` |" not in doc]
    assert not missing, f"docs/posthoc.md has no row for {missing}"
