"""Dataset registry: the embedded digits data and torchvision image datasets.

``load_dataset(name, root=..., download=...)`` returns an :class:`ImageData` with the
official train and test parts as tensors (N, C, H, W). Images stay in their
stored dtype (uint8 for the torchvision sets, float32 in [0, 1] for digits) and
are converted per batch with :func:`to_float` -- CIFAR-sized sets then fit in
memory four times over. A dataset whose files are missing fails with
:class:`DatasetMissing`, whose message lists the exact files and where to put them.
"""

from __future__ import annotations

import gzip
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from calib_pipeline.registry import Registry

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


class DatasetMissing(FileNotFoundError):
    """Raised when a dataset's files are absent and may not be downloaded."""


@dataclass(frozen=True)
class ImageData:
    """The official train and test parts of an image classification dataset."""

    name: str
    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    classes: list[str] = field(default_factory=list)

    @property
    def in_channels(self) -> int:
        return int(self.train_images.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.train_images.shape[-1])

    def part(self, which: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Images and labels of the ``"train"`` or ``"test"`` part."""
        if which == "train":
            return self.train_images, self.train_labels
        if which == "test":
            return self.test_images, self.test_labels
        raise ValueError(f"part must be 'train' or 'test', got {which!r}")


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 images -> float32 in [0, 1]; float images are returned unchanged."""
    if images.dtype == torch.uint8:
        return images.float().div_(255.0)
    return images.float()


@dataclass(frozen=True)
class DatasetSpec:
    """How a dataset is read: ``loader(root, download)``, the files it needs under the root,
    where they come from (for the missing-files message) and an optional ``stage(root)`` that
    puts files found elsewhere on this machine into the expected layout first."""

    loader: object
    required_files: tuple[str, ...]
    source: str
    stage: object = None
    downloadable: bool = True  # whether ``download: true`` can fetch the files


DATASETS: Registry[DatasetSpec] = Registry("dataset")


def _missing_message(name: str, root: Path, spec: DatasetSpec) -> str:
    files = "\n".join(f"  {root / f}" for f in spec.required_files)
    if not spec.downloadable:
        return (
            f"dataset {name!r} is not available under {root}, and it cannot be downloaded "
            f"automatically.\nPut these files there:\n{files}\n(source: {spec.source})."
        )
    return (
        f"dataset {name!r} is not available under {root} and download is off.\n"
        f"Put these files there:\n{files}\n"
        f"(source: {spec.source}), or set dataset.download: true in the environment's "
        "globals.yml (conf/<env>/globals.yml) on a machine with internet access."
    )


def load_dataset(
    name: str, *, root: str | Path = "data/01_raw", download: bool = False
) -> ImageData:
    """Load ``name``'s official train and test parts.

    Args:
        name: a registered dataset (see ``dataset_names()``).
        root: folder holding the raw files (the torchvision layout under it).
        download: let torchvision fetch missing files.

    Returns:
        The dataset as tensors.

    Raises:
        ValueError: unknown name.
        DatasetMissing: files absent and ``download`` false; the message lists them.
    """
    spec = DATASETS.factory(name)()
    root = Path(root)
    if (not download or not spec.downloadable) and not dataset_available(name, root):
        raise DatasetMissing(_missing_message(name, root, spec))
    try:
        data = spec.loader(root, download)
    except Exception as error:  # torchvision reports a bad file as a bare AssertionError, etc.
        raise ValueError(
            f"dataset {name!r}: the files under {root} could not be read "
            f"({type(error).__name__}: {error or 'no message'}); they may be truncated or corrupt "
            f"-- replace them ({', '.join(spec.required_files) or 'bundled data'})"
        ) from error
    _check_loaded(data, root)
    return data


def _check_loaded(data: ImageData, root: Path) -> None:
    """Labels in range and one label per image: a wrong file must not train silently."""
    for part, images, labels in (
        ("train", data.train_images, data.train_labels),
        ("test", data.test_images, data.test_labels),
    ):
        if images.ndim != 4 or len(images) != len(labels) or len(labels) == 0:
            raise ValueError(
                f"dataset {data.name!r} ({root}): the {part} part has images of shape "
                f"{tuple(images.shape)} and {len(labels)} labels; "
                "expected (N, C, H, W) and N labels"
            )
        if int(labels.min()) < 0 or int(labels.max()) >= data.num_classes:
            raise ValueError(
                f"dataset {data.name!r} ({root}): {part} labels span "
                f"{int(labels.min())}..{int(labels.max())}, outside 0..{data.num_classes - 1}"
            )


def dataset_available(name: str, root: str | Path) -> bool:
    """True when every file the loader needs is present (or the data is bundled)."""
    spec = DATASETS.factory(name)()
    root = Path(root)
    if spec.stage is not None:
        spec.stage(root)
    return all((root / f).exists() for f in spec.required_files)


def dataset_names() -> list[str]:
    return DATASETS.names()


def _load_digits(root: Path, download: bool) -> ImageData:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    images = torch.tensor(bunch.images / 16.0, dtype=torch.float32).unsqueeze(1)
    labels = torch.tensor(bunch.target, dtype=torch.int64)
    # digits has no official test set: a fixed stratified 20% hold-out plays that role,
    # identical for every run and seed so that test numbers are comparable.
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)), test_size=0.2, stratify=bunch.target, random_state=20240101
    )
    mean = float(images[train_idx].mean())
    std = float(images[train_idx].std())
    return ImageData(
        "digits",
        images[train_idx],
        labels[train_idx],
        images[test_idx],
        labels[test_idx],
        10,
        (mean,),
        (std,),
        [str(i) for i in range(10)],
    )


