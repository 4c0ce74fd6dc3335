"""Seeded, stratified index splits of a dataset's training part."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from calib_pipeline.data.datasets import ImageData

SPLIT_NAMES = ("train", "val", "meta_val")


def check_fractions(fractions: Mapping[str, float]) -> dict[str, float]:
    """Validate split fractions: known names, each in (0, 1], ``train`` and ``val`` present,
    summing to 1 (±1e-6). Returns them as floats in the canonical order."""
    unknown = sorted(set(fractions) - set(SPLIT_NAMES))
    if unknown:
        raise ValueError(f"unknown split name(s) {unknown}; valid names are {list(SPLIT_NAMES)}")
    for required in ("train", "val"):
        if required not in fractions:
            raise ValueError(f"split fractions must include {required!r}, got {dict(fractions)}")
    clean = {}
    for name in SPLIT_NAMES:
        if name in fractions:
            value = float(fractions[name])
            if not 0.0 < value <= 1.0:
                raise ValueError(f"split fraction {name}={fractions[name]!r} must be in (0, 1]")
            clean[name] = value
    total = sum(clean.values())
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise ValueError(
            f"split fractions must sum to 1, got {total:.6g} from {dict(fractions)} "
            "(the official test set is separate and never part of these fractions)"
        )
    return clean


def stratified_split(
    labels: np.ndarray, fractions: Mapping[str, float], seed: int
) -> dict[str, np.ndarray]:
    """Split sample indices into disjoint parts with the class proportions of ``labels``.

    Within each class the samples are shuffled (NumPy ``default_rng(seed)``), ranked,
    and assigned to the part whose cumulative-fraction interval contains
    ``(rank + 0.5) / class_size`` -- every class is split in the given proportions up
    to rounding, without a loop over classes.

    Args:
        labels: (N,) integer class labels of the pool being split.
        fractions: part name -> fraction (see :func:`check_fractions`).
        seed: the same seed gives the same split.

    Returns:
        part name -> sorted int64 indices into ``labels``.
    """
    clean = check_fractions(fractions)
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError(f"labels must be a non-empty 1-D array, got shape {labels.shape}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(labels.size)
    order = order[np.argsort(labels[order], kind="stable")]
    sorted_labels = labels[order]
    _, first, counts = np.unique(sorted_labels, return_index=True, return_counts=True)
    class_start = np.repeat(first, counts)
    class_size = np.repeat(counts, counts)
    position = (np.arange(labels.size) - class_start + 0.5) / class_size
    bounds = np.cumsum(list(clean.values()))[:-1]
    part = np.searchsorted(bounds, position, side="right")
    return {name: np.sort(order[part == i]).astype(np.int64) for i, name in enumerate(clean)}


def stratified_folds(labels: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """The fold (0 .. ``folds`` - 1) of each sample for k-fold cross-validation: within each
    class the samples are shuffled (NumPy ``default_rng(seed)``) and dealt to the folds in
    turn, so every fold has each class's share up to one sample.

    Raises:
        ValueError: fewer samples than folds, or ``folds`` < 2.
    """
    labels = np.asarray(labels)
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"folds must be an integer >= 2, got {folds!r}")
    if labels.ndim != 1 or labels.size < folds:
        raise ValueError(
            f"{folds}-fold cross-validation needs at least {folds} samples, got {labels.size}"
        )
    rng = np.random.default_rng(seed)
    order = rng.permutation(labels.size)
    order = order[np.argsort(labels[order], kind="stable")]
    _, first, counts = np.unique(labels[order], return_index=True, return_counts=True)
    rank_in_class = np.arange(labels.size) - np.repeat(first, counts)
    fold = np.empty(labels.size, dtype=np.int64)
    # a running offset per class: the classes' remainders do not all land in fold 0
    fold[order] = (rank_in_class + np.repeat(np.cumsum(counts) - counts, counts)) % folds
    return fold


def val_test_split(labels: np.ndarray, val_fraction: float, seed: int) -> dict[str, np.ndarray]:
    """A stratified, seeded split of one labelled set into ``val`` (``val_fraction`` of each
    class, up to rounding) and ``test`` (the rest): :func:`stratified_split` with the test
    part in the place of its ``train`` part.

    Raises:
        ValueError: ``val_fraction`` outside (0, 1).
    """
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)):
        raise ValueError(f"val_fraction must be a number in (0, 1), got {val_fraction!r}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    parts = stratified_split(labels, {"train": 1.0 - val_fraction, "val": val_fraction}, seed)
    return {"val": parts["val"], "test": parts["train"]}


def check_subset(subset: Any, pool_size: int | None = None) -> int | None:
    """``None`` (the whole training part) or an integer >= 10 -- and at most ``pool_size``
    when it is known."""
    if subset is None:
        return None
    if isinstance(subset, bool) or not isinstance(subset, int) or subset < 10:
        raise ValueError(
            f"split subset must be null (all training images) or an integer >= 10, got {subset!r}"
        )
    if pool_size is not None and subset > pool_size:
        raise ValueError(
            f"split subset={subset} exceeds the {pool_size} images of the training part"
        )
    return subset


def stratified_subset(labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    """``size`` sample indices with the class proportions of ``labels`` (up to rounding),
    drawn with NumPy ``default_rng(seed)``; sorted int64. The rest of ``labels`` is unused."""
    labels = np.asarray(labels)
    size = check_subset(size, labels.size)
    if size == labels.size:
        return np.arange(labels.size, dtype=np.int64)
    kept = size / labels.size
    return stratified_split(labels, {"train": kept, "val": 1 - kept}, seed)["train"].astype(
        np.int64
    )


def split_dataset(data: ImageData, split: Mapping[str, Any]) -> dict[str, list[int]]:
    """Split ``data``'s training part by ``split`` (``{"seed", "fractions"[, "subset"]}``); the
    official test part is never touched. With ``subset: n`` only a stratified sample of n
    training images (drawn with the split's seed) is split by the fractions and the rest is
    never used -- how a CPU-sized protocol trains on part of a large training set. Returns
    part name -> sorted indices into the whole training part (JSON-friendly lists)."""
    labels = data.train_labels.numpy()
    seed = int(split.get("seed", 0))
    subset = split.get("subset")
    pool = np.arange(labels.size) if subset is None else stratified_subset(labels, subset, seed)
    parts = stratified_split(labels[pool], split["fractions"], seed)
    return {name: np.sort(pool[index]).tolist() for name, index in parts.items()}


def split_tensors(
    data: ImageData, split: Mapping[str, list[int]], part: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images and labels of one split part (``test`` is the official test set)."""
    if part == "test":
        return data.test_images, data.test_labels
    if part not in split:
        raise KeyError(f"split has no part {part!r}; it has {sorted(split)}")
    index = torch.as_tensor(split[part], dtype=torch.long)
    return data.train_images[index], data.train_labels[index]


def split_fingerprint(split: Mapping[str, list[int]]) -> str:
    """A hash of a split's indices: two artifacts agree on their split iff their hashes do."""
    text = json.dumps({part: list(map(int, split[part])) for part in sorted(split)})
    return hashlib.sha256(text.encode()).hexdigest()[:16]
