"""Every parameter group is checked when the pipelines are built: misspelt keys, unknown
groups, out-of-range values and unknown names fail with the valid choices."""

from __future__ import annotations

import copy

import pytest

from calib_pipeline.pipelines.checks import GROUPS, check_parameters
from calib_pipeline.settings import load_parameters, project_root


@pytest.fixture(scope="module")
def shipped() -> dict:
    return load_parameters("test", project_root())


@pytest.mark.parametrize(
    "env", ["local", "test", "cifar10", "cifar100", "svhn", "tiny_imagenet", "fashion_mnist"]
)
def test_every_shipped_environment_passes(env):
    check_parameters(load_parameters(env, project_root()))


@pytest.mark.parametrize(
    ("group", "key", "value", "message"),
    [
        ("evaluation", "n_bins", 0, r"evaluation.n_bins must be an integer >= 1, got 0"),
        ("evaluation", "n_bins", 1.5, r"evaluation.n_bins must be an integer >= 1, got 1.5"),
        (
            "evaluation",
            "n_bin",
            20,
            r"evaluation: unknown key\(s\) \['n_bin'\]; valid keys: "
            r"\['n_bins', 'reliability_bins', 'shift_metrics', 'metrics'\]",
        ),
        (
            "evaluation",
            "shift_metrics",
            ["ece", "eec"],
            r"evaluation.shift_metrics must be one of .*'ece'.*, got 'eec'",
        ),
        ("evaluation", "shift_metrics", [], r"evaluation.shift_metrics must be a non-empty list"),
        ("evaluation", "metrics", "skce", r"evaluation.metrics must be a list .*, got 'skce'"),
        (
            "evaluation",
            "metrics",
            ["skce", "sk_ce"],
            r"evaluation.metrics must be one of .*'skce'.*, got 'sk_ce'",
        ),
        (
            "evaluation",
            "reliability_bins",
            [15, 0],
            r"evaluation.reliability_bins must be an integer >= 1, got 0",
        ),
        (
            "logits",
            "device",
            "gpu",
            r"logits.device must be 'auto', 'cpu' or 'cuda\[:i\]', got 'gpu'",
        ),
        (
            "training",
            "device",
            "cuda:64",
            r"training.device is 'cuda:64' but this machine sees \d+ CUDA device\(s\); use 'auto'",
        ),
        ("logits", "features", "yes", r"logits.features must be true or false, got 'yes'"),
        ("logits", "batch", 10, r"logits: unknown key\(s\) \['batch'\]"),
        ("logits", "batch_size", 0, r"logits.batch_size must be an integer >= 1, got 0"),
        ("logits", "batch_size", 64.0, r"logits.batch_size must be an integer >= 1, got 64.0"),
        (
            "model",
            "params",
            {"widht": 8},
            r"model 'small_cnn' got unknown parameter\(s\) \['widht'\]; it accepts: .*width",
        ),
        ("model", "name", "vgg", r"unknown model 'vgg'; valid model names are"),
        ("dataset", "download", "no", r"dataset.download must be true or false"),
        ("dataset", "root", "/data", r"dataset: unknown key\(s\) \['root'\]"),
    ],
)
def test_a_bad_key_or_value_fails_naming_the_valid_choices(shipped, group, key, value, message):
    bad = copy.deepcopy(shipped)
    bad[group][key] = value
    with pytest.raises(ValueError, match=message):
        check_parameters(bad)


def test_an_unknown_group_names_the_valid_groups(shipped):
    with pytest.raises(
        ValueError,
        match=r"unknown parameter group\(s\) \['evalution'\]; valid groups: \[.*'evaluation'",
    ):
        check_parameters({**shipped, "evalution": {"n_bins": 20}})


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        ([0, 0], "lists a seed twice"),
        ([], "non-empty list"),
        ([1, -1], "seeds must be an integer >= 0"),
        ([True], "must be an integer"),
    ],
)
def test_seeds_are_distinct_non_negative_integers(shipped, seeds, message):
    with pytest.raises(ValueError, match=message):
        check_parameters({**shipped, "seeds": seeds})


def test_split_and_calibrator_entries_refuse_unknown_keys(shipped):
    bad = copy.deepcopy(shipped)
    bad["splits"]["standard"]["fraction"] = {"train": 0.5, "val": 0.5}
    with pytest.raises(ValueError, match=r"splits.standard: unknown key\(s\) \['fraction'\]"):
        check_parameters(bad)
    bad = copy.deepcopy(shipped)
    bad["calibrators"]["ts"]["param"] = {}
    with pytest.raises(
        ValueError,
        match=r"calibrators.ts: unknown key\(s\) \['param'\]; valid keys: \['name', 'params'\]",
    ):
        check_parameters(bad)


@pytest.mark.parametrize(
    ("subset", "message"), [(5, "got 5"), ("all", "got 'all'"), (12.5, "got 12.5")]
)
def test_a_split_subset_is_null_or_an_integer_of_at_least_ten(shipped, subset, message):
    bad = copy.deepcopy(shipped)
    bad["splits"]["standard"]["subset"] = subset
    with pytest.raises(
        ValueError,
        match=rf"splits.standard: split subset must be null .* or an integer >= 10, {message}",
    ):
        check_parameters(bad)
    bad["splits"]["standard"]["subset"] = 1000
    check_parameters(bad)


def test_base_model_params_do_not_leak_into_another_architecture():
    # envs are merged key by key: base params under another model name would be refused
    for env in ("cifar10", "svhn"):
        model = load_parameters(env, project_root())["model"]
        assert model == {"name": "resnet18", "params": {}}


def test_every_group_has_a_check():
    assert set(GROUPS) >= set(load_parameters("local", project_root()))


def test_a_method_override_naming_an_absent_device_fails(shipped):
    bad = copy.deepcopy(shipped)
    method = next(iter(bad["methods"]))
    bad["methods"][method]["training"] = {"device": "cuda:64"}
    with pytest.raises(ValueError, match=rf"methods.{method}.training.device is 'cuda:64'"):
        check_parameters(bad)
