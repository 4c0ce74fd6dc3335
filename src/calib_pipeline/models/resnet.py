"""CIFAR ResNets: ResNet-18/34 (He et al., CIFAR stem) and the 6n+2 family (ResNet-20/32/56/110).

The CIFAR variants use a 3×3 stride-1 stem without max-pooling, as in the code
of the focal-loss (Mukhoti) and meta-regularisation papers; the 6n+2 family uses
option-A-free projection shortcuts (1×1 conv + BN) for simplicity and stability.
"""

from __future__ import annotations

import torch
from torch import nn

from calib_pipeline.models.registry import MODELS, ClassifierNet


class BasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class CifarResNet(ClassifierNet):
    """Stages of ``BasicBlock``s; ``widths[i]`` channels, stride 2 from the second stage on."""

    def __init__(
        self, in_channels: int, num_classes: int, blocks: list[int], widths: list[int]
    ) -> None:
        super().__init__(widths[-1], num_classes)
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
        )
        layers: list[nn.Module] = []
        in_planes = widths[0]
        for stage, (count, planes) in enumerate(zip(blocks, widths)):
            for index in range(count):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(BasicBlock(in_planes, planes, stride))
                in_planes = planes
        self.stages = nn.Sequential(*layers)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.stages(self.stem(x)))


def _register_resnet(name: str, blocks: list[int], widths: list[int]) -> None:
    def factory(*, in_channels: int, num_classes: int, image_size: int) -> CifarResNet:
        return CifarResNet(in_channels, num_classes, blocks, widths)

    factory.__doc__ = f"{name}: blocks per stage {blocks}, widths {widths}."
    MODELS.register(name)(factory)


_register_resnet("resnet18", [2, 2, 2, 2], [64, 128, 256, 512])
_register_resnet("resnet34", [3, 4, 6, 3], [64, 128, 256, 512])
for _depth in (20, 32, 56, 110):
    _n = (_depth - 2) // 6
    _register_resnet(f"resnet{_depth}", [_n, _n, _n], [16, 32, 64])
