"""Device-resident batching with batched augmentation (airbench style).

The whole split lives on the training device; an epoch is a permutation drawn
from an explicit ``torch.Generator`` whose state is checkpointed, so a resumed
run draws the same batches as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from calib_pipeline.data.datasets import to_float


class Normalizer:
    """Per-channel standardisation applied on the device, batch by batch."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...], device: torch.device):
        self.mean = torch.tensor(mean, device=device).view(1, -1, 1, 1)
        self.std = torch.tensor(std, device=device).view(1, -1, 1, 1)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return (to_float(images) - self.mean) / self.std


def augment_batch(images: torch.Tensor, mode: str, generator: torch.Generator) -> torch.Tensor:
    """Random horizontal flip (p = 0.5) and, for ``crop_flip``, a random 4-px-padded crop.

    Crops are taken for the whole batch at once: the padded batch is unfolded with
    per-sample offsets through ``gather`` on a precomputed index grid.
    """
    if mode == "none":
        return images
    n, _, h, w = images.shape
    device = images.device
    flip = torch.rand(n, generator=generator, device=generator.device) < 0.5
    images = torch.where(flip.to(device).view(-1, 1, 1, 1), images.flip(-1), images)
    if mode == "crop_flip":
        pad = 4
        padded = torch.nn.functional.pad(images, (pad, pad, pad, pad), mode="reflect")
        dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=generator.device)
        dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=generator.device)
        rows = (dy.to(device).view(n, 1) + torch.arange(h, device=device)).view(n, 1, h, 1)
        cols = (dx.to(device).view(n, 1) + torch.arange(w, device=device)).view(n, 1, 1, w)
        c = images.shape[1]
        padded = padded.gather(2, rows.expand(n, c, h, padded.shape[-1]))
        images = padded.gather(3, cols.expand(n, c, h, w))
    return images


class BatchStream:
    """Shuffled mini-batches of a device-resident split."""

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

    def __len__(self) -> int:
        n = len(self.images)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        order = torch.randperm(len(self.images), generator=self.generator, device="cpu")
        order = order.to(self.images.device)
        for start in range(0, len(order) - (self.batch_size - 1 if self.drop_last else 0), self.batch_size):
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
            order = torch.randperm(len(stream.images), generator=stream.generator, device="cpu")
            self.order, self.position = order.to(stream.images.device), 0
        index = self.order[self.position : self.position + stream.batch_size]
        self.position += stream.batch_size
        return index, stream.images[index], stream.labels[index]

    def state_dict(self) -> dict[str, torch.Tensor | int | None]:
        return {"order": None if self.order is None else self.order.cpu(), "position": self.position}

    def load_state_dict(self, state: dict[str, torch.Tensor | int | None]) -> None:
        order = state["order"]
        self.order = None if order is None else order.to(self.stream.images.device)
        self.position = int(state["position"])
