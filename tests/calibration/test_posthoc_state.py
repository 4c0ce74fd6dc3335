"""Calibrators as plain data: ``state_dict`` -> ``torch.save`` -> ``torch.load(weights_only=True)``
-> ``calibrator_from_state`` gives back the same calibrator; malformed states are refused."""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest
import torch
from sklearn.isotonic import IsotonicRegression

from calib_pipeline.calibration._posthoc_binning import IsotonicMap
from calib_pipeline.calibration.posthoc import (
    CALIBRATORS,
    STATE_FORMAT,
    build_calibrator,
    calibrator_from_state,
)
from tests.calibration.same_calibrator import assert_same_calibrator


def make_logits(n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    logits = 3.0 * torch.randn(n, k, generator=generator)
    labels = torch.multinomial(torch.softmax(logits / 2, dim=1), 1, generator=generator)
    return logits, labels.squeeze(1)


@pytest.fixture(scope="module")
def data() -> dict[str, torch.Tensor]:
    val_logits, val_labels = make_logits(300, 4, seed=1)
    test_logits, _ = make_logits(200, 4, seed=2)
    return {"val": val_logits, "val_labels": val_labels, "test": test_logits}


def through_weights_only_file(state: dict) -> dict:
    """``state`` written with ``torch.save`` and read back the only way the project reads."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("name", CALIBRATORS.names())
def test_every_calibrator_round_trips_through_a_weights_only_file(name, data):
    original = build_calibrator(name).fit(data["val"], data["val_labels"])
    state = through_weights_only_file(original.state_dict())
    assert (state["format"], state["name"]) == (STATE_FORMAT, name)
    restored = calibrator_from_state(state)
    assert_same_calibrator(restored, original, data["test"])
    assert restored.hyperparameters == original.hyperparameters


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("temperature_grid_ece", {"preset": "wang", "n_bins": 10}),
        ("temperature_grid_ece", {"start": 0.5, "stop": 3.0, "step": 0.25}),
        ("temperature_nll", {"on_separable": "bound", "t_max": 1.5}),
        ("temperature_fixed", {"temperature": 1.1}),
        ("histogram_binning", {"n_bins": 200, "binning": "equal_size"}),  # empty (NaN) bins
        ("scaling_binning", {"n_bins": 400, "seed": 3}),  # warns: too few samples to bin
        ("vector_scaling", {"intercept_l2": 1.0}),
        ("dirichlet", {"max_iter": 0}),  # warns, not converged
    ],
)
def test_hyperparameters_warnings_and_empty_bins_survive(name, params, data, caplog):
    original = build_calibrator(name, **params).fit(data["val"], data["val_labels"])
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        restored = calibrator_from_state(through_weights_only_file(original.state_dict()))
    assert not caplog.records, "restoring a fit does not log its warnings again"
    assert_same_calibrator(restored, original, data["test"])
    assert restored.hyperparameters == original.hyperparameters


def test_the_fit_warnings_reports_read_are_restored(data):
    original = build_calibrator("dirichlet", max_iter=0).fit(data["val"], data["val_labels"])
    restored = calibrator_from_state(through_weights_only_file(original.state_dict()))
    assert restored.converged is False and restored.warnings == original.warnings != []


def test_an_unfitted_calibrator_stays_unfitted():
    restored = calibrator_from_state(build_calibrator("platt_top_label").state_dict())
    assert restored.n_classes is None
    with pytest.raises(ValueError, match="is not fitted"):
        restored.predict_proba(torch.zeros(2, 3))


def test_isotonic_knots_predict_exactly_as_scikit_learn():
    generator = np.random.default_rng(0)
    scores = generator.uniform(0.2, 0.9, 500)
    targets = (generator.uniform(size=500) < scores).astype(np.float64)
    reference = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
    reference.fit(scores, targets)
    knots = reference.X_thresholds_
    queries = np.concatenate(
        [generator.uniform(0, 1, 2000), knots, (knots[1:] + knots[:-1]) / 2, [0.0, 1.0]]
    )
    mapped = IsotonicMap.fit(scores, targets)(queries)
    np.testing.assert_array_equal(mapped, reference.predict(queries))
    constant = IsotonicMap.fit(np.full(5, 0.7), np.array([1.0, 0, 1, 1, 0]))
    np.testing.assert_array_equal(constant(np.array([0.1, 0.7, 0.9])), np.full(3, 0.6))


def fitted_state(name: str, data) -> dict:
    return build_calibrator(name).fit(data["val"], data["val_labels"]).state_dict()


def edited(state: dict, path: tuple, value) -> dict:
    """A copy of ``state`` with the entry at ``path`` set to ``value`` (deleted for ``...``)."""
    copy = through_weights_only_file(state)
    target = copy
    for key in path[:-1]:
        target = target[key]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return copy


@pytest.mark.parametrize(
    ("name", "path", "value", "message"),
    [
        ("temperature_nll", ("name",), "no_such", "unknown calibrator 'no_such'"),
        ("temperature_nll", ("arguments",), [1, 2], "not a calibrator state"),
        ("temperature_nll", ("arguments", "t_min"), -1.0, "t_min must be in"),
        ("temperature_nll", ("arguments", "speed"), 3, "unknown parameter"),
        ("temperature_nll", ("format",), 99, "format 99 is not supported"),
        ("temperature_nll", ("converged",), "yes", "converged"),
        ("temperature_nll", ("warnings",), [3], "warnings"),
        ("temperature_nll", ("n_classes",), 1, "n_classes"),
        ("temperature_nll", ("fitted", "temperature"), ..., "holds the attributes temperature"),
        ("temperature_nll", ("fitted", "temperature"), {"a": 1}, "not a stored map"),
        ("temperature_nll", ("fitted",), None, "holds the attributes"),
        ("temperature_nll", ("extra",), 1, "with the keys"),
        ("histogram_binning", ("fitted", "map", "map"), "os.system", "not a stored map"),
        ("histogram_binning", ("fitted", "map", "state", "edges"), [0.0], "dict of the tensors"),
        ("isotonic_one_vs_rest", ("fitted", "maps", 0, "state"), {}, "dict of the tensors"),
    ],
)
def test_a_malformed_state_is_refused_with_its_reason(name, path, value, message, data):
    state = edited(fitted_state(name, data), path, value)
    with pytest.raises(ValueError, match=message):
        calibrator_from_state(state)


def test_a_state_is_refused_by_another_calibrator(data):
    state = fitted_state("temperature_nll", data)
    with pytest.raises(ValueError, match="does not belong to 'temperature_grid_ece'"):
        build_calibrator("temperature_grid_ece").load_state_dict(state)
    with pytest.raises(ValueError, match="does not belong"):
        build_calibrator("temperature_nll", t_max=50.0).load_state_dict(state)


def test_a_fitted_value_that_is_not_plain_data_cannot_be_stored(data):
    calibrator = build_calibrator("platt_top_label").fit(data["val"], data["val_labels"])
    calibrator.slope = {1, 2}
    with pytest.raises(TypeError, match="fitted attribute 'slope' holds a set"):
        calibrator.state_dict()
