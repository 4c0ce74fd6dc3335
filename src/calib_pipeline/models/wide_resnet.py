"""Wide ResNets WRN-d-k (Zagoruyko & Komodakis, BMVC 2016) with the CIFAR stem.

Two block styles, because the papers' codes differ:

* ``preactivation=True`` (default): Zagoruyko & Komodakis' network -- pre-activation blocks
  BN-ReLU-conv3×3-(dropout)-BN-ReLU-conv3×3, a 1×1 convolution (no BN) on the pre-activated
  input where the shape changes, a final BN-ReLU. Depth counts as in their paper,
  d = 6N + 4 for N blocks per stage (WRN-28-10: N = 4). Karandikar et al.'s WRN-28-10.
* ``preactivation=False``: the focal-loss code's ``wide_resnet_cifar`` (Mukhoti et al.'s
  WRN-26-10) -- He et al.'s post-activation basic blocks with projection shortcuts (1×1 conv
  + BN) and a 16-channel conv-BN-ReLU stem. Depth counts as in that code, d = 6N + 2
  (WRN-26-10: N = 4, the same block count as WRN-28-10).

Stage widths are 16k, 32k, 64k; the features are the 64k channels after global average
pooling.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from calib_pipeline.models.layers import init_conv_weights, pooled_features
from calib_pipeline.models.registry import MODELS, ClassifierNet
from calib_pipeline.models.resnet import BasicBlock, CifarResNet
from calib_pipeline.registry import check_bool, check_int, check_range


class PreActBlock(nn.Module):
    """Zagoruyko & Komodakis' wide basic block (pre-activation, dropout between the convs)."""

    def __init__(self, in_planes: int, planes: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.shortcut: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = torch.relu(self.bn1(x))
        residual = x if self.shortcut is None else self.shortcut(activated)
        out = self.conv1(activated)
        out = self.conv2(self.dropout(torch.relu(self.bn2(out))))
        return out + residual


class PreActWideResNet(ClassifierNet):
    """Conv3×3 stem (16 channels), three stages of ``PreActBlock``s, BN-ReLU, pooling."""

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        blocks_per_stage: int,
        widen_factor: int,
        dropout: float,
    ) -> None:
        widths = [16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        super().__init__(widths[-1], num_classes)
        self.stem = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        layers: list[nn.Module] = []
        in_planes = 16
        for stage, planes in enumerate(widths):
            for index in range(blocks_per_stage):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(PreActBlock(in_planes, planes, stride, dropout))
                in_planes = planes
        self.stages = nn.Sequential(*layers)
        self.final = nn.Sequential(nn.BatchNorm2d(in_planes), nn.ReLU(inplace=True))
        self.pool = pooled_features(1)
        init_conv_weights(self)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.final(self.stages(self.stem(x))))


def check_wrn_options(
    *,
    depth: int = 28,
    widen_factor: int = 10,
    dropout: float = 0.0,
    preactivation: bool = True,
    **_: Any,
) -> int:
    """Validate the options; returns the number of blocks per stage."""
    check_bool("preactivation", preactivation)
    check_int("widen_factor", widen_factor, low=1)
    check_range("dropout", dropout, low=0.0, high=1.0, high_inclusive=False)
    offset = 4 if preactivation else 2
    depth = check_int("depth", depth, low=offset + 6)
    if (depth - offset) % 6:
        valid = ", ".join(str(6 * n + offset) for n in range(1, 7))
        style = "pre-activation (6N+4)" if preactivation else "post-activation (6N+2)"
        raise ValueError(f"a {style} wide ResNet needs depth in {valid}, ...; got {depth}")
    return (depth - offset) // 6


@MODELS.register("wrn", validate=check_wrn_options)
def wrn(
    *,
    in_channels: int,
    num_classes: int,
    image_size: int,
    depth: int = 28,
    widen_factor: int = 10,
    dropout: float = 0.0,
    preactivation: bool = True,
) -> ClassifierNet:
    """WRN-``depth``-``widen_factor``; see the module docstring for the two block styles."""
    blocks = check_wrn_options(
        depth=depth, widen_factor=widen_factor, dropout=dropout, preactivation=preactivation
    )
    if preactivation:
        return PreActWideResNet(in_channels, num_classes, blocks, widen_factor, float(dropout))
    widths = [16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
    return CifarResNet(
        in_channels,
        num_classes,
        [blocks] * 3,
        widths,
        block=BasicBlock,
        stem_width=16,
        dropout=float(dropout),
    )


def _register_preset(name: str, depth: int, widen_factor: int, preactivation: bool) -> None:
    def factory(
        *, in_channels: int, num_classes: int, image_size: int, dropout: float = 0.0
    ) -> ClassifierNet:
        return wrn(
            in_channels=in_channels,
            num_classes=num_classes,
            image_size=image_size,
            depth=depth,
            widen_factor=widen_factor,
            dropout=dropout,
            preactivation=preactivation,
        )

    style = "pre-activation" if preactivation else "post-activation"
    factory.__doc__ = f"{name}: ``wrn`` with depth {depth}, widen_factor {widen_factor}, {style}."
    MODELS.register(name, validate=check_wrn_options)(factory)


_register_preset("wrn_28_10", 28, 10, preactivation=True)  # Karandikar et al.
_register_preset("wrn_26_10", 26, 10, preactivation=False)  # Mukhoti et al.'s code
