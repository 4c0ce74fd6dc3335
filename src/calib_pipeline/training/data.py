"""Device-resident batching with batched augmentation (airbench style).

The whole split lives on the training device; an epoch is a permutation drawn
from an explicit ``torch.Generator`` on that device whose state is checkpointed, so a
resumed run draws the same batches (and augmentation) as an uninterrupted one, and no
step waits for randomness made on the host.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from calib_pipeline.data.datasets import to_float


class Normalizer:
    """Per-channel standardisation applied on the device, batch by batch; with
    ``channels_last`` its output is laid out NHWC for a conv net stored that way."""

    def __init__(
        self,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        device: torch.device,
        channels_last: bool = False,
    ):
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1)
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1)
        self.channels_last = channels_last

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        out = (to_float(images) - self.mean) / self.std
        return out.contiguous(memory_format=torch.channels_last) if self.channels_last else out


AUGMENTATIONS = ("none", "flip", "crop_flip")
CROP_PADDING = 4


@dataclass(frozen=True)
class AugmentationDraws:
    """The randomness of augmenting ``n`` images: a flip bit and crop offsets each.

    The engine draws one epoch's worth at once, on the training device, and slices it per
    batch, so no step waits for a host-side random number (a copy from host memory would
    synchronise the device every step).
    """

    flip: torch.Tensor  # (n,) bool
    dy: torch.Tensor | None = None  # (n,) int64 crop offsets, crop_flip only
    dx: torch.Tensor | None = None

    def __getitem__(self, rows: slice) -> AugmentationDraws:
        return AugmentationDraws(
            self.flip[rows],
            None if self.dy is None else self.dy[rows],
            None if self.dx is None else self.dx[rows],
        )


def draw_augmentation(n: int, mode: str, generator: torch.Generator) -> AugmentationDraws | None:
    """Draws for ``n`` images under ``mode`` on ``generator``'s device (None for ``none``)."""
    if mode not in AUGMENTATIONS:
        raise ValueError(f"augment must be one of {AUGMENTATIONS}, got {mode!r}")
    if mode == "none":
        return None
    device = generator.device
    flip = torch.rand(n, generator=generator, device=device) < 0.5
    if mode == "flip":
        return AugmentationDraws(flip)
    span = 2 * CROP_PADDING + 1
    dy = torch.randint(0, span, (n,), generator=generator, device=device)
    dx = torch.randint(0, span, (n,), generator=generator, device=device)
    return AugmentationDraws(flip, dy, dx)


def apply_augmentation(images: torch.Tensor, draws: AugmentationDraws | None) -> torch.Tensor:
    """Random horizontal flip (p = 0.5) and, with crop offsets, a random 4-px-padded crop.

    Apply it to the raw (uint8) images, before normalisation: the padding is zeros --
    black pixels, as the papers' ``RandomCrop(32, padding=4)`` pads before ``Normalize``.
    Crops are taken for the whole batch at once: the padded batch is unfolded with
    per-sample offsets through ``gather`` on an index grid -- no per-sample loop, no sync.
    """
    if draws is None:
        return images
    n, c, h, w = images.shape
    device = images.device
    images = torch.where(draws.flip.to(device).view(-1, 1, 1, 1), images.flip(-1), images)
    if draws.dy is None or draws.dx is None:
        return images
    pad = CROP_PADDING
    padded = torch.nn.functional.pad(images, (pad, pad, pad, pad))  # constant 0
    rows = (draws.dy.to(device).view(n, 1) + torch.arange(h, device=device)).view(n, 1, h, 1)
    cols = (draws.dx.to(device).view(n, 1) + torch.arange(w, device=device)).view(n, 1, 1, w)
    padded = padded.gather(2, rows.expand(n, c, h, padded.shape[-1]))
    return padded.gather(3, cols.expand(n, c, h, w))


def augment_batch(images: torch.Tensor, mode: str, generator: torch.Generator) -> torch.Tensor:
    """Draw and apply ``mode``'s augmentation to one batch (``draw_augmentation`` then
    ``apply_augmentation``)."""
    return apply_augmentation(images, draw_augmentation(len(images), mode, generator))


class BatchStream:
    """Shuffled mini-batches of a device-resident split.

    ``order`` is the permutation of the pass in progress (or last finished): batch ``i``
    holds ``order[i * batch_size : (i + 1) * batch_size]``.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        batch_size: int,
        generator: torch.Generator,
        drop_last: bool = False,
    ) -> None:
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        if len(images) == 0:
            raise ValueError("cannot batch an empty split")
        self.images = images
        self.labels = labels
        self.batch_size = min(batch_size, len(images))
        self.generator = generator
        self.drop_last = drop_last
        self.order: torch.Tensor | None = None

    def __len__(self) -> int:
        n = len(self.images)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        order = torch.randperm(
            len(self.images), generator=self.generator, device=self.generator.device
        )
        order = self.order = order.to(self.images.device)
        for start in range(
            0, len(order) - (self.batch_size - 1 if self.drop_last else 0), self.batch_size
        ):
            index = order[start : start + self.batch_size]
            yield index, self.images[index], self.labels[index]


class EndlessBatches:
    """Batches of a split, one permutation after another, whose position can be saved.

    The meta-val split is read in step with the train batches, so a permutation of it
    usually spans epochs; resuming needs the current permutation and the position in it
    (a fresh permutation would draw other batches than the uninterrupted run).
    """

    def __init__(self, stream: BatchStream) -> None:
        self.stream = stream
        self.order: torch.Tensor | None = None
        self.position = 0

    def __iter__(self) -> EndlessBatches:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        stream = self.stream
        if self.order is None or self.position >= len(self.order):
            # drawn lazily, as the previous permutation runs out: the generator is shared
            order = torch.randperm(
                len(stream.images), generator=stream.generator, device=stream.generator.device
            )
            self.order, self.position = order.to(stream.images.device), 0
        index = self.order[self.position : self.position + stream.batch_size]
        self.position += stream.batch_size
        return index, stream.images[index], stream.labels[index]

    def state_dict(self) -> dict[str, torch.Tensor | int | None]:
        return {
            "order": None if self.order is None else self.order.cpu(),
            "position": self.position,
        }

    def load_state_dict(self, state: dict[str, torch.Tensor | int | None]) -> None:
        order = state["order"]
        self.order = None if order is None else order.to(self.stream.images.device)
        self.position = int(state["position"])
