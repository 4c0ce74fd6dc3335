"""Pieces the registered architectures share: weight initialisation and the pooling head."""

from __future__ import annotations

from torch import Tensor, nn


def init_conv_weights(model: nn.Module) -> None:
    """He initialisation of every convolution (normal, fan-out, ReLU gain), as Zagoruyko &
    Komodakis's and the focal-loss code's wide ResNet and Tiny-ImageNet ResNet do; BatchNorm
    starts at (1, 0) and linear layers keep PyTorch's default. The CIFAR ResNet/DenseNet of
    the focal-loss code and the meta-calibration code's ResNet-18 keep PyTorch's default
    (Kaiming-uniform, a = sqrt(5)) instead -- a deliberate difference, one policy for every
    CIFAR network here (``small_cnn`` keeps PyTorch's default); see docs/models.md."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")


def pooled_features(grid: int = 1) -> nn.Sequential:
    """Average pooling to a ``grid × grid`` map, flattened: ``channels · grid²`` features.

    ``grid = 1`` is global average pooling, which makes a network independent of the image
    size (the CIFAR papers' fixed 4×4 or 8×8 pools are global at 32 px). ``grid = 2`` is the
    focal-loss code's Tiny-ImageNet ResNet-50 (``AdaptiveAvgPool2d(2)`` on its 8×8 map).
    """
    return nn.Sequential(GridPool(grid), nn.Flatten())


class GridPool(nn.AdaptiveAvgPool2d):
    """``AdaptiveAvgPool2d`` to a square grid that passes a map already of the grid's size
    through: each output cell would average one input cell, the same numbers. On a CPU that
    identity pooling costs as much as a convolution -- a large share of ``small_cnn_dense``'s
    evaluation and training time on the 8×8 digits map (docs/performance.md)."""

    def forward(self, x: Tensor) -> Tensor:
        grid = self.output_size  # an int: the side of the square grid
        if x.shape[-2:] == (grid, grid):
            return x
        return super().forward(x)
