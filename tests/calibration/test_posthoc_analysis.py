"""Calibratability analyses: validation-size sweep, oracle temperature, stratified subsamples."""

from __future__ import annotations

import math

import pytest
import torch

from calib_pipeline.calibration import metrics
from calib_pipeline.calibration.posthoc import (
    build_calibrator,
    calibrated_scores,
    oracle_temperature,
    stratified_subsample,
    temperature_grid,
    validation_size_sweep,
)


def make_logits(n: int, k: int, *, scale: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    base = 2.5 * torch.randn(n, k, generator=generator, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(base, dim=1), 1, generator=generator).squeeze(1)
    return (scale * base).to(torch.float32), labels


@pytest.fixture(scope="module")
def split():
    val_logits, val_labels = make_logits(500, 4, scale=2.5, seed=11)
    test_logits, test_labels = make_logits(300, 4, scale=2.5, seed=12)
    return val_logits, val_labels, test_logits, test_labels


def test_stratified_subsample_keeps_class_proportions():
    labels = torch.tensor([0] * 50 + [1] * 30 + [2] * 20)
    index = stratified_subsample(labels, 25, seed=3)
    assert index.numel() == 25 and torch.unique(index).numel() == 25
    # quotas 12.5, 7.5, 5: the leftover row goes to class 0 or 1 (fraction 0.5 each), never 2
    assert torch.bincount(labels[index], minlength=3).tolist() in ([13, 7, 5], [12, 8, 5])
    drawn = {
        tuple(
            torch.bincount(labels[stratified_subsample(labels, 25, seed=s)], minlength=3).tolist()
        )
        for s in range(20)
    }
    assert drawn == {(13, 7, 5), (12, 8, 5)}
    assert torch.equal(index, stratified_subsample(labels, 25, seed=3))
    assert not torch.equal(index, stratified_subsample(labels, 25, seed=4))
    assert torch.equal(
        torch.sort(stratified_subsample(labels, 100, seed=0)).values, torch.arange(100)
    )


def test_validation_size_sweep_rows_match_fits_on_the_same_subsamples(split):
    val_logits, val_labels, test_logits, test_labels = split
    rows = validation_size_sweep(
        "temperature_grid_ece",
        val_logits,
        val_labels,
        test_logits,
        test_labels,
        sizes=[40, 200],
        seeds=[0, 1],
        preset="mukhoti",
    )
    assert [(r["size"], r["seed"]) for r in rows] == [(40, 0), (40, 1), (200, 0), (200, 1)]
    index = stratified_subsample(val_labels, 200, 1)
    calibrator = build_calibrator("temperature_grid_ece", preset="mukhoti").fit(
        val_logits[index], val_labels[index]
    )
    expected = float(metrics.ece(calibrator.transform_logits(test_logits), test_labels))
    assert rows[3] == {
        "calibrator": "temperature_grid_ece",
        "size": 200,
        "seed": 1,
        "metric": "ece",
        "value": pytest.approx(expected, abs=1e-12),
        "temperature": calibrator.temperature,
        "converged": True,
        "warnings": "",
    }


def test_validation_size_sweep_scores_probability_calibrators(split):
    rows = validation_size_sweep(
        "histogram_binning",
        *split,
        sizes=[100],
        seeds=[0],
        stratified=False,
        metric="ece_em",
        binning="equal_mass",
    )
    val_logits, val_labels, test_logits, test_labels = split
    index = torch.randperm(500, generator=torch.Generator().manual_seed(0))[:100]
    calibrator = build_calibrator("histogram_binning", binning="equal_mass").fit(
        val_logits[index], val_labels[index]
    )
    scores, inputs = calibrated_scores(calibrator, test_logits)
    assert inputs == "probs" and rows[0]["temperature"] is None
    assert rows[0]["value"] == pytest.approx(
        float(metrics.ece_em(scores, test_labels, inputs="probs"))
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"test_logits": torch.zeros(300, 5)},
            "validation logits have 4 classes but test logits have 5",
        ),
        ({"sizes": [0, 10]}, r"sizes must be .* in \[1, 500\]"),
        ({"sizes": [501]}, r"in \[1, 500\]"),
        ({"seeds": [-1]}, "seeds must be"),
        ({"metric": "ecee"}, "unknown metric 'ecee'; valid metric names are: accuracy"),
        ({"name": "platt"}, "unknown calibrator 'platt'"),
        ({"n_bins": 0}, "n_bins must be"),
        ({"val_logits": torch.full((500, 4), math.nan)}, "NaN"),
        (
            {"val_logits": torch.zeros(0, 4), "val_labels": torch.zeros(0, dtype=torch.long)},
            "empty input",
        ),
        ({"test_labels": torch.full((300,), 7)}, "labels out of range"),
    ],
)
def test_validation_size_sweep_rejects_bad_input_before_fitting(
    split, monkeypatch, change, message
):
    val_logits, val_labels, test_logits, test_labels = split
    arguments = {
        "name": "histogram_binning",
        "val_logits": val_logits,
        "val_labels": val_labels,
        "test_logits": test_logits,
        "test_labels": test_labels,
        "sizes": [50],
        "seeds": [0],
    }
    arguments.update(change)
    from calib_pipeline.calibration import _posthoc_base

    monkeypatch.setattr(_posthoc_base.Calibrator, "fit", lambda *_: pytest.fail("fitted"))
    with pytest.raises(ValueError, match=message):
        validation_size_sweep(**arguments)


def test_oracle_temperature_is_the_brute_force_minimum_on_the_evaluation_set(split):
    _, _, test_logits, test_labels = split
    result = oracle_temperature(test_logits, test_labels, grid=(0.5, 5.0, 0.05))
    scored = {
        float(t): float(metrics.ece(test_logits / t, test_labels))
        for t in temperature_grid(0.5, 5.0, 0.05)
    }
    best = min(scored, key=scored.get)
    assert result["oracle"] is True
    assert result["oracle_temperature"] == best
    assert result["oracle_ece"] == pytest.approx(scored[best], abs=1e-15)
    assert result["oracle_ece"] <= scored[1.0] <= result["uncalibrated_ece"] + 1e-12
    assert (result["grid_start"], result["grid_stop"], result["grid_step"]) == (0.5, 5.0, 0.05)
    assert result["at_grid_bound"] is False


def test_oracle_temperature_defaults_to_wang_grid_and_validates(split):
    _, _, test_logits, test_labels = split
    result = oracle_temperature(test_logits[:100], test_labels[:100])
    assert (result["grid_start"], result["grid_stop"], result["grid_step"]) == (0.01, 10.0, 0.01)
    with pytest.raises(ValueError, match="unknown temperature grid preset 'best'"):
        oracle_temperature(test_logits, test_labels, grid="best")
    with pytest.raises(ValueError, match="labels out of range"):
        oracle_temperature(test_logits, test_labels + 4)


def test_a_subsample_smaller_than_the_number_of_classes_draws_its_classes_at_random():
    labels = torch.arange(100).repeat_interleave(50)  # 100 balanced classes, as CIFAR-100's val
    classes = [
        frozenset(labels[stratified_subsample(labels, 20, seed=s)].tolist()) for s in range(5)
    ]
    assert all(len(c) == 20 for c in classes), "one row per class drawn"
    assert len(set(classes)) == 5, "each seed draws other classes"
    assert classes[0] != frozenset(range(20)), "not the lowest-numbered classes"
