"""What differs between artifacts' provenance and the settings they are used under, as data:
which check found it, the run or artifact concerned, each setting found and expected. The
science side refuses nothing and advises no command (the pipelines do,
tests/pipelines/test_provenance.py)."""

from __future__ import annotations

import inspect

import pandas as pd
import torch

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.data import ImageData
from calib_pipeline.data.shift_suites import defining_settings
from calib_pipeline.data.splits import split_dataset
from calib_pipeline.training import provenance_checks
from calib_pipeline.training.provenance import run_configuration, training_provenance
from calib_pipeline.training.provenance_checks import (
    Check,
    Mismatch,
    calibrator_mismatch,
    configuration_mismatch,
    data_mismatch,
    history_mismatch,
    protocol_mismatch,
    shift_settings_mismatch,
    split_mismatch,
    training_mismatch,
)

CE = MethodSpec(key="ce", objective="cross_entropy")
SPLIT = {"seed": 0, "fractions": {"train": 0.75, "val": 0.25}}


def configuration(epochs: int = 60) -> dict:
    return run_configuration(
        CE,
        seed=0,
        dataset="digits",
        split_definition=SPLIT,
        model_params={"name": "small_cnn"},
        training_params={"epochs": epochs},
    )


def record(run_id: str = "r1", epochs: int = 60, protocol: str | None = "test") -> dict:
    config = {**configuration(epochs), "split_hash": "abc", "code": "c0de"}
    made = training_provenance(config, run_id=run_id, env="test", protocol=protocol)
    return made if protocol else {k: v for k, v in made.items() if k != "protocol"}


def test_the_science_side_names_no_command_and_no_catalog_key():
    source = inspect.getsource(provenance_checks)
    advice = ("kedro", "--load-versions", "--pipelines", ".seed_")
    assert [word for word in advice if word in source] == []


def test_artifacts_of_one_training_agree_and_a_missing_record_is_named_first():
    same = {"logits": {"provenance": record()}, "calibrators": {"provenance": record()}}
    assert training_mismatch("ce seed 0", same) is None
    unrecorded = {"logits": {"provenance": record()}, "calibrators": {}, "shift": None}
    assert training_mismatch("ce seed 0", unrecorded) == Mismatch(Check.UNRECORDED, "calibrators")


def test_artifacts_of_two_trainings_give_each_ones_training_against_the_first():
    first, other = record("r1"), record("r2", epochs=3)
    artifacts = {"a": {"provenance": first}, "b": {"provenance": other}}
    mismatch = training_mismatch("ce seed 0", artifacts)
    assert (mismatch.check, mismatch.subject) == (Check.TRAININGS, "ce seed 0")
    trained = ("r1", first["fingerprint"])
    assert mismatch.differences == (
        (("a",), trained, trained),
        (("b",), ("r2", other["fingerprint"]), trained),
    )


def test_a_configuration_mismatch_lists_each_setting_found_and_expected():
    mismatch = configuration_mismatch("ce seed 0", record(epochs=60), configuration(epochs=3))
    assert mismatch == Mismatch(
        Check.CONFIGURATION, "ce seed 0", ((("training", "epochs"), 60, 3),), record(epochs=60)
    )
    assert configuration_mismatch("ce seed 0", record(), configuration()) is None


def test_a_protocol_mismatch_compares_protocols_or_for_old_records_environments():
    assert protocol_mismatch("x", record(protocol="test"), "test", "other_env") is None
    assert protocol_mismatch("x", record(protocol="test"), "cifar10", "cifar10").differences == (
        (("protocol",), "test", "cifar10"),
    )
    old = record(protocol=None)
    assert protocol_mismatch("x", old, "digits", "test") is None
    env_mismatch = protocol_mismatch("x", old, "digits", "local")
    assert env_mismatch.differences == ((("env",), "test", "local"),)


def test_a_data_mismatch_names_the_dataset_and_the_split_hash_or_its_absence():
    assert data_mismatch("ckpt", record(), dataset="digits", split_hash="abc") is None
    mismatch = data_mismatch("ckpt", record(), dataset="svhn", split_hash=None)
    assert mismatch.check is Check.DATA and mismatch.subject == "ckpt"
    assert mismatch.differences == (
        (("dataset",), "digits", "svhn"),
        (("split_hash",), "abc", None),
    )


def test_a_split_mismatch_gives_both_hashes():
    images, labels = torch.zeros(40, 1, 2, 2), torch.arange(40) % 2
    data = ImageData("toy", images, labels, images[:10], labels[:10], 2, (0.0,), (1.0,))
    made = split_dataset(data, SPLIT)
    assert split_mismatch(data, made, SPLIT, "standard") is None
    other = split_dataset(data, {**SPLIT, "seed": 1})
    mismatch = split_mismatch(data, other, SPLIT, "standard")
    ((path, given, expected),) = mismatch.differences
    assert (mismatch.check, mismatch.subject, path) == (Check.SPLIT, "standard", ("hash",))
    assert given != expected


def test_a_history_mismatch_gives_the_trainings_it_holds_or_that_it_records_none():
    trained = record()
    history = pd.DataFrame({"epoch": [1, 2], "fingerprint": [trained["fingerprint"]] * 2})
    assert history_mismatch("ce seed 0", history, trained) is None
    assert history_mismatch("ce seed 0", history.drop(columns="fingerprint"), trained) == Mismatch(
        Check.HISTORY_UNRECORDED, "ce seed 0"
    )
    mixed = history.assign(fingerprint=["f1", "f2"])
    assert history_mismatch("ce seed 0", mixed, trained).differences == (
        (("fingerprint",), ["f1", "f2"], trained["fingerprint"]),
    )


def test_a_shift_mismatch_gives_each_defining_setting_made_and_wanted():
    shift = {"corruptions": ["gaussian_noise"], "severities": [5, 1]}
    made = defining_settings({"corruptions": ["gaussian_noise"], "severities": (1, 5)})
    assert shift_settings_mismatch("ce seed 0", made, shift) is None
    mismatch = shift_settings_mismatch("ce seed 0", {**made, "severities": [2]}, shift)
    assert mismatch.check is Check.SHIFT
    assert (("shift", "severities"), [2], [1, 5]) in mismatch.differences
    assert shift_settings_mismatch("ce seed 0", None, shift) == Mismatch(
        Check.SHIFT_UNRECORDED, "ce seed 0"
    )


def test_a_calibrator_mismatch_gives_the_key_and_both_definitions():
    fitted = {"ts@shifted": build_calibrator("temperature_nll")}
    same = {"ts": {"name": "temperature_nll"}}
    assert calibrator_mismatch("ce seed 0", fitted, same, "@shifted") is None
    other = {"ts": {"name": "histogram_binning", "params": {"n_bins": 10}}}
    mismatch = calibrator_mismatch("ce seed 0", fitted, other, "@shifted")
    (((key,), was, now),) = mismatch.differences
    assert (mismatch.check, key, was[0], now[0]) == (
        Check.CALIBRATOR,
        "ts@shifted",
        "temperature_nll",
        "histogram_binning",
    )
    assert calibrator_mismatch("ce seed 0", fitted, {}, "@shifted") is None
