"""Picking a paper's network with `--params` (docs/models.md, "Paper protocols") passes the
same checks a `kedro run --env=<env> --params=...` runs, and builds for the env's images.
The run files with the papers' full protocols: tests/test_paper_runs.py."""

import pytest
import torch
from kedro.config import OmegaConfigLoader
from omegaconf import OmegaConf

from calib_pipeline.models import build_model
from calib_pipeline.pipelines.checks import check_parameters
from calib_pipeline.pipelines.config import parse_structure, validate_buildable
from calib_pipeline.settings import CONFIG_LOADER_ARGS, project_root

IMAGES = {"cifar10": (3, 32, 10), "cifar100": (3, 32, 100), "tiny_imagenet": (3, 64, 200)}
CIFAR_OVERRIDES = [
    "model.name=resnet50",  # Mukhoti et al. (also Singh et al.)
    "model.name=resnet110_bottleneck",  # Mukhoti et al.; Wang et al.'s appendix
    "model.name=wrn_26_10",  # Mukhoti et al.
    "model.name=densenet121",  # Mukhoti et al., Singh et al.
    "model.name=wrn_28_10",  # Karandikar et al.
    "model.name=resnet32,model.params.shortcut=zero_pad",  # Wang et al.
    "model.name=vgg16_bn",  # Singh et al.
]
CASES = [(env, o) for env in ("cifar10", "cifar100") for o in CIFAR_OVERRIDES] + [
    ("tiny_imagenet", "model.name=resnet50,model.params.pool_grid=2"),  # Mukhoti et al.
]


def parameters_with(env: str, dotlist: str) -> dict:
    """Parameters as a Kedro session loads them with ``--params=<dotlist>``."""
    runtime = OmegaConf.to_container(OmegaConf.from_dotlist(dotlist.split(",")))
    loader = OmegaConfigLoader(
        conf_source=f"{project_root()}/conf", env=env, runtime_params=runtime, **CONFIG_LOADER_ARGS
    )
    return loader["parameters"]


@pytest.mark.parametrize(("env", "dotlist"), CASES)
def test_each_papers_architecture_runs_in_its_env(env, dotlist):
    parameters = parameters_with(env, dotlist)
    check_parameters(parameters)
    validate_buildable(parse_structure(parameters), parameters)
    model = parameters["model"]
    channels, size, classes = IMAGES[env]
    with torch.device("meta"):
        net = build_model(
            model["name"],
            in_channels=channels,
            num_classes=classes,
            image_size=size,
            **model["params"],
        )
        logits = net(torch.empty(2, channels, size, size))
    assert logits.shape == (2, classes)


def test_a_misspelt_override_fails_before_anything_runs():
    parameters = parameters_with("cifar10", "model.name=wrn_26_10,model.params.depth=28")
    with pytest.raises(
        ValueError, match=r"model 'wrn_26_10' got unknown parameter\(s\) \['depth'\]"
    ):
        check_parameters(parameters)


def parameters_from_run_file(env: str, params: dict) -> dict:
    """Parameters as a Kedro session loads them from ``kedro run --config`` (nested params)."""
    loader = OmegaConfigLoader(
        conf_source=f"{project_root()}/conf", env=env, runtime_params=params, **CONFIG_LOADER_ARGS
    )
    return loader["parameters"]


def test_epochs_without_their_milestones_fail_before_anything_runs():
    parameters = parameters_from_run_file("cifar10", {"training": {"epochs": 200}})
    check_parameters(parameters)
    with pytest.raises(ValueError, match=r"milestones \[250\] would never lower the learning rate"):
        validate_buildable(parse_structure(parameters), parameters)
