"""Reading a user's predictions file: each format's layout, and every refusal naming the file."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from calib_pipeline.data.predictions import (
    check_predictions_path,
    load_predictions,
    output_name,
)

K = 3


def synthetic(n: int = 40, seed: int = 0) -> dict[str, np.ndarray]:
    """val/test logits and labels of a K-class problem."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for split in ("val", "test"):
        labels = rng.integers(0, K, n)
        logits = rng.normal(size=(n, K))
        logits[np.arange(n), labels] += 1.5
        arrays[f"{split}_logits"], arrays[f"{split}_labels"] = logits, labels
    return arrays


def as_probs(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for key, value in arrays.items():
        if key.endswith("_logits"):
            out[key.replace("_logits", "_probs")] = torch.softmax(torch.as_tensor(value), 1).numpy()
        else:
            out[key] = value
    return out


def write(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """``arrays`` in the layout of ``path``'s format."""
    if path.suffix == ".npz":
        np.savez(path, **arrays)
    elif path.suffix == ".pt":
        torch.save({k: torch.as_tensor(v) for k, v in arrays.items()}, path)
    else:
        frames = []
        for split in ("val", "test"):
            kind = "logits" if f"{split}_logits" in arrays else "probs"
            scores = arrays[f"{split}_{kind}"]
            prefix = "logit" if kind == "logits" else "prob"
            frame = pd.DataFrame(scores, columns=[f"{prefix}_{k}" for k in range(scores.shape[1])])
            frame.insert(0, "label", arrays[f"{split}_labels"])
            frame.insert(0, "split", split)
            frames.append(frame)
        pd.concat(frames).to_csv(path, index=False, float_format="%.17g")
    return path


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".csv"])
@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_each_format_reads_back_what_was_written(tmp_path, suffix, kind):
    arrays = synthetic() if kind == "logits" else as_probs(synthetic())
    predictions = load_predictions(write(tmp_path / f"model{suffix}", arrays))
    assert predictions.inputs == kind and predictions.num_classes == K
    for split in ("val", "test"):
        assert predictions.scores[split].dtype == torch.float64
        np.testing.assert_array_equal(predictions.scores[split].numpy(), arrays[f"{split}_{kind}"])
        np.testing.assert_array_equal(predictions.labels[split].numpy(), arrays[f"{split}_labels"])
    assert predictions.source.endswith(f"model{suffix}") and len(predictions.sha256) == 64


def test_float32_scores_stay_float32_and_binary_scores_get_two_columns(tmp_path):
    arrays = {k: v.astype(np.float32) if k.endswith("logits") else v for k, v in synthetic().items()}
    assert load_predictions(write(tmp_path / "f32.npz", arrays)).scores["val"].dtype == torch.float32
    binary = {"val_probs": np.array([0.2, 0.9]), "val_labels": np.array([0, 1]),
              "test_probs": np.array([0.6]), "test_labels": np.array([1])}
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


def bad_npz(tmp_path, change) -> Path:
    arrays = synthetic()
    change(arrays)
    return write(tmp_path / "bad.npz", arrays)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a.update(val_probs=a["val_logits"]), "both logits and probabilities"),
        (lambda a: a.pop("test_labels"), r"missing \['test_labels'\]"),
        (lambda a: a.update(val_weights=a["val_labels"]), r"unknown \['val_weights'\]"),
        (lambda a: [a.pop(k) for k in ("val_logits", "test_logits")], "neither logits nor probabilities .keys"),
        (lambda a: a["val_logits"].__setitem__((0, 0), np.nan), "val split .*NaN"),
        (lambda a: a["test_labels"].__setitem__(0, K), "test split .*labels out of range: found 3"),
        (lambda a: a.update(test_labels=a["test_labels"] + 0.5), "non-integer value"),
        (lambda a: a.update(test_labels=a["test_labels"][:-1]), "test split .*shape mismatch"),
        (lambda a: a.update(test_logits=a["test_logits"][:, :2], test_labels=a["test_labels"] % 2),
         r"different class counts \{'val': 3, 'test': 2\}"),
        (lambda a: a.update(val_logits=a["val_logits"][:, :1], test_logits=a["test_logits"][:, :1],
                            val_labels=0 * a["val_labels"], test_labels=0 * a["test_labels"]), "at least 2"),
        (lambda a: a.update(val_labels=a["val_labels"].astype(str)), "val_labels must be numeric"),
        (lambda a: a.update(val_logits=a["val_logits"][:0], val_labels=a["val_labels"][:0]), "empty input"),
    ],
)
def test_a_bad_npz_is_refused_naming_the_file_and_the_fault(tmp_path, change, message):
    path = bad_npz(tmp_path, change)
    with pytest.raises(ValueError, match=f"predictions file {path}: .*{message}"):
        load_predictions(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a["val_probs"].__setitem__(0, [0.5, 0.4, 0.3]), "rows must sum to 1 within 0.001; row .0,. sums to 1.2"),
        (lambda a: a["test_probs"].__setitem__(1, [1.2, -0.2, 0.0]), r"must lie in \[0, 1\]"),
    ],
)
def test_probabilities_must_be_probabilities(tmp_path, change, message):
    arrays = as_probs(synthetic())
    change(arrays)
    path = write(tmp_path / "bad.npz", arrays)
    with pytest.raises(ValueError, match=f"predictions file {path}: .*{message}"):
        load_predictions(path)


