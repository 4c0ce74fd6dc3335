"""``train_run`` is the training as a library function: called directly (as a notebook
does), it returns what the training pipeline's node returns."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.code_units import PACKAGE, source_index
from calib_pipeline.data import load_dataset
from calib_pipeline.data.splits import split_dataset
from calib_pipeline.pipelines.run_info import run_info
from calib_pipeline.pipelines.training.nodes import train_method
from calib_pipeline.training import CheckpointStore, train_run
from calib_pipeline.training import run as run_module
from calib_pipeline.training.code_dependencies import training_code
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


CE = MethodSpec(key="ce", objective="cross_entropy", label="CE")
EPOCHS = TEST_PARAMETERS["training"]["epochs"]
APPENDED_OBJECTIVE = """

@OBJECTIVES.register("squared_margin")
def _squared_margin() -> Objective:
    return Objective("squared_margin", {}, elementwise.mse)
"""


@pytest.fixture
def sources(tmp_path, monkeypatch) -> Iterator[Path]:
    """A copy of the package's sources that the training reads its code digests from, as
    a researcher's checkout that is edited between two runs."""
    copy = tmp_path / "sources" / "calib_pipeline"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(run_module, "training_code", partial(training_code, root=copy))
    yield copy
    source_index.cache_clear()


def edit_source(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))
    source_index.cache_clear()


def train_ce(store: CheckpointStore, **training: object) -> tuple[dict, pd.DataFrame]:
    data = load_dataset("digits")
    return train_run(
        data,
        split_dataset(data, SPLIT_DEFINITION),
        SPLIT_DEFINITION,
        store,
        method=CE,
        seed=0,
        model_params=TEST_PARAMETERS["model"],
        training_params={**TEST_PARAMETERS["training"], **training},
        **SESSION,
    )


def test_adding_an_objective_keeps_the_finished_training_of_another_method(
    sources, tmp_path, caplog
):
    store = CheckpointStore(tmp_path / "resume")
    first, _ = train_ce(store)
    losses = sources / "calibration" / "losses.py"
    edit_source(losses, "def _mse() -> Objective:", "def _mse() -> Objective:  # unchanged")
    losses.write_text(losses.read_text() + APPENDED_OBJECTIVE)
    source_index.cache_clear()
    with caplog.at_level(logging.INFO, logger="calib_pipeline"):
        again, _ = train_ce(store)
    assert again["resumed_after_epoch"] == EPOCHS, "reused, not trained"
    assert again["provenance"]["fingerprint"] == first["provenance"]["fingerprint"]
    assert again["config"]["code"] == first["config"]["code"]
    assert set(first["config"]["code"]) == {"engine", "objective", "model", "data"}
    assert "already trained for this configuration" in caplog.text
    assert "changed" not in caplog.text


def test_editing_a_methods_objective_retrains_it_and_names_the_changed_unit(
    sources, tmp_path, caplog
):
    store = CheckpointStore(tmp_path / "resume")
    first, _ = train_ce(store)
    edit_source(
        sources / "calibration" / "losses.py",
        'return Objective("cross_entropy", {}, elementwise.cross_entropy)',
        'return Objective("cross_entropy", dict(), elementwise.cross_entropy)',
    )
    with caplog.at_level(logging.WARNING, logger="calib_pipeline"):
        again, history = train_ce(store)
    assert again["resumed_after_epoch"] == 0 and len(history) == EPOCHS, "trained afresh"
    (warning,) = [r.getMessage() for r in caplog.records if "code it depends on" in r.getMessage()]
    assert "ce seed 0: the code it depends on changed since its finished training" in warning
    assert "  objective: calibration/losses.py::_cross_entropy\n" in warning
    assert "Training it again" in warning and "--params=training.reuse=ignore_code" in warning
    before, now = first["config"]["code"], again["config"]["code"]
    assert [part for part in now if now[part] != before[part]] == ["objective"]
    assert again["provenance"]["fingerprint"] != first["provenance"]["fingerprint"]
    assert "reuse" not in again["provenance"]
    folders = sorted(p.name for p in (tmp_path / "resume").iterdir())
    assert folders == sorted(
        [first["provenance"]["fingerprint"], again["provenance"]["fingerprint"]]
    ), "the earlier training is kept: reverting the edit reuses it"


