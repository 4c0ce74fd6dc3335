"""Loaders for the official distribution-shift test sets, read from the files users download.

Every loader returns ``(images, labels)``: float32 images (N, C, H, W) in [0, 1] and int64
labels (N,).  Files are looked up under one ``root`` folder with the layouts in
:data:`LAYOUTS` (the same text as ``docs/shift.md``); a missing file raises
:class:`ShiftSetMissing`, whose message gives the exact expected path and that layout.

=================  =================================================================
name               set
=================  =================================================================
cifar10_c          CIFAR-10-C  (Hendrycks & Dietterich 2019), 19 corruptions x 5
cifar100_c         CIFAR-100-C, same layout
tiny_imagenet_c    Tiny-ImageNet-C, 15 corruptions x 5, JPEG folders
cifar10_1          CIFAR-10.1 v4 / v6 (Recht et al. 2018)
cifar10_2          CIFAR-10.2 (Lu et al. 2020)
mnist_c            MNIST-C (Mu & Gilmer 2019), 15 corruptions + identity
=================  =================================================================

``load_shift_set(name, root, **kw)`` dispatches by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from calib_pipeline.data.corruptions import (
    BENCHMARK_CORRUPTIONS,
    SEVERITIES,
    check_severity,
    corruption_names,
)
from calib_pipeline.registry import Registry, check_choice

CIFAR_C_FOLDERS = {"cifar10": "CIFAR-10-C", "cifar100": "CIFAR-100-C"}
CIFAR_C_CORRUPTIONS = tuple(corruption_names(include_extra=True))
TINY_IMAGENET_C_CORRUPTIONS = BENCHMARK_CORRUPTIONS
MNIST_C_CORRUPTIONS = (
    "identity",
    "shot_noise",
    "impulse_noise",
    "glass_blur",
    "motion_blur",
    "shear",
    "scale",
    "rotate",
    "brightness",
    "translate",
    "stripe",
    "fog",
    "spatter",
    "dotted_line",
    "zigzag",
    "canny_edges",
)
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")

LAYOUTS: dict[str, str] = {
    "cifar_c": """\
<root>/CIFAR-10-C/<corruption>.npy    uint8 (50000, 32, 32, 3), 153,600,128 bytes: the
                                      10,000 CIFAR-10 test images at severity 1, then 2, ..., 5
<root>/CIFAR-10-C/labels.npy          uint8 (50000,): the test labels, repeated 5 times
(CIFAR-100-C: the same under <root>/CIFAR-100-C/.) 19 corruptions: the 15 benchmark ones
plus speckle_noise, gaussian_blur, spatter, saturate.
Source: CIFAR-10-C.tar (zenodo.org/record/2535967), CIFAR-100-C.tar
(zenodo.org/record/3555552), about 2.9 GB each; `tar -xf CIFAR-10-C.tar -C <root>`.""",
    "tiny_imagenet_c": """\
