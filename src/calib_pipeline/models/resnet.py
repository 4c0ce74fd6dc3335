"""CIFAR ResNets: the basic-block ResNet-18/34, the bottleneck ResNet-50, and He et al.'s
6n+2 family (ResNet-20/32/56/110), all with the CIFAR stem.

The CIFAR stem is one 3×3 stride-1 convolution without max-pooling, as in the code of the
focal-loss paper (Mukhoti et al.: ResNet-50 on CIFAR *and* on 64-px Tiny-ImageNet) and of
the meta-regularisation paper (ResNet-18). On 64-px Tiny-ImageNet the same stem leaves an
8×8 map after the last stage; global average pooling reads it (``pool_grid=2`` gives the
focal-loss code's Tiny-ImageNet variant, which pools to 2×2 and flattens).

Shortcuts: a 1×1 convolution + BN where the shape changes (``shortcut="projection"``,
the default, as in the focal-loss code's ResNets), or He et al.'s option A
(``shortcut="zero_pad"``: subsample and pad the new channels with zeros, no parameters),
which is how the published CIFAR counts (ResNet-32 0.46M, ResNet-110 1.7M; He et al. 2016,
Table 6) and Wang et al.'s ResNet-32 are built.

``resnet110_bottleneck`` is the network the focal-loss code calls ``resnet110`` (and which
Wang et al.'s code recommends for its ResNet-110): bottleneck stages [3, 4, 26, 3] of widths
64–512, 3·36 + 2 = 110 layers but 45.9M parameters -- not He et al.'s 1.7M ``resnet110``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from calib_pipeline.models.layers import init_conv_weights, pooled_features
from calib_pipeline.models.registry import MODELS, ClassifierNet
from calib_pipeline.registry import check_choice, check_int

SHORTCUTS = ("projection", "zero_pad")


class ZeroPadShortcut(nn.Module):
    """He et al.'s option A: keep every ``stride``-th pixel, pad the new channels with zeros."""

    def __init__(self, in_planes: int, out_planes: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.before = (out_planes - in_planes) // 2
        self.after = out_planes - in_planes - self.before

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.before, self.after))


def make_shortcut(in_planes: int, out_planes: int, stride: int, kind: str) -> nn.Module:
    """Identity where the shape is kept, else a projection (1×1 conv + BN) or zero padding."""
    if stride == 1 and in_planes == out_planes:
        return nn.Identity()
    if kind == "zero_pad":
        return ZeroPadShortcut(in_planes, out_planes, stride)
    return nn.Sequential(
        nn.Conv2d(in_planes, out_planes, 1, stride, bias=False), nn.BatchNorm2d(out_planes)
    )


class BasicBlock(nn.Module):
    """Two 3×3 conv-BN layers and a shortcut, ReLU after the sum (He et al.'s post-activation).

    ``dropout`` > 0 adds dropout between the two convolutions (Zagoruyko & Komodakis' place).
    """

    expansion = 1

    def __init__(
        self,
        in_planes: int,
        planes: int,
        stride: int,
        shortcut: str = "projection",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = make_shortcut(in_planes, planes, stride, shortcut)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.dropout(torch.relu(self.bn1(self.conv1(x))))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    """1×1 reduce, 3×3 (carrying the stride), 1×1 expand to ``4·planes``; ReLU after the sum."""

    expansion = 4

    def __init__(
        self, in_planes: int, planes: int, stride: int, shortcut: str = "projection"
    ) -> None:
        super().__init__()
        out_planes = planes * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(in_planes, planes, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, planes, 3, stride, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, out_planes, 1, bias=False),
            nn.BatchNorm2d(out_planes),
        )
        self.shortcut = make_shortcut(in_planes, out_planes, stride, shortcut)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class CifarResNet(ClassifierNet):
    """CIFAR stem, then stages of ``block``s: ``blocks[i]`` blocks of width ``widths[i]``
    (× the block's expansion), stride 2 from the second stage on; average pooling.

    Args:
        stem_width: channels of the stem (default ``widths[0]``; the wide ResNets keep 16).
        block_options: passed to every block (``shortcut``, and ``dropout`` for basic blocks).
        pool_grid: ``pooled_features`` grid; the features are ``channels · pool_grid²``.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        blocks: list[int],
        widths: list[int],
        *,
        block: type[BasicBlock] | type[Bottleneck] = BasicBlock,
        stem_width: int | None = None,
        pool_grid: int = 1,
        **block_options: Any,
    ) -> None:
        super().__init__(widths[-1] * block.expansion * pool_grid**2, num_classes)
        in_planes = stem_width or widths[0]
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, in_planes, 3, 1, 1, bias=False),
            nn.BatchNorm2d(in_planes),
            nn.ReLU(inplace=True),
        )
        layers: list[nn.Module] = []
        for stage, (count, planes) in enumerate(zip(blocks, widths)):
            for index in range(count):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(block(in_planes, planes, stride, **block_options))
                in_planes = planes * block.expansion
        self.stages = nn.Sequential(*layers)
        self.pool = pooled_features(pool_grid)
        init_conv_weights(self)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.stages(self.stem(x)))


def check_resnet_options(
    *, shortcut: str = "projection", pool_grid: int = 1, **_: Any
) -> tuple[str, int]:
    """The options every ResNet accepts; ``ValueError`` quoting a bad value."""
    return check_choice("shortcut", shortcut, SHORTCUTS), check_int("pool_grid", pool_grid, low=1)


def _register_resnet(
    name: str, blocks: list[int], widths: list[int], block: type[BasicBlock] | type[Bottleneck]
) -> None:
    def factory(
        *,
        in_channels: int,
        num_classes: int,
        image_size: int,
        shortcut: str = "projection",
        pool_grid: int = 1,
    ) -> CifarResNet:
        shortcut, pool_grid = check_resnet_options(shortcut=shortcut, pool_grid=pool_grid)
        return CifarResNet(
            in_channels,
            num_classes,
            blocks,
            widths,
            block=block,
            pool_grid=pool_grid,
            shortcut=shortcut,
        )

    factory.__doc__ = f"{name}: {block.__name__} stages {blocks}, widths {widths}."
    MODELS.register(name, validate=check_resnet_options)(factory)


_register_resnet("resnet18", [2, 2, 2, 2], [64, 128, 256, 512], BasicBlock)
_register_resnet("resnet34", [3, 4, 6, 3], [64, 128, 256, 512], BasicBlock)
_register_resnet("resnet50", [3, 4, 6, 3], [64, 128, 256, 512], Bottleneck)
_register_resnet("resnet110_bottleneck", [3, 4, 26, 3], [64, 128, 256, 512], Bottleneck)
for _depth in (20, 32, 56, 110):
    _n = (_depth - 2) // 6
    _register_resnet(f"resnet{_depth}", [_n, _n, _n], [16, 32, 64], BasicBlock)
