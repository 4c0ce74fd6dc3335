"""DenseNet-121 for CIFAR (Huang et al., CVPR 2017; DenseNet-BC with the CIFAR stem).

The variant of the focal-loss code (Mukhoti et al.'s DenseNet-121): a 3×3 stride-1 stem
convolution to 2k channels (no BN, ReLU or max-pooling after it), dense blocks of
[6, 12, 24, 16] bottleneck layers BN-ReLU-conv1×1(4k)-BN-ReLU-conv3×3(k) whose outputs are
concatenated, transitions BN-ReLU-conv1×1 halving the channels followed by 2×2 average
pooling, and a final BN-ReLU before global average pooling. k is the growth rate (32).

Pooling uses ``ceil_mode`` so that odd or tiny images keep a pixel (28 → 14 → 7 → 4); on
32- and 64-px images it is the ordinary 2×2 pooling.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from calib_pipeline.models.layers import init_conv_weights, pooled_features
from calib_pipeline.models.registry import MODELS, ClassifierNet
from calib_pipeline.registry import check_int

DENSENET121_BLOCKS = (6, 12, 24, 16)


def _bn_relu_conv(in_planes: int, out_planes: int, kernel_size: int) -> list[nn.Module]:
    return [
        nn.BatchNorm2d(in_planes),
        nn.ReLU(inplace=True),
        nn.Conv2d(in_planes, out_planes, kernel_size, padding=kernel_size // 2, bias=False),
    ]


class DenseLayer(nn.Module):
    """Bottleneck layer: ``growth_rate`` new channels concatenated after the input's."""

    def __init__(self, in_planes: int, growth_rate: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *_bn_relu_conv(in_planes, 4 * growth_rate, 1),
            *_bn_relu_conv(4 * growth_rate, growth_rate, 3),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.body(x)], dim=1)


class CifarDenseNet(ClassifierNet):
    def __init__(
        self, in_channels: int, num_classes: int, blocks: tuple[int, ...], growth_rate: int
    ) -> None:
        planes = 2 * growth_rate
        layers: list[nn.Module] = [nn.Conv2d(in_channels, planes, 3, 1, 1, bias=False)]
        for index, count in enumerate(blocks):
            for _ in range(count):
                layers.append(DenseLayer(planes, growth_rate))
                planes += growth_rate
            if index < len(blocks) - 1:  # transition: compression 0.5 (DenseNet-BC)
                layers += [*_bn_relu_conv(planes, planes // 2, 1), nn.AvgPool2d(2, ceil_mode=True)]
                planes //= 2
        layers += [nn.BatchNorm2d(planes), nn.ReLU(inplace=True)]
        super().__init__(planes, num_classes)
        self.body = nn.Sequential(*layers)
        self.pool = pooled_features(1)
        init_conv_weights(self)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.body(x))


def check_densenet_options(*, growth_rate: int = 32, **_: Any) -> int:
    return check_int("growth_rate", growth_rate, low=1)


@MODELS.register("densenet121", validate=check_densenet_options)
def densenet121(
    *, in_channels: int, num_classes: int, image_size: int, growth_rate: int = 32
) -> CifarDenseNet:
    """DenseNet-121 (CIFAR variant), growth rate k (32 in the papers)."""
    check_densenet_options(growth_rate=growth_rate)
    return CifarDenseNet(in_channels, num_classes, DENSENET121_BLOCKS, growth_rate)
