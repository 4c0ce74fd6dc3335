"""A run's configuration and provenance record, and how two configurations differ."""

from __future__ import annotations

import json

import pytest

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.tensor_io import fingerprint
from calib_pipeline.training.provenance import (
    NOT_SET,
    configuration_differences,
    run_configuration,
    training_provenance,
)

SPLIT = {"seed": 0, "fractions": {"train": 0.75, "val": 0.25}}
MODEL = {"name": "small_cnn", "params": {"width": 8}}
TRAINING = {"epochs": 60, "lr": 0.05, "milestones": [30, 50]}
FOCAL = MethodSpec(
    key="focal",
    objective="focal",
    params={"gamma": 3.0},
    training={"epochs": 200},
    model={"params": {"width": 16}},
)


def configuration(method=FOCAL, seed=0, split=SPLIT, model=MODEL, training=TRAINING):
    return run_configuration(
        method,
        seed=seed,
        dataset="digits",
        split_definition=split,
        model_params=model,
        training_params=training,
    )


def test_the_configuration_applies_the_method_overrides_and_fills_every_training_field():
    config = configuration()
    assert config["training"]["epochs"] == 200 and config["training"]["lr"] == 0.05
    assert config["training"]["milestones"] == (30, 50) and "device" in config["training"]
    assert config["model"] == {"name": "small_cnn", "params": {"width": 16}}
    assert config["split"] == "standard" and config["split_definition"] == SPLIT
    assert (config["objective"], config["meta_learner"]) == ("focal", None)
    assert config["params"] == {"gamma": 3.0}


def test_the_split_definition_is_normalised():
    # --params gives ints where YAML gives floats; a missing seed is the split's default 0
    config = configuration(split={"fractions": {"val": 1 / 4, "train": 3 / 4}})
    assert config["split_definition"] == {"seed": 0, "fractions": {"train": 0.75, "val": 0.25}}
    assert list(config["split_definition"]["fractions"]) == ["train", "val"]


def test_the_provenance_record_names_the_run_and_hashes_the_configuration():
    config = {**configuration(), "split_hash": "abc123", "code": "c0de"}
    record = training_provenance(
        config, run_id="2026-01-01T00.00.00.000Z", env="cifar10_wrn", protocol="cifar10_wrn"
    )
    assert record == {
        "run_id": "2026-01-01T00.00.00.000Z",
        "env": "cifar10_wrn",
        "protocol": "cifar10_wrn",
        "dataset": "digits",
        "split": "standard",
        "split_hash": "abc123",
        "fingerprint": fingerprint(config),
        "config": config,
    }


def test_differences_name_each_setting_with_both_values():
    recorded = configuration(training={**TRAINING, "lr": 0.1}, split={**SPLIT, "seed": 7})
    found = configuration_differences(recorded, configuration())
    assert found == [(("split_definition", "seed"), 7, 0), (("training", "lr"), 0.1, 0.05)]


def test_a_setting_on_one_side_only_is_not_set_on_the_other():
    ce = MethodSpec("ce", objective="cross_entropy")
    recorded = configuration(
        ce, model={"name": "small_cnn", "params": {"width": 8, "feature_dim": 32}}
    )
    found = configuration_differences(recorded, configuration(ce))
    assert found == [(("model", "params", "feature_dim"), 32, NOT_SET)]
    assert repr(NOT_SET) == "not set"


@pytest.mark.parametrize(
    "setting",
    [
        {"device": "cuda"},
        {"num_threads": 1},
        {"eval_batch_size": 64},
        {"checkpoint_every": 5},
        {"track_test": False},
    ],
)
def test_execution_settings_never_differ(setting):
    # a run trained on a GPU cluster may be scored on a laptop
    recorded = configuration(training={**TRAINING, **setting})
    assert configuration_differences(recorded, configuration()) == []


def test_recorded_hashes_and_file_round_trips_never_differ():
    recorded = json.loads(json.dumps({**configuration(), "split_hash": "abc123", "code": "old"}))
    assert recorded["training"]["milestones"] == [30, 50]  # a tuple reads back as a list
    assert configuration_differences(recorded, configuration()) == []
