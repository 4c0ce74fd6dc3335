"""Loading a user's predictions file: the values checked as the metrics check them, the
scores calibrators fit on, and every refusal naming the file (the formats' layouts are
tested in tests/data/test_predictions.py)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from calib_pipeline.calibration.predictions import load_predictions
from tests.data.test_predictions import (
    NETCAL_KEYS,
    K,
    as_probs,
    bad_npz,
    csv_text,
    netcal_like,
    synthetic,
    write,
)


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".csv"])
@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_each_format_loads_as_validated_tensors(tmp_path, suffix, kind):
    arrays = synthetic() if kind == "logits" else as_probs(synthetic())
    path = write(tmp_path / f"model{suffix}", arrays)
    predictions = load_predictions(path)
    assert predictions.inputs == kind and predictions.num_classes == K
    for split in ("val", "test"):
        assert predictions.scores[split].dtype == torch.float64
        assert predictions.labels[split].dtype == torch.int64
        np.testing.assert_array_equal(predictions.scores[split].numpy(), arrays[f"{split}_{kind}"])
        np.testing.assert_array_equal(predictions.labels[split].numpy(), arrays[f"{split}_labels"])
    assert predictions.source == str(path)
    assert predictions.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_float32_scores_stay_float32_and_binary_scores_get_two_columns(tmp_path):
    arrays = {k: v.astype(np.float32) if "logits" in k else v for k, v in synthetic().items()}
    float32 = load_predictions(write(tmp_path / "f32.npz", arrays))
    assert float32.scores["val"].dtype == torch.float32
    binary = {
        "val_probs": np.array([0.2, 0.9]),
        "val_labels": np.array([0, 1]),
        "test_probs": np.array([0.6]),
        "test_labels": np.array([1]),
    }
    predictions = load_predictions(write(tmp_path / "binary.npz", binary))
    assert predictions.scores["test"].tolist() == [[pytest.approx(0.4), 0.6]]


def test_log_probabilities_are_finite_logits_with_the_same_softmax(tmp_path):
    arrays = as_probs(synthetic())
    arrays["val_probs"][0] = [1.0, 0.0, 0.0]
    predictions = load_predictions(write(tmp_path / "p.npz", arrays))
    log_probs = predictions.calibration_logits("val")
    assert bool(torch.isfinite(log_probs).all())
    np.testing.assert_allclose(torch.softmax(log_probs, 1).numpy(), arrays["val_probs"], atol=1e-12)
    logits = load_predictions(write(tmp_path / "z.npz", synthetic()))
    assert logits.calibration_logits("test") is logits.scores["test"]


def test_calibrators_of_another_file_are_refused(tmp_path):
    first = load_predictions(write(tmp_path / "a.npz", synthetic(seed=0)))
    second = load_predictions(write(tmp_path / "b.npz", synthetic(seed=1)))
    first.check_provenance(first.provenance())
    with pytest.raises(ValueError, match=r"fitted on .*a.npz \(sha256 \w{12}\), not on .*b.npz"):
        second.check_provenance(first.provenance())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a["val_logits"].__setitem__((0, 0), np.nan), "val split .*NaN"),
        (lambda a: a["test_labels"].__setitem__(0, K), "test split .*labels out of range: found 3"),
        (lambda a: a.update(test_labels=a["test_labels"] + 0.5), "non-integer value"),
        (lambda a: a.update(test_labels=a["test_labels"][:-1]), "test split .*shape mismatch"),
        (
            lambda a: a.update(
                test_logits=a["test_logits"][:, :2], test_labels=a["test_labels"] % 2
            ),
            r"different class counts \{'val': 3, 'test': 2\}",
        ),
        (
            lambda a: a.update(
                val_logits=a["val_logits"][:, :1],
                test_logits=a["test_logits"][:, :1],
                val_labels=0 * a["val_labels"],
                test_labels=0 * a["test_labels"],
            ),
            "at least 2",
        ),
        (lambda a: a.update(val_labels=a["val_labels"].astype(str)), "val_labels must be numeric"),
        (
            lambda a: a.update(val_logits=a["val_logits"][:0], val_labels=a["val_labels"][:0]),
            "empty input",
        ),
        (lambda a: a.pop("test_labels"), r"missing \['test_labels'\]"),  # the reader's refusal
    ],
)
def test_bad_values_are_refused_naming_the_file_and_the_fault(tmp_path, change, message):
    path = bad_npz(tmp_path, change)
    with pytest.raises(ValueError, match=f"predictions file {path}: .*{message}"):
        load_predictions(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda a: a["val_probs"].__setitem__(0, [0.5, 0.4, 0.3]),
            "rows must sum to 1 within 0.001; row .0,. sums to 1.2",
        ),
        (lambda a: a["test_probs"].__setitem__(1, [1.2, -0.2, 0.0]), r"must lie in \[0, 1\]"),
    ],
)
def test_probabilities_must_be_probabilities(tmp_path, change, message):
    arrays = as_probs(synthetic())
    change(arrays)
    path = write(tmp_path / "bad.npz", arrays)
    with pytest.raises(ValueError, match=f"predictions file {path}: .*{message}"):
        load_predictions(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("split,label,logit_0,logit_1\nval,0,1,\ntest,1,0,1\n", "val split .*NaN"),
        ("split,label,prob_0,prob_1\nval,0,0.7,0.7\ntest,1,0.5,0.5\n", "rows must sum to 1"),
    ],
)
def test_bad_csv_values_are_refused_naming_the_file(tmp_path, text, message):
    path = csv_text(tmp_path, text)
    with pytest.raises(ValueError, match=f"predictions file {path}: .*{message}"):
        load_predictions(path)


def test_a_one_split_file_is_split_by_the_stated_fraction_stratified_and_seeded(tmp_path):
    arrays = netcal_like(n=400, k=4)
    path = write(tmp_path / "netcal.npz", arrays)
    predictions = load_predictions(path, keys=NETCAL_KEYS, val_fraction=0.25, split_seed=3)
    assert predictions.inputs == "probs" and predictions.num_classes == 4
    labels = arrays["ground_truth"]
    val, test = predictions.labels["val"].numpy(), predictions.labels["test"].numpy()
    assert len(val) + len(test) == 400
    # every class split 1:3, up to one sample of rounding
    for k in range(4):
        assert abs((val == k).sum() - 0.25 * (labels == k).sum()) <= 1
    assert predictions.split == "val fraction 0.25 of 400, stratified by class, seed 3"
    assert predictions.describe() == (
        f"netcal.npz: 4 classes, probabilities, val {len(val)} / test {len(test)} "
        "(val fraction 0.25 of 400, stratified by class, seed 3)"
    )
    again = load_predictions(path, keys=NETCAL_KEYS, val_fraction=0.25, split_seed=3)
    assert torch.equal(again.scores["val"], predictions.scores["val"])
    other = load_predictions(path, keys=NETCAL_KEYS, val_fraction=0.25, split_seed=4)
    assert not torch.equal(other.scores["val"], predictions.scores["val"])
    # the rows keep their scores: each val row is a row of the file with its label
    rows = {tuple(np.round(r, 12)): y for r, y in zip(arrays["predictions"], labels)}
    for r, y in zip(predictions.scores["val"].numpy(), val):
        assert rows[tuple(np.round(r, 12))] == y


def test_a_one_split_file_without_a_fraction_and_a_two_split_file_with_one_are_refused(tmp_path):
    path = write(tmp_path / "netcal.npz", netcal_like())
    with pytest.raises(
        ValueError, match=r"netcal.npz: holds one split \(probs, labels\) and no val/test"
    ):
        load_predictions(path, keys=NETCAL_KEYS)
    both = write(tmp_path / "both.npz", synthetic())
    with pytest.raises(ValueError, match=r"holds val and test already; predictions\.val_fraction"):
        load_predictions(both, val_fraction=0.5)
    with pytest.raises(ValueError, match=r"val_fraction must be in \(0, 1\)"):
        load_predictions(path, keys=NETCAL_KEYS, val_fraction=1.5)
    assert load_predictions(both).split == "val and test as given"


def test_calibrators_fitted_on_another_split_of_the_file_are_refused(tmp_path):
    path = write(tmp_path / "netcal.npz", netcal_like())
    half = load_predictions(path, keys=NETCAL_KEYS, val_fraction=0.5)
    third = load_predictions(path, keys=NETCAL_KEYS, val_fraction=0.3)
    with pytest.raises(ValueError, match=r"fitted on the val split of 'val fraction 0\.5"):
        third.check_provenance(half.provenance())
