"""Pickled prediction files converted without running code from them; (N, 1) labels."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from calib_pipeline.data.pickled_predictions import main, named_arrays, read_pickled_arrays
from calib_pipeline.data.predictions import read_predictions
from tests.crafted import MarkerPayload

RNG = np.random.default_rng(0)
PROBS = RNG.dirichlet(np.ones(10), size=50)
LABELS = RNG.integers(0, 10, size=(50, 1))  # a column, as Kumar et al.'s CIFAR file has them


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_a_tuple_of_numpy_arrays_converts_exactly(tmp_path, protocol, capsys):
    source = tmp_path / "cifar_probs.dat"
    source.write_bytes(pickle.dumps((PROBS, LABELS), protocol=protocol))
    target = tmp_path / "cifar.npz"
    assert main([str(source), str(target), "--names", "test_probs,test_labels"]) == 0
    assert "wrote" in capsys.readouterr().out
    with np.load(target, allow_pickle=False) as archive:
        assert np.array_equal(archive["test_probs"], PROBS)
        assert np.array_equal(archive["test_labels"], LABELS)


def test_a_dict_is_mapped_key_by_key(tmp_path):
    source = tmp_path / "preds.pkl"
    source.write_bytes(pickle.dumps({"p": PROBS, "y": LABELS, "extra": PROBS}))
    arrays = named_arrays(read_pickled_arrays(source), {"p": "val_probs", "y": "val_labels"})
    assert sorted(arrays) == ["val_labels", "val_probs"]
    with pytest.raises(ValueError, match=r"the file has no key\(s\) \['q'\]"):
        named_arrays(read_pickled_arrays(source), {"q": "val_probs"})


def test_a_crafted_pickle_is_refused_by_the_global_it_names_and_runs_no_code(tmp_path, capsys):
    marker = tmp_path / "pwned"
    source = tmp_path / "crafted.dat"
    source.write_bytes(pickle.dumps((PROBS, MarkerPayload(str(marker)))))
    with pytest.raises(
        ValueError, match=r"crafted.dat: refers to (io|builtins)\.open, which is not part"
    ):
        read_pickled_arrays(source)
    with pytest.raises(SystemExit):
        main([str(source), str(tmp_path / "out.npz"), "--names", "a,b"])
    assert "which is not part of a NumPy array" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "out.npz").exists()


def test_wrong_names_content_and_files_are_refused(tmp_path):
    source = tmp_path / "preds.dat"
    source.write_bytes(pickle.dumps((PROBS, LABELS)))
    with pytest.raises(ValueError, match="holds 2 arrays in order: give 2 names"):
        named_arrays(read_pickled_arrays(source), ["test_probs"])
    with pytest.raises(ValueError, match="holds a str, not arrays"):
        named_arrays("text", ["a"])
    with pytest.raises(ValueError, match="b is a list, not a numeric array"):
        named_arrays((PROBS, [1, 2]), ["a", "b"])
    (tmp_path / "text.dat").write_text("not a pickle")
    with pytest.raises(ValueError, match=r"text\.dat: not a readable pickle"):
        read_pickled_arrays(tmp_path / "text.dat")


def test_column_labels_are_read_as_labels_and_one_hot_is_not(tmp_path):
    path = tmp_path / "column.npz"
    np.savez(path, val_probs=PROBS, val_labels=LABELS, test_probs=PROBS, test_labels=LABELS)
    _, arrays = read_predictions(path)
    assert arrays["val_labels"].shape == (50,)
    one_hot = np.eye(10)[LABELS[:, 0]]
    np.savez(path, val_probs=PROBS, val_labels=one_hot, test_probs=PROBS, test_labels=LABELS)
    _, arrays = read_predictions(path)
    assert arrays["val_labels"].shape == (50, 10)  # ambiguous: left to the value checks to refuse
