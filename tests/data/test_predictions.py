"""Reading a user's predictions file: each format's layout, and every refusal naming the file
(the values are checked in tests/calibration/test_predictions.py)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from calib_pipeline.data.predictions import check_predictions_path, output_name, read_predictions

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


def netcal_like(n: int = 300, k: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    """One split in the layout of netcal's CIFAR records: softmax ``predictions`` (N x K)
    and integer ``ground_truth``, overconfident."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k))
    logits[np.arange(n), labels] += 1.5
    probs = torch.softmax(torch.as_tensor(3.0 * logits), 1).numpy()
    return {"predictions": probs, "ground_truth": labels}


NETCAL_KEYS = {"probs": "predictions", "labels": "ground_truth"}


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
    inputs, read = read_predictions(write(tmp_path / f"model{suffix}", arrays))
    assert inputs == kind and sorted(read) == sorted(arrays)
    for key, values in arrays.items():
        np.testing.assert_array_equal(np.asarray(read[key]), values)


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
        (
            lambda a: [a.pop(k) for k in ("val_logits", "test_logits")],
            "neither logits nor probabilities .keys",
        ),
    ],
)
def test_an_npz_of_another_layout_is_refused_naming_the_file(tmp_path, change, message):
    path = bad_npz(tmp_path, change)
    with pytest.raises(ValueError, match=f"predictions file {path}: .*{message}"):
        read_predictions(path)


def test_npz_files_never_unpickle(tmp_path):
    objects = tmp_path / "objects.npz"
    np.savez(objects, **{**synthetic(), "val_labels": np.array([{"a": 1}] * 40, dtype=object)})
    with pytest.raises(ValueError, match=f"{objects}: holds object arrays, which need pickle"):
        read_predictions(objects)
    pickled = tmp_path / "pickled.npz"
    pickled.write_bytes(pickle.dumps(synthetic()))
    with pytest.raises(ValueError, match=f"{pickled}: is not an .npz archive .*never loaded"):
        read_predictions(pickled)
    single = tmp_path / "single.npz"
    with single.open("wb") as handle:
        np.save(handle, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="holds a single array"):
        read_predictions(single)


def test_pt_files_hold_a_dict_of_tensors_and_run_no_code(tmp_path):
    listed = tmp_path / "list.pt"
    torch.save([torch.zeros(2)], listed)
    with pytest.raises(ValueError, match=f"{listed}: holds a list; a dict of tensors"):
        read_predictions(listed)
    numbers = tmp_path / "numbers.pt"
    torch.save(
        {**{k: torch.as_tensor(v) for k, v in synthetic().items()}, "val_labels": [0, 1]}, numbers
    )
    with pytest.raises(ValueError, match="entry 'val_labels' is a list, not a tensor"):
        read_predictions(numbers)
    code = tmp_path / "code.pt"
    torch.save({"val_logits": Path("x")}, code)  # an arbitrary object: unpickling it runs code
    with pytest.raises(
        ValueError, match=f"^predictions file {code} holds objects that could run code"
    ):
        read_predictions(code)
    corrupt = write(tmp_path / "corrupt.pt", synthetic())
    corrupt.write_bytes(corrupt.read_bytes()[:300])
    with pytest.raises(
        ValueError, match=f"^predictions file {corrupt} is truncated or corrupt .*write it again"
    ):
        read_predictions(corrupt)


def csv_text(tmp_path, text: str) -> Path:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("label,logit_0,logit_1\n0,1,2\n", "has no 'split' column"),
        (
            "split,label,logit_0,logit_1\nval,0,1,2\ntrain,1,0,1\n",
            r"column 'split' holds \['train'\]",
        ),
        (
            "split,label,logit_0,logit_1,prob_0,prob_1\nval,0,1,2,0.5,0.5\n",
            "both logits and probabilities .columns",
        ),
        ("split,label,score_0,score_1\nval,0,1,2\n", "neither logits nor probabilities .columns"),
        ("split,label,prob_0,prob_2\nval,0,0.5,0.5\n", r"without gaps; missing \['prob_1'\]"),
        ("split,label,logit_0,logit_1,id\nval,0,1,2,7\n", r"unknown column\(s\) \['id'\]"),
        (
            "split,label,logit_0,logit_1\nval,0,1,high\ntest,0,1,2\n",
            r"column\(s\) \['logit_1'\] hold text",
        ),
        ("split,label,logit_0,logit_1\nval,0,1,2\n", "no rows of split 'test'"),
        ("", "is not a readable CSV file"),
    ],
)
def test_a_bad_csv_is_refused_naming_the_file_and_the_fault(tmp_path, text, message):
    path = csv_text(tmp_path, text)
    with pytest.raises(ValueError, match=f"predictions file {path}: .*{message}"):
        read_predictions(path)


