"""A small CNN for the CPU-sized defaults (8×8 digits, 28×28 MNIST-like images)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from calib_pipeline.models.layers import pooled_features
from calib_pipeline.models.registry import MODELS, ClassifierNet
from calib_pipeline.registry import check_int


class SmallCNN(ClassifierNet):
    """Two 3×3 conv blocks (conv-BN-ReLU, the first max-pooled for inputs ≥ 16 px), average
    pooling to a ``pool_grid`` × ``pool_grid`` map and a hidden linear layer whose output is
    the feature vector. A larger grid keeps more of the spatial layout in the hidden layer:
    more capacity (it memorises a training set sooner) for little more compute."""

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        image_size: int,
        width: int,
        feature_dim: int,
        pool_grid: int = 2,
    ) -> None:
        super().__init__(feature_dim, num_classes)
        pool = nn.MaxPool2d(2) if image_size >= 16 else nn.Identity()
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            pool,
            nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            *pooled_features(pool_grid),
            nn.Linear(2 * width * pool_grid * pool_grid, feature_dim),
            nn.ReLU(inplace=True),
        )

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def check_small_cnn_options(
    *, width: int = 32, feature_dim: int = 128, pool_grid: int = 2, **_: Any
) -> None:
    """``ValueError`` quoting a bad value (checked when the pipelines are built)."""
    check_int("width", width, low=1)
    check_int("feature_dim", feature_dim, low=1)
    check_int("pool_grid", pool_grid, low=1)


@MODELS.register("small_cnn", validate=check_small_cnn_options)
def small_cnn(
    *,
    in_channels: int,
    num_classes: int,
    image_size: int,
    width: int = 32,
    feature_dim: int = 128,
    pool_grid: int = 2,
) -> SmallCNN:
    check_small_cnn_options(width=width, feature_dim=feature_dim, pool_grid=pool_grid)
    return SmallCNN(in_channels, num_classes, image_size, width, feature_dim, pool_grid)


@MODELS.register("small_cnn_dense", validate=check_small_cnn_options)
def small_cnn_dense(
    *, in_channels: int, num_classes: int, image_size: int, width: int = 32, feature_dim: int = 128
) -> SmallCNN:
    """``small_cnn`` whose hidden layer reads the whole conv map, unpooled (``pool_grid`` =
    the map's size: 8 on 8×8 digits, 14 on 28×28): a dense head on top of two convolutions,
    the capacity that makes CE overconfident on digits (docs/protocols.md). A name of its own
    rather than an option: base's model options would leak into the other environments'
    architectures (parameters merge key by key)."""
    conv_map = image_size // 2 if image_size >= 16 else image_size
    return small_cnn(
        in_channels=in_channels,
        num_classes=num_classes,
        image_size=image_size,
        width=width,
        feature_dim=feature_dim,
        pool_grid=conv_map,
    )
