"""A small CNN for the CPU-sized defaults (8×8 digits, 28×28 MNIST-like images)."""

from __future__ import annotations

import torch
from torch import nn

from calib_pipeline.models.registry import MODELS, ClassifierNet


class SmallCNN(ClassifierNet):
    """Two 3×3 conv blocks (conv-BN-ReLU, the second pooled for inputs ≥ 16 px),
    global average pooling and a hidden linear layer whose output is the feature vector."""

    def __init__(
        self, in_channels: int, num_classes: int, image_size: int, width: int, feature_dim: int
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
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
            nn.Linear(8 * width, feature_dim),
            nn.ReLU(inplace=True),
        )

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


@MODELS.register("small_cnn")
def small_cnn(
    *, in_channels: int, num_classes: int, image_size: int, width: int = 32, feature_dim: int = 128
) -> SmallCNN:
    if width < 1 or feature_dim < 1:
        raise ValueError(f"width and feature_dim must be >= 1, got {width}, {feature_dim}")
    return SmallCNN(in_channels, num_classes, image_size, width, feature_dim)