def _from_torchvision(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    data = dataset.data
    data = torch.as_tensor(np.asarray(data))
    if data.ndim == 3:  # MNIST-like (N, H, W)
        data = data.unsqueeze(1)
    elif data.shape[-1] == 3:  # CIFAR (N, H, W, C)
        data = data.permute(0, 3, 1, 2)
    targets = getattr(dataset, "targets", None)
    if targets is None:
        targets = dataset.labels
    return data.contiguous(), torch.as_tensor(np.asarray(targets), dtype=torch.int64)


def _torchvision_loader(cls_name: str, name: str, num_classes: int, mean, std, split_kw: str):
    def load(root: Path, download: bool) -> ImageData:
        import torchvision.datasets as tvd

        cls = getattr(tvd, cls_name)
        root.mkdir(parents=True, exist_ok=True)
        if split_kw == "split":
            train = cls(str(root), split="train", download=download)
            test = cls(str(root), split="test", download=download)
        else:
            train = cls(str(root), train=True, download=download)
            test = cls(str(root), train=False, download=download)
        x_train, y_train = _from_torchvision(train)
        x_test, y_test = _from_torchvision(test)
        classes = [str(c) for c in getattr(train, "classes", range(num_classes))]
        return ImageData(name, x_train, y_train, x_test, y_test, num_classes, mean, std, classes)

    return load


def _gunzip_idx_files(raw: Path, sources: tuple[Path, ...]) -> None:
    """Gunzip every ``*-ubyte.gz`` found in ``sources`` (folders; missing ones are skipped)
    into ``raw`` as the plain idx file torchvision's MNIST-like loaders read, unless that
    file exists. Each file is written under a hidden name and renamed: an interrupted
    gunzip never leaves a truncated idx file that looks complete."""
    for source in sources:
        if not source.is_dir():
            continue
        for gz in sorted(source.glob("*-ubyte.gz")):
            target = raw / gz.name[: -len(".gz")]
            if target.exists():
                continue
            raw.mkdir(parents=True, exist_ok=True)
            partial = raw / f".{target.name}.partial"
            with gzip.open(gz, "rb") as fin, open(partial, "wb") as fout:
                shutil.copyfileobj(fin, fout)
            partial.replace(target)


def _stage_mnist_like(folder: str, *system_sources: Path):
    """A ``stage(root)`` for an MNIST-like set: the ``.gz`` files of torchvision's download
    layout (``root/<folder>/raw/``) and of a system package are gunzipped into that layout."""

    def stage(root: Path) -> None:
        raw = root / folder / "raw"
        _gunzip_idx_files(raw, (raw, *system_sources))

    return stage


def _stage_debian_fashion_mnist(root: Path) -> None:
    """Debian's ``dataset-fashion-mnist`` (``DEBIAN_FASHION_MNIST``), or ``.gz`` files in the
    raw folder, into torchvision's layout (the module attribute is read at call time)."""
    _stage_mnist_like("FashionMNIST", DEBIAN_FASHION_MNIST)(root)


def _load_tiny_imagenet(root: Path, download: bool) -> ImageData:
    """Tiny-ImageNet-200 in its distributed layout: ``train/<wnid>/images/*.JPEG`` and
    ``val/images/*.JPEG`` labelled by ``val/val_annotations.txt``; the official val set
    (10k) serves as the test set, as in the papers (the test labels are not public)."""
    from PIL import Image

    base = root / "tiny-imagenet-200"
    wnids = (base / "wnids.txt").read_text().split()
    index = {w: i for i, w in enumerate(wnids)}

    def read(paths: list[Path]) -> torch.Tensor:
        arrays = [np.asarray(Image.open(p).convert("RGB"), dtype=np.uint8) for p in paths]
        return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()

    train_paths, train_labels = [], []
    for wnid in wnids:
        files = sorted((base / "train" / wnid / "images").glob("*.JPEG"))
        train_paths += files
        train_labels += [index[wnid]] * len(files)
    annotations = [
        line.split("\t")
        for line in (base / "val" / "val_annotations.txt").read_text().splitlines()
        if line
    ]
    test_paths = [base / "val" / "images" / row[0] for row in annotations]
    test_labels = [index[row[1]] for row in annotations]
    return ImageData(
        "tiny_imagenet",
        read(train_paths),
        torch.tensor(train_labels, dtype=torch.int64),
        read(test_paths),
        torch.tensor(test_labels, dtype=torch.int64),
        len(wnids),
        (0.4802, 0.4481, 0.3975),
        (0.2770, 0.2691, 0.2821),
        wnids,
    )


_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def _register(name: str, spec_fn) -> None:
    DATASETS.register(name)(spec_fn)


_register(
    "digits",
    lambda: DatasetSpec(
        _load_digits, (), "bundled with scikit-learn (sklearn.datasets.load_digits)"
    ),
)
_register(
    "mnist",
    lambda: DatasetSpec(
        _torchvision_loader("MNIST", "mnist", 10, (0.1307,), (0.3081,), "train"),
        tuple(f"MNIST/raw/{f}" for f in _MNIST_FILES),
        "the four MNIST idx files, as torchvision.datasets.MNIST expects (.gz files there are "
        "gunzipped automatically)",
        _stage_mnist_like("MNIST"),
    ),
)
_register(
    "fashion_mnist",
    lambda: DatasetSpec(
        _torchvision_loader("FashionMNIST", "fashion_mnist", 10, (0.2860,), (0.3530,), "train"),
        tuple(f"FashionMNIST/raw/{f}" for f in _MNIST_FILES),
        "the four Fashion-MNIST idx files of torchvision's FashionMNIST download (.gz files "
        "there are gunzipped automatically); offline on Debian/Ubuntu, `sudo apt-get install "
        f"dataset-fashion-mnist` puts them in {DEBIAN_FASHION_MNIST}/, from where they are "
        "copied automatically",
        _stage_debian_fashion_mnist,
    ),
)
_register(
    "cifar10",
    lambda: DatasetSpec(
        _torchvision_loader(
            "CIFAR10", "cifar10", 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), "train"
        ),
        tuple(
            f"cifar-10-batches-py/{f}"
            for f in (
                "data_batch_1",
                "data_batch_2",
                "data_batch_3",
                "data_batch_4",
                "data_batch_5",
                "test_batch",
                "batches.meta",
            )
        ),
        "cifar-10-python.tar.gz from the CIFAR website, extracted",
    ),
)
_register(
    "cifar100",
    lambda: DatasetSpec(
        _torchvision_loader(
            "CIFAR100", "cifar100", 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), "train"
        ),
        tuple(f"cifar-100-python/{f}" for f in ("train", "test", "meta")),
        "cifar-100-python.tar.gz from the CIFAR website, extracted",
    ),
)
_register(
    "svhn",
    lambda: DatasetSpec(
        _torchvision_loader(
            "SVHN", "svhn", 10, (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970), "split"
        ),
        ("train_32x32.mat", "test_32x32.mat"),
        "train_32x32.mat and test_32x32.mat (format 2) from the SVHN website",
    ),
)
_register(
    "tiny_imagenet",
    lambda: DatasetSpec(
        _load_tiny_imagenet,
        (
            "tiny-imagenet-200/wnids.txt",
            "tiny-imagenet-200/train",
            "tiny-imagenet-200/val/val_annotations.txt",
            "tiny-imagenet-200/val/images",
        ),
        "tiny-imagenet-200.zip from the CS231n site, extracted",
        downloadable=False,
    ),
)