def test_reuse_ignore_code_reuses_the_finished_training_and_records_it(sources, tmp_path, caplog):
    store = CheckpointStore(tmp_path / "resume")
    first, first_history = train_ce(store)
    edit_source(
        sources / "calibration" / "losses.py",
        'return Objective("cross_entropy", {}, elementwise.cross_entropy)',
        'return Objective("cross_entropy", dict(), elementwise.cross_entropy)',
    )
    with caplog.at_level(logging.WARNING, logger="calib_pipeline"):
        again, history = train_ce(store, reuse="ignore_code")
    assert again["resumed_after_epoch"] == EPOCHS, "reused, not trained"
    assert same(again["state_dict"], first["state_dict"])
    assert again["config"] == first["config"], "the code it was trained with"
    assert again["provenance"]["fingerprint"] == first["provenance"]["fingerprint"]
    reuse = again["provenance"]["reuse"]
    assert reuse["policy"] == "ignore_code"
    assert reuse["changed"] == {"objective": ["calibration/losses.py::_cross_entropy"]}
    assert reuse["code_now"]["objective"] != first["config"]["code"]["objective"]
    assert set(history["fingerprint"]) == set(first_history["fingerprint"])
    assert "REUSED UNDER CHANGED CODE (training.reuse=ignore_code)" in caplog.text
    assert "calibration/losses.py::_cross_entropy" in caplog.text
    assert sorted(p.name for p in (tmp_path / "resume").iterdir()) == [
        first["provenance"]["fingerprint"]
    ], "nothing trained, no folder of the changed code"


def test_reuse_ignore_code_does_not_continue_an_unfinished_training(sources, tmp_path, caplog):
    store = CheckpointStore(tmp_path / "resume")
    first, _ = train_ce(store)
    state = store.for_configuration(first["provenance"]["fingerprint"])
    unfinished = state.load()
    unfinished["complete"] = False
    state.save(unfinished)
    edit_source(
        sources / "training" / "engine.py", '"complete": epoch ==', '"complete": 0 + epoch =='
    )
    with caplog.at_level(logging.WARNING, logger="calib_pipeline"):
        again, _ = train_ce(store, reuse="ignore_code")
    assert again["resumed_after_epoch"] == 0
    assert "since its unfinished training" in caplog.text
    assert "engine: training/engine.py::_save_state" in caplog.text
    assert "an unfinished state is never continued under other code" in caplog.text


def test_a_bad_reuse_value_is_refused_before_training(tmp_path):
    with pytest.raises(
        ValueError, match="reuse must be one of 'same_code', 'ignore_code', got 'x'"
    ):
        train_ce(CheckpointStore(tmp_path / "resume"), reuse="x")
    assert not (tmp_path / "resume").exists()


def test_reuse_ignore_code_trains_again_when_the_changed_code_builds_another_model(
    sources, tmp_path, caplog, monkeypatch
):
    """The engine's own check: a finished state is reused only by the model it started from."""
    store = CheckpointStore(tmp_path / "resume")
    first, _ = train_ce(store)
    kept = store.for_configuration(first["provenance"]["fingerprint"])
    written = kept.path.stat().st_mtime_ns
    built = run_module.model_from_config

    def other_initialisation(data, model_params):  # what an edited init would build
        model = built(data, model_params)
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
        return model

    monkeypatch.setattr(run_module, "model_from_config", other_initialisation)
    edit_source(
        sources / "models" / "small_cnn.py",
        "    return SmallCNN(",
        "    edited = 1\n    return SmallCNN(",
    )
    with caplog.at_level(logging.WARNING, logger="calib_pipeline"):
        again, _ = train_ce(store, reuse="ignore_code")
    assert again["resumed_after_epoch"] == 0 and "reuse" not in again["provenance"]
    assert "does not match what the changed code builds" in caplog.text
    assert "  model: models/small_cnn.py::small_cnn" in caplog.text
    assert kept.path.stat().st_mtime_ns == written, "the earlier training is left as it was"