def test_npz_files_never_unpickle(tmp_path):
    objects = tmp_path / "objects.npz"
    np.savez(objects, **{**synthetic(), "val_labels": np.array([{"a": 1}] * 40, dtype=object)})
    with pytest.raises(ValueError, match=f"{objects}: holds object arrays, which need pickle"):
        load_predictions(objects)
    pickled = tmp_path / "pickled.npz"
    pickled.write_bytes(pickle.dumps(synthetic()))
    with pytest.raises(ValueError, match=f"{pickled}: is not an .npz archive .*never loaded"):
        load_predictions(pickled)
    single = tmp_path / "single.npz"
    with single.open("wb") as handle:
        np.save(handle, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="holds a single array"):
        load_predictions(single)


def test_pt_files_hold_a_dict_of_tensors_and_run_no_code(tmp_path):
    listed = tmp_path / "list.pt"
    torch.save([torch.zeros(2)], listed)
    with pytest.raises(ValueError, match=f"{listed}: holds a list; a dict of tensors"):
        load_predictions(listed)
    numbers = tmp_path / "numbers.pt"
    torch.save({**{k: torch.as_tensor(v) for k, v in synthetic().items()}, "val_labels": [0, 1]}, numbers)
    with pytest.raises(ValueError, match="entry 'val_labels' is a list, not a tensor"):
        load_predictions(numbers)
    code = tmp_path / "code.pt"
    torch.save({"val_logits": Path("x")}, code)  # an arbitrary object: unpickling it runs code
    with pytest.raises(ValueError, match=f"^predictions file {code} holds objects that could run code"):
        load_predictions(code)
    corrupt = write(tmp_path / "corrupt.pt", synthetic())
    corrupt.write_bytes(corrupt.read_bytes()[:300])
    with pytest.raises(ValueError, match=f"^predictions file {corrupt} is truncated or corrupt .*write it again"):
        load_predictions(corrupt)


def csv_text(tmp_path, text: str) -> Path:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("label,logit_0,logit_1\n0,1,2\n", "has no 'split' column"),
        ("split,label,logit_0,logit_1\nval,0,1,2\ntrain,1,0,1\n", r"column 'split' holds \['train'\]"),
        ("split,label,logit_0,logit_1,prob_0,prob_1\nval,0,1,2,0.5,0.5\n", "both logits and probabilities .columns"),
        ("split,label,score_0,score_1\nval,0,1,2\n", "neither logits nor probabilities .columns"),
        ("split,label,prob_0,prob_2\nval,0,0.5,0.5\n", r"without gaps; missing \['prob_1'\]"),
        ("split,label,logit_0,logit_1,id\nval,0,1,2,7\n", r"unknown column\(s\) \['id'\]"),
        ("split,label,logit_0,logit_1\nval,0,1,high\ntest,0,1,2\n", r"column\(s\) \['logit_1'\] hold text"),
        ("split,label,logit_0,logit_1\nval,0,1,2\n", "no rows of split 'test'"),
        ("split,label,logit_0,logit_1\nval,0,1,\ntest,1,0,1\n", "val split .*NaN"),
        ("split,label,prob_0,prob_1\nval,0,0.7,0.7\ntest,1,0.5,0.5\n", "rows must sum to 1"),
        ("", "is not a readable CSV file"),
    ],
)
def test_a_bad_csv_is_refused_naming_the_file_and_the_fault(tmp_path, text, message):
    path = csv_text(tmp_path, text)
    with pytest.raises(ValueError, match=f"predictions file {path}: .*{message}"):
        load_predictions(path)


def test_unknown_formats_and_missing_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"model.json: unknown format; use one of .npz, .pt, .csv"):
        load_predictions(tmp_path / "model.json")
    with pytest.raises(ValueError, match="missing.npz does not exist"):
        load_predictions(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="formats are .npz, .pt, .csv"):
        check_predictions_path("predictions.path", str(tmp_path / "model.h5"))
    with pytest.raises(ValueError, match="predictions.path: no file at"):
        check_predictions_path("predictions.path", str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match="must be the path of a predictions file, got 3"):
        check_predictions_path("predictions.path", 3)


def test_output_names_come_from_the_stem_or_a_checked_name():
    assert output_name("/data/my model.v2.npz") == "my_model_v2"
    assert output_name("/data/+++.csv") == "predictions" and output_name(None) == "predictions"
    assert output_name("/data/x.npz", "resnet-110") == "resnet-110"
    assert output_name("/data/x.npz", 2024) == "2024"
    for bad in ("a/b", "_x", "a.b", 3.5, True):
        with pytest.raises(ValueError, match="predictions.name must start with a letter or digit"):
            output_name("x.npz", bad)