def test_unknown_formats_and_missing_files_are_refused(tmp_path):
    with pytest.raises(
        ValueError, match=r"model\.json: unknown format; use one of \.npz, \.pt, \.csv"
    ):
        read_predictions(tmp_path / "model.json")
    with pytest.raises(ValueError, match=r"missing\.npz does not exist"):
        read_predictions(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match=r"formats are \.npz, \.pt, \.csv"):
        check_predictions_path("predictions.path", str(tmp_path / "model.h5"))
    with pytest.raises(ValueError, match=r"predictions\.path: no file at"):
        check_predictions_path("predictions.path", str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match="must be the path of a predictions file, got 3"):
        check_predictions_path("predictions.path", 3)


def test_output_names_come_from_the_stem_or_a_checked_name():
    assert output_name("/data/my model.v2.npz") == "my_model_v2"
    assert output_name("/data/+++.csv") == "predictions" and output_name(None) == "predictions"
    assert output_name("/data/x.npz", "resnet-110") == "resnet-110"
    assert output_name("/data/x.npz", 2024) == "2024"
    for bad in ("a/b", "_x", "a.b", 3.5, True):
        with pytest.raises(
            ValueError, match=r"predictions\.name must start with a letter or digit"
        ):
            output_name("x.npz", bad)


def test_a_key_mapping_renames_the_files_arrays_to_the_layout(tmp_path):
    path = write(tmp_path / "netcal.npz", netcal_like())
    kind, arrays = read_predictions(path, NETCAL_KEYS)
    assert kind == "probs" and sorted(arrays) == ["labels", "probs"]
    renamed = synthetic()
    renamed["z_val"] = renamed.pop("val_logits")
    two_splits = write(tmp_path / "renamed.pt", renamed)
    kind, arrays = read_predictions(two_splits, {"val_logits": "z_val"})
    assert kind == "logits" and "z_val" not in arrays
    np.testing.assert_array_equal(np.asarray(arrays["val_logits"]), synthetic()["val_logits"])


def test_a_mapped_key_the_file_lacks_is_refused_listing_the_files_keys(tmp_path):
    path = write(tmp_path / "netcal.npz", netcal_like())
    with pytest.raises(
        ValueError,
        match=r"netcal.npz: has no key 'preds' \(for probs\); "
        r"the file's keys are \['ground_truth', 'predictions'\]",
    ):
        read_predictions(path, {"probs": "preds", "labels": "ground_truth"})
    with pytest.raises(ValueError, match=r"unknown name\(s\) \['scores'\]; valid names"):
        read_predictions(path, {"scores": "predictions"})
    with pytest.raises(ValueError, match=r"a key mapping applies to \.npz and \.pt files"):
        read_predictions(write(tmp_path / "a.csv", synthetic()), {"labels": "label"})
    both = write(tmp_path / "both.npz", {**synthetic(), "preds": synthetic()["val_logits"]})
    with pytest.raises(ValueError, match=r"holds \['val_logits'\] besides the keys mapped"):
        read_predictions(both, {"val_logits": "preds"})


def test_an_unmapped_netcal_file_is_refused_with_the_mapping_spelled_out(tmp_path):
    path = write(tmp_path / "netcal.npz", netcal_like())
    with pytest.raises(ValueError) as refused:
        read_predictions(path)
    assert (
        "--params=predictions.keys.probs=predictions,predictions.keys.labels=ground_truth,"
        "predictions.val_fraction=0.5" in str(refused.value)
    )
    assert "'predictions' looks like probabilities: its rows sum to 1" in str(refused.value)
    logits = write(
        tmp_path / "z.npz",
        {"z": np.log(netcal_like()["predictions"]) + 1, "y": netcal_like()["ground_truth"]},
    )
    with pytest.raises(
        ValueError, match=r"predictions\.keys\.logits=z,predictions\.keys\.labels=y"
    ):
        read_predictions(logits)
