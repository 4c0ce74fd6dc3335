"""The model registry and the interface every registered network implements."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from calib_pipeline.registry import Registry, check_int

MODELS: Registry[nn.Module] = Registry("model")


class ClassifierNet(nn.Module):
    """Base class: a feature extractor followed by one linear head.

    Subclasses implement ``forward_features``; the split lets γ-Net read the
    penultimate features and lets meta-learning unroll only the last layer.
    """

    def __init__(self, feature_dim: int, num_classes: int) -> None:
        super().__init__()
        self.feature_dim = feature_dim
        self.num_classes = num_classes
        self.head = nn.Linear(feature_dim, num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x))


def build_model(
    name: str, *, in_channels: int, num_classes: int, image_size: int, **params: Any
) -> ClassifierNet:
    """Build a registered architecture for inputs of ``in_channels × image_size²``.

    Args:
        name: registry name (see ``model_names()``).
        in_channels: 1 for greyscale, 3 for colour images.
        num_classes: number of output logits.
        image_size: input height (= width) in pixels.
        **params: architecture-specific options (e.g. ``width`` of the small CNN, ``depth``
            of ``wrn``); ``docs/models.md`` lists every architecture and its options.

    Returns:
        An untrained ``ClassifierNet``.

    Raises:
        ValueError: unknown name (listing the valid ones), unknown option or bad size.

    Example:
        >>> model = build_model("small_cnn", in_channels=1, num_classes=10, image_size=8)
        >>> model(torch.zeros(2, 1, 8, 8)).shape
        torch.Size([2, 10])
        >>> build_model("resnet152", in_channels=3, num_classes=10, image_size=32)
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: unknown model 'resnet152'; valid model names are: densenet121, ..., wrn_28_10
    """
    check_int("in_channels", in_channels, low=1)
    check_int("num_classes", num_classes, low=2)
    check_int("image_size", image_size, low=1)
    return MODELS.build(
        name, in_channels=in_channels, num_classes=num_classes, image_size=image_size, **params
    )


def model_names() -> list[str]:
    return MODELS.names()


DATA_SHAPED = ("in_channels", "num_classes", "image_size")  # set from the dataset, not a study


def check_model_params(name: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check a study's ``model`` entry -- a registered ``name`` and ``params`` its factory
    accepts -- without building anything; returns the params as a dict.

    Raises:
        ValueError: unknown name or option (listing the valid ones), a bad value, params
            that are not a mapping, or one of ``DATA_SHAPED`` (the dataset decides those).
    """
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise ValueError(f"model {name!r}: params must be a mapping, got {params!r}")
    reserved = sorted(set(params) & set(DATA_SHAPED))
    if reserved:
        raise ValueError(
            f"model {name!r}: {reserved} come from the dataset; remove them from the model params"
        )
    MODELS.check(name, in_channels=1, num_classes=2, image_size=8, **params)
    return dict(params)


def architecture_tag(name: str, params: dict[str, Any] | None = None) -> str:
    """The network ``build_model(name, **params)`` builds, as one comparable string: the
    name, then in brackets the options that differ from the factory's defaults, sorted
    (``resnet32[shortcut=zero_pad]``, ``resnet50[pool_grid=2]``, plain ``resnet18``).

    Two configurations get the same tag exactly when they build the same network on the
    same data (an option spelled at its default value does not change it), which is what
    comparing a run with a paper's published architecture needs; the name alone would
    match He et al.'s option-A ResNet-32 with the projection one.

    Raises:
        ValueError: unknown name or option (as ``build_model``).
    """
    params = check_model_params(name, params)
    defaults = {
        key: parameter.default
        for key, parameter in inspect.signature(MODELS.factory(name)).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    changed = sorted(
        f"{key}={value}" for key, value in params.items() if defaults.get(key, object()) != value
    )
    return f"{name}[{','.join(changed)}]" if changed else name


def model_from_checkpoint(checkpoint: dict[str, Any]) -> ClassifierNet:
    """Rebuild a trained network from a checkpoint dict (``architecture`` + ``state_dict``)."""
    arch = checkpoint["architecture"]
    model = build_model(
        arch["name"],
        in_channels=arch["in_channels"],
        num_classes=arch["num_classes"],
        image_size=arch["image_size"],
        **(arch.get("params") or {}),
    )
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval()
