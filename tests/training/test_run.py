"""``train_run`` is the training as a library function: called directly (as a notebook
does), it returns what the training pipeline's node returns."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.data import load_dataset
from calib_pipeline.data.splits import split_dataset
from calib_pipeline.pipelines.run_info import run_info
from calib_pipeline.pipelines.training.nodes import train_method
from calib_pipeline.training import CheckpointStore, train_run
from calib_pipeline.training.predict import checkpoint_logits

CONF = Path(__file__).resolve().parents[2] / "conf"
TEST_PARAMETERS = yaml.safe_load((CONF / "test" / "parameters.yml").read_text())
BASE_PARAMETERS = yaml.safe_load((CONF / "base" / "parameters.yml").read_text())
SPLIT_DEFINITION = BASE_PARAMETERS["splits"]["standard"]
FOCAL = MethodSpec(key="focal_g3", objective="focal", params={"gamma": 3.0}, label="Focal")
SESSION = run_info("2026-03-03T00.00.00.000Z", "test", "test")


def same(value, other) -> bool:
    """Equal, tensors (in any nesting of dicts and lists) element for element."""
    if isinstance(value, torch.Tensor):
        return isinstance(other, torch.Tensor) and torch.equal(value, other)
    if isinstance(value, dict):
        return (
            isinstance(other, dict)
            and value.keys() == other.keys()
            and all(same(value[key], other[key]) for key in value)
        )
    if isinstance(value, (list, tuple)):
        return (
            type(value) is type(other)
            and len(value) == len(other)
            and all(same(a, b) for a, b in zip(value, other))
        )
    return value == other


def test_train_run_called_directly_returns_what_the_training_node_returns(tmp_path):
    data = load_dataset("digits")
    split = split_dataset(data, SPLIT_DEFINITION)
    settings = {
        "model_params": TEST_PARAMETERS["model"],
        "training_params": TEST_PARAMETERS["training"],
    }
    node_checkpoint, node_history = train_method(
        data,
        split,
        SPLIT_DEFINITION,
        CheckpointStore(tmp_path / "node"),
        settings["model_params"],
        settings["training_params"],
        SESSION,
        method=FOCAL,
        seed=0,
    )
    checkpoint, history = train_run(
        data,
        split,
        SPLIT_DEFINITION,
        CheckpointStore(tmp_path / "library"),
        method=FOCAL,
        seed=0,
        **settings,
        **SESSION,
    )

    assert node_checkpoint["resumed_after_epoch"] == checkpoint["resumed_after_epoch"] == 0
    timed = "execution"  # where and how fast: the wall clock differs between the two calls
    assert same(
        {k: v for k, v in checkpoint.items() if k != timed},
        {k: v for k, v in node_checkpoint.items() if k != timed},
    ), "weights, provenance, config, epochs, hyperparameters"
    for execution in (checkpoint[timed], node_checkpoint[timed]):
        assert (execution["device"], execution["name"]) == ("cpu", "cpu")
        assert execution["epochs_trained"] == TEST_PARAMETERS["training"]["epochs"]
        assert execution["images_per_second"] > 0
    assert list(history.columns) == list(node_history.columns)
    # every column but the wall-clock seconds each epoch took
    pd.testing.assert_frame_equal(
        history.drop(columns="seconds"), node_history.drop(columns="seconds")
    )
    assert len(history) == TEST_PARAMETERS["training"]["epochs"]
    assert set(history["run_id"]) == {SESSION["run_id"]}
    assert checkpoint["provenance"]["env"] == "test"
    assert checkpoint["config"]["split_definition"] == SPLIT_DEFINITION
    predicted = checkpoint_logits(data, split, checkpoint, device="cpu")
    assert predicted["execution"] == {"device": "cpu", "name": "cpu"}, "where the logits came from"
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            checkpoint_logits(data, split, checkpoint, device="cuda")


def test_train_run_reuses_the_finished_state_of_its_configuration(tmp_path):
    """A second call with the same settings and store trains nothing: it loads the state."""
    data = load_dataset("digits")
    split = split_dataset(data, SPLIT_DEFINITION)
    settings = {
        "method": FOCAL,
        "seed": 0,
        "model_params": TEST_PARAMETERS["model"],
        "training_params": TEST_PARAMETERS["training"],
        **SESSION,
    }
    store = CheckpointStore(tmp_path)
    first, _ = train_run(data, split, SPLIT_DEFINITION, store, **settings)
    again, history = train_run(data, split, SPLIT_DEFINITION, store, **settings)
    epochs = TEST_PARAMETERS["training"]["epochs"]
    assert again["resumed_after_epoch"] == epochs and len(history) == epochs
    assert first["execution"]["epochs_trained"] == epochs
    assert again["execution"]["epochs_trained"] == 0, "reused: this call trained nothing"
    assert again["execution"]["images_per_second"] is None, "no rate from epochs not trained here"
    assert again["provenance"]["fingerprint"] == first["provenance"]["fingerprint"]
    with pytest.raises(KeyError, match="fractions"):
        train_run(data, split, {"seed": 0}, store, **settings)