<root>/Tiny-ImageNet-C/<corruption>/<severity>/<wnid>/*.JPEG
                                      64x64 RGB JPEGs; 200 wnid folders x 50 validation
                                      images per (corruption, severity), severity 1..5;
                                      15 benchmark corruptions (750,000 files)
Source: Tiny-ImageNet-C.tar (zenodo.org/record/2536630); `tar -xf Tiny-ImageNet-C.tar -C <root>`.
Labels: index of <wnid> in class_order (default: the sorted wnids, as torchvision's
ImageFolder orders Tiny-ImageNet's train folder).""",
    "cifar10_1": """\
<root>/CIFAR-10.1/cifar10.1_<version>_data.npy    uint8 (N, 32, 32, 3)
<root>/CIFAR-10.1/cifar10.1_<version>_labels.npy  int (N,), CIFAR-10 class indices
version v6: N = 2,000 (6,144,128 bytes; recommended), v4: N = 2,021 (6,208,640 bytes).
Source: the datasets/ folder of github.com/modestyachts/CIFAR-10.1.""",
    "cifar10_2": """\
<root>/CIFAR-10.2/cifar102_<split>.npz  keys `images` uint8 (N, 32, 32, 3) and `labels`
                                        int64 (N,), CIFAR-10 class indices (also
                                        label_names, ti_indices, keywords, unused)
split test: N = 2,000; train: N = 10,000.
Source: github.com/modestyachts/cifar-10.2.""",
    "mnist_c": """\
<root>/mnist_c/<corruption>/test_images.npy   uint8 (10000, 28, 28, 1), 7,840,128 bytes
<root>/mnist_c/<corruption>/test_labels.npy   uint8 (10000,)
(train_images.npy / train_labels.npy: the same for the 60,000 training images.)
16 folders: identity (clean) and 15 corruptions.
Source: mnist_c.zip (zenodo.org/record/3239543); `unzip mnist_c.zip -d <root>`.""",
}


class ShiftSetMissing(FileNotFoundError):
    """An official shift-set file is absent; the message gives its path and the layout."""


SHIFT_SETS: Registry[tuple[torch.Tensor, torch.Tensor]] = Registry("shift set")


def shift_set_names() -> list[str]:
    return SHIFT_SETS.names()


def load_shift_set(
    name: str, root: str | Path, **options: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """Load the shift set ``name`` (see :func:`shift_set_names`) from ``root``.

    Args:
        name: registered set, e.g. ``"cifar10_c"``.
        root: folder holding the downloaded files in the documented layout.
        **options: the set's loader arguments (corruption, severity, version, split, ...).

    Returns:
        (images float32 (N, C, H, W) in [0, 1], labels int64 (N,)).

    Raises:
        ValueError: unknown name or option, or a bad option value.
        ShiftSetMissing: a file is absent.
    """
    return SHIFT_SETS.build(name, root=root, **options)


def load_cifar_c(
    root: str | Path, dataset: str, corruption: str, severity: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One (corruption, severity) slice of CIFAR-10-C or CIFAR-100-C.

    Args:
        root: folder holding ``CIFAR-10-C/`` or ``CIFAR-100-C/``.
        dataset: ``"cifar10"`` or ``"cifar100"``.
        corruption: one of the 19 CIFAR-C corruptions.
        severity: 1..5; rows ``[(severity - 1) * n, severity * n)`` with n = rows / 5.

    Returns:
        10,000 images (3, 32, 32) and their labels.
    """
    check_choice("dataset", dataset, tuple(CIFAR_C_FOLDERS))
    check_choice("corruption", corruption, CIFAR_C_CORRUPTIONS)
    check_severity(severity)
    folder = Path(root) / CIFAR_C_FOLDERS[dataset]
    images = _load_npy(folder / f"{corruption}.npy", "cifar_c", mmap=True)
    labels = _load_npy(folder / "labels.npy", "cifar_c", mmap=True)
    _check_shape(images, (None, 32, 32, 3), folder / f"{corruption}.npy")
    if len(images) % len(SEVERITIES) or len(labels) != len(images):
        raise ValueError(
            f"{folder}: {corruption}.npy has {len(images)} rows and labels.npy {len(labels)}; "
            f"expected equal counts, a multiple of {len(SEVERITIES)} (severities stacked)"
        )
    per_severity = len(images) // len(SEVERITIES)
    rows = slice((severity - 1) * per_severity, severity * per_severity)
    return _nhwc_to_float(images[rows]), _labels(labels[rows])


def load_tiny_imagenet_c(
    root: str | Path,
    corruption: str,
    severity: int,
    *,
    class_order: Sequence[str] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One (corruption, severity) folder of Tiny-ImageNet-C.

    Args:
        root: folder holding ``Tiny-ImageNet-C/``.
        corruption: one of the 15 benchmark corruptions.
        severity: 1..5.
        class_order: wnids in the model's label order; default the sorted wnid folders.

    Returns:
        The images (3, 64, 64), in wnid then file-name order, and their labels.
    """
    check_choice("corruption", corruption, TINY_IMAGENET_C_CORRUPTIONS)
    check_severity(severity)
    folder = Path(root) / "Tiny-ImageNet-C" / corruption / str(severity)
    if not folder.is_dir():
        raise ShiftSetMissing(_missing_message(folder, "tiny_imagenet_c"))
    wnids = sorted(p.name for p in folder.iterdir() if p.is_dir())
    files = [
        (wnid, path)
        for wnid in wnids
        for path in sorted((folder / wnid).iterdir())
        if path.suffix.lower() in IMAGE_SUFFIXES
    ]
    if not files:
        raise ShiftSetMissing(_missing_message(folder / "<wnid>" / "*.JPEG", "tiny_imagenet_c"))
    order = list(class_order) if class_order is not None else wnids
    index = {wnid: i for i, wnid in enumerate(order)}
    unknown = sorted(set(wnids) - set(index))
    if unknown:
        raise ValueError(f"{folder} has wnid folders not in class_order: {unknown[:5]}")
    images = [_read_rgb(path) for _, path in files]
    sizes = {image.shape for image in images}
    if len(sizes) != 1:
        raise ValueError(f"{folder}: images of different sizes {sorted(sizes)[:3]}")
    labels = torch.tensor([index[wnid] for wnid, _ in files], dtype=torch.int64)
    return _nhwc_to_float(np.stack(images)), labels


def load_cifar10_1(root: str | Path, version: str = "v6") -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10.1 (``version`` ``"v6"``, 2,000 images, or ``"v4"``, 2,021 images)."""
    check_choice("version", version, ("v4", "v6"))
    folder = Path(root) / "CIFAR-10.1"
    images = _load_npy(folder / f"cifar10.1_{version}_data.npy", "cifar10_1")
    labels = _load_npy(folder / f"cifar10.1_{version}_labels.npy", "cifar10_1")
    _check_shape(images, (len(labels), 32, 32, 3), folder / f"cifar10.1_{version}_data.npy")
    return _nhwc_to_float(images), _labels(labels)


def load_cifar10_2(root: str | Path, split: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10.2 ``split`` (``"test"``: 2,000 images, ``"train"``: 10,000) from its ``.npz``."""
    check_choice("split", split, ("test", "train"))
    path = Path(root) / "CIFAR-10.2" / f"cifar102_{split}.npz"
    if not path.is_file():
        raise ShiftSetMissing(_missing_message(path, "cifar10_2"))
    with np.load(path, allow_pickle=False) as archive:
        missing = {"images", "labels"} - set(archive.files)
        if missing:
            raise ValueError(f"{path} lacks key(s) {sorted(missing)}; it has {archive.files}")
        images, labels = archive["images"], archive["labels"]
    _check_shape(images, (len(labels), 32, 32, 3), path)
    return _nhwc_to_float(images), _labels(labels)


def load_mnist_c(
    root: str | Path, corruption: str, split: str = "test"
) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST-C ``corruption`` (or ``"identity"``), ``split`` ``"test"`` or ``"train"``.

    Returns:
        Images (1, 28, 28) and labels.
    """
    check_choice("corruption", corruption, MNIST_C_CORRUPTIONS)
    check_choice("split", split, ("test", "train"))
    folder = Path(root) / "mnist_c" / corruption
    images = _load_npy(folder / f"{split}_images.npy", "mnist_c")
    labels = _load_npy(folder / f"{split}_labels.npy", "mnist_c")
    if images.ndim == 3:
        images = images[..., None]
    if np.issubdtype(images.dtype, np.floating) and images.min() >= 0 and images.max() <= 255:
        # MNIST-C's generator returns float32 on the 0-255 scale; accept such a save too
        images = np.rint(images).astype(np.uint8)
    _check_shape(images, (len(labels), 28, 28, 1), folder / f"{split}_images.npy")
    return _nhwc_to_float(images), _labels(labels)


SHIFT_SETS.register("cifar10_c")(
    lambda root, corruption, severity: load_cifar_c(root, "cifar10", corruption, severity)
)
SHIFT_SETS.register("cifar100_c")(
    lambda root, corruption, severity: load_cifar_c(root, "cifar100", corruption, severity)
)
SHIFT_SETS.register("tiny_imagenet_c")(load_tiny_imagenet_c)
SHIFT_SETS.register("cifar10_1")(load_cifar10_1)
SHIFT_SETS.register("cifar10_2")(load_cifar10_2)
SHIFT_SETS.register("mnist_c")(load_mnist_c)


def _missing_message(path: Path, layout: str) -> str:
    return (
        f"shift-set file not found: {path}\nExpected layout (see docs/shift.md):\n{LAYOUTS[layout]}"
    )


def _load_npy(path: Path, layout: str, mmap: bool = False) -> np.ndarray:
    if not path.is_file():
        raise ShiftSetMissing(_missing_message(path, layout))
    # the official files are plain arrays; refusing pickles keeps a download from running code
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def _check_shape(array: np.ndarray, expected: tuple[int | None, ...], path: Path) -> None:
    matches = array.ndim == len(expected) and all(
        want is None or got == want for got, want in zip(array.shape, expected)
    )
    if not matches or array.dtype != np.uint8:
        shown = ", ".join("N" if e is None else str(e) for e in expected)
        raise ValueError(
            f"{path}: expected uint8 array of shape ({shown}), got {array.dtype} {array.shape}"
        )


def _read_rgb(path: Path) -> np.ndarray:
    # Tiny-ImageNet has a few greyscale photographs; the convert makes every file (H, W, 3)
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def _nhwc_to_float(images: np.ndarray) -> torch.Tensor:
    # np.array copies: slices of a memory-mapped file are read-only
    return torch.from_numpy(np.array(images)).permute(0, 3, 1, 2).float().div_(255)


def _labels(labels: np.ndarray) -> torch.Tensor:
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a 1-D integer array, got {labels.dtype} {labels.shape}")
    return torch.from_numpy(np.array(labels, dtype=np.int64))
