"""Tensor files and fingerprints: atomic saves, safe loads, stable hashes."""

from __future__ import annotations

import json

import pytest
import torch

from calib_pipeline.tensor_io import fingerprint, load_tensors, save_json, save_tensors
from tests.crafted import MarkerPayload


def test_saved_tensors_round_trip_into_a_new_folder_without_a_temporary_file(tmp_path):
    path = tmp_path / "new" / "folder" / "logits.pt"
    save_tensors({"val": torch.arange(6.0).reshape(2, 3), "epoch": 4}, path)
    loaded = load_tensors(path)
    assert torch.equal(loaded["val"], torch.arange(6.0).reshape(2, 3)) and loaded["epoch"] == 4
    assert [p.name for p in path.parent.iterdir()] == ["logits.pt"]


class Unsavable:
    """An object whose pickling fails part-way through a save."""

    def __reduce__(self):
        raise RuntimeError("cannot be saved")


def test_a_failed_save_keeps_the_previous_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "state.pt"
    save_tensors({"epoch": 1}, path)
    with pytest.raises(RuntimeError, match="cannot be saved"):
        save_tensors({"epoch": 2, "unsavable": Unsavable()}, path)
    assert load_tensors(path) == {"epoch": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]


def test_a_crafted_file_is_refused_by_name_and_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "logits.pt"
    torch.save({"val": MarkerPayload(str(marker))}, path)
    refused = r"^torch artifact .*logits.pt holds objects that could run code"
    with pytest.raises(ValueError, match=refused):
        load_tensors(path, what="torch artifact")
    assert not marker.exists(), "loading must not have executed the payload"


def test_a_truncated_file_names_the_file_and_the_remedy(tmp_path):
    path = tmp_path / "logits.pt"
    save_tensors({"val": torch.ones(1000)}, path)
    path.write_bytes(path.read_bytes()[:100])
    truncated = r"^predictions file .*logits.pt is truncated or corrupt .*; write it again$"
    with pytest.raises(ValueError, match=truncated):
        load_tensors(path, what="predictions file", hint="write it again")


def test_json_is_saved_atomically_and_a_failed_save_keeps_the_previous_file(tmp_path):
    path = tmp_path / "run" / "configuration.json"
    save_json({"b": 1, "a": [1, 2]}, path)
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    with pytest.raises(ValueError, match="Circular reference"):
        looped: dict = {}
        looped["self"] = looped
        save_json(looped, path)
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    assert [p.name for p in path.parent.iterdir()] == ["configuration.json"]


def test_a_configuration_fingerprint_ignores_key_order_and_sees_every_value():
    assert fingerprint({"lr": 0.1, "seed": 0}) == fingerprint({"seed": 0, "lr": 0.1})
    assert fingerprint({"lr": 0.1, "seed": 0}) != fingerprint({"lr": 0.1, "seed": 1})
    assert len(fingerprint({})) == 16


UNSAFE_ADVICE = ("weights_only=False", "add_safe_globals", "safe_globals(")


def test_no_refusal_repeats_pytorchs_advice_to_load_unsafely(tmp_path):
    """PyTorch's own refusal tells how to load the file anyway (weights_only=False, or
    allow-list the global) -- how to run the payload. Every refusal of the project's loaders
    names the file and the global, never that advice."""
    from kedro.io import DatasetError

    from calib_pipeline.kedro_datasets import PredictionsDataset
    from calib_pipeline.training.checkpoint import CheckpointStore

    marker = tmp_path / "pwned"
    crafted = tmp_path / "crafted.pt"
    torch.save({"val_logits": MarkerPayload(str(marker))}, crafted)
    store = CheckpointStore(tmp_path / "run")
    store.directory.mkdir()
    torch.save({"epoch": 1, "payload": MarkerPayload(str(marker))}, store.path)
    refusals = []
    for load in (
        lambda: load_tensors(crafted),
        lambda: store.load(),
        lambda: PredictionsDataset(filepath=str(crafted)).load(),
    ):
        with pytest.raises((ValueError, DatasetError)) as refused:  # each loader's own type
            load()
        refusals.append(str(refused.value))
    for text in refusals:
        assert "could run code" in text and "it refers to io.open" in text, text
        assert not any(advice in text for advice in UNSAFE_ADVICE), text
    assert not marker.exists()
