"""VGG-16 with batch normalisation for CIFAR (Simonyan & Zisserman, configuration D).

Thirteen 3×3 convolutions (with bias, as in VGG and torchvision's ``vgg16_bn``), each
followed by BN and ReLU, in five blocks closed by 2×2 max-pooling. The CIFAR variant -- for
Singh et al.'s "VGG-16"; they state BN only for their ConfidNet experiment (A.2) -- replaces
the three 4096-wide fully connected layers by one linear layer on the 512 channels -- here
the shared ``head``, after global average pooling (at 32 px the map is already 1×1). Pooling
uses ``ceil_mode`` so that 28-px and 8-px images keep a pixel through the five poolings.
"""

from __future__ import annotations

import torch
from torch import nn

from calib_pipeline.models.layers import init_conv_weights, pooled_features
from calib_pipeline.models.registry import MODELS, ClassifierNet

VGG16_WIDTHS = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


class CifarVGG(ClassifierNet):
    def __init__(
        self, in_channels: int, num_classes: int, blocks: tuple[tuple[int, ...], ...]
    ) -> None:
        super().__init__(blocks[-1][-1], num_classes)
        layers: list[nn.Module] = []
        planes = in_channels
        for block in blocks:
            for width in block:
                conv = nn.Conv2d(planes, width, 3, padding=1)
                layers += [conv, nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
                planes = width
            layers.append(nn.MaxPool2d(2, ceil_mode=True))
        self.body = nn.Sequential(*layers)
        self.pool = pooled_features(1)
        init_conv_weights(self)
        for module in self.body:
            if isinstance(module, nn.Conv2d):
                nn.init.zeros_(module.bias)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.body(x))


@MODELS.register("vgg16_bn")
def vgg16_bn(*, in_channels: int, num_classes: int, image_size: int) -> CifarVGG:
    """VGG-16 with BN, CIFAR variant (one linear layer on 512 pooled channels)."""
    return CifarVGG(in_channels, num_classes, VGG16_WIDTHS)
