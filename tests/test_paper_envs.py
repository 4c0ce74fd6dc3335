"""The paper environments (conf/cifar10, cifar100, tiny_imagenet, svhn) take what they share
from conf/base/globals_paper_envs.yml and write only their own settings."""

import shutil
from pathlib import Path

import pytest

from calib_pipeline.settings import load_parameters, project_root

PROJECT = Path(project_root())
PAPER_ENVS = ("cifar10", "cifar100", "tiny_imagenet", "svhn")
OTHER_ENVS = ("base", "test", "fashion_mnist")


def test_a_shared_setting_is_changed_for_every_paper_env_in_one_place(tmp_path):
    shutil.copytree(PROJECT / "conf", tmp_path / "conf")
    shared = tmp_path / "conf" / "base" / "globals_paper_envs.yml"
    text = shared.read_text(encoding="utf-8")
    for old, new in [
        ("seeds: [0, 1, 2, 3, 4]", "seeds: [7]"),
        ("weight_decay: 5.0e-4", "weight_decay: 1.0e-3"),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    shared.write_text(text, encoding="utf-8")
    for env in PAPER_ENVS:
        parameters = load_parameters(env, tmp_path)
        assert parameters["seeds"] == [7], env
        assert parameters["training"]["weight_decay"] == 1.0e-3, (
            f"{env}: the SGD block reaches every recipe"
        )
    for env in OTHER_ENVS:
        assert load_parameters(env, tmp_path) == load_parameters(env, PROJECT), (
            f"{env} shares nothing"
        )


def test_cifar10_and_cifar100_differ_only_in_their_own_settings():
    cifar10, cifar100 = load_parameters("cifar10", PROJECT), load_parameters("cifar100", PROJECT)
    assert {key for key in cifar10 if cifar10[key] != cifar100[key]} == {
        "dataset",
        "shift",
        "studies",
    }
    assert cifar100["studies"]["calibratability"]["reports"]["calibratability_table"]["exclude"]


@pytest.mark.parametrize("env", PAPER_ENVS)
def test_a_paper_env_keeps_its_own_recipe_on_the_shared_sgd(env):
    training = load_parameters(env, PROJECT)["training"]
    sgd = {"batch_size": 128, "lr": 0.1, "momentum": 0.9, "weight_decay": 5.0e-4, "lr_decay": 0.1}
    assert {key: training[key] for key in sgd} == sgd
    own = {
        "cifar10": (350, 1000, "crop_flip"),
        "cifar100": (350, 1000, "crop_flip"),
        "tiny_imagenet": (350, 500, "crop_flip"),
        "svhn": (100, None, "none"),
    }
    assert (training["epochs"], training.get("eval_batch_size"), training["augment"]) == own[env]
    assert ("precision" in training) == env.startswith("cifar"), "GPU options only where they were"
