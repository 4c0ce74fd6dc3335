"""Official shift-set loaders read miniature files written in the real formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from calib_pipeline.data.shift_sets import (
    LAYOUTS,
    ShiftSetMissing,
    load_cifar10_1,
    load_cifar10_2,
    load_cifar_c,
    load_mnist_c,
    load_shift_set,
    load_tiny_imagenet_c,
    shift_set_names,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "shift.md"


def coded_images(n: int, side: int = 32, channels: int = 3) -> np.ndarray:
    """uint8 NHWC images whose pixel (0, 0) encodes (row, channel) as 10 * row + channel."""
    images = np.zeros((n, side, side, channels), dtype=np.uint8)
    images[:, 0, 0, :] = 10 * np.arange(n)[:, None] + np.arange(channels)[None, :]
    images[:, -1, -1, :] = 255
    return images


def write_cifar_c(root: Path, folder: str, corruption: str, per_severity: int = 4) -> None:
    (root / folder).mkdir(parents=True)
    np.save(root / folder / f"{corruption}.npy", coded_images(5 * per_severity))
    labels = np.tile(np.arange(per_severity, dtype=np.uint8), 5)
    np.save(root / folder / "labels.npy", labels)


def assert_image_contract(images: torch.Tensor, shape: tuple[int, ...]) -> None:
    assert images.shape == shape and images.dtype == torch.float32
    assert images.min() >= 0 and images.max() <= 1


def assert_missing(info: pytest.ExceptionInfo, path: Path, layout: str) -> None:
    message = str(info.value)
    assert str(path) in message
    assert LAYOUTS[layout] in message
    assert isinstance(info.value, FileNotFoundError)


# ------------------------------------------------------------------ CIFAR-10-C / 100-C


def test_cifar10_c_slices_one_severity(tmp_path):
    write_cifar_c(tmp_path, "CIFAR-10-C", "fog")
    images, labels = load_cifar_c(tmp_path, "cifar10", "fog", 3)
    assert_image_contract(images, (4, 3, 32, 32))
    assert labels.dtype == torch.int64 and labels.tolist() == [0, 1, 2, 3]
    # rows 8..11 of the stacked file, channels moved first
    expected = torch.tensor([[10 * row + c for c in range(3)] for row in range(8, 12)]) / 255
    torch.testing.assert_close(images[:, :, 0, 0], expected.float())
    assert torch.all(images[:, :, -1, -1] == 1.0)


def test_cifar100_c_through_the_registry(tmp_path):
    write_cifar_c(tmp_path, "CIFAR-100-C", "saturate")
    images, _labels = load_shift_set("cifar100_c", tmp_path, corruption="saturate", severity=5)
    assert images.shape == (4, 3, 32, 32)
    assert images[0, 0, 0, 0] == pytest.approx(160 / 255)


def test_cifar_c_missing_files_give_path_and_layout(tmp_path):
    with pytest.raises(ShiftSetMissing) as info:
        load_cifar_c(tmp_path, "cifar10", "snow", 1)
    assert_missing(info, tmp_path / "CIFAR-10-C" / "snow.npy", "cifar_c")
    (tmp_path / "CIFAR-10-C").mkdir()
    np.save(tmp_path / "CIFAR-10-C" / "snow.npy", coded_images(10))
    with pytest.raises(ShiftSetMissing) as info:
        load_cifar_c(tmp_path, "cifar10", "snow", 1)
    assert_missing(info, tmp_path / "CIFAR-10-C" / "labels.npy", "cifar_c")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dataset": "svhn"}, "cifar100"),
        ({"corruption": "rain"}, "speckle_noise"),
        ({"severity": 6}, r"severity must be an integer in \[1, 5\]"),
        ({"severity": 2.0}, r"severity must be an integer in \[1, 5\]"),
        ({"severity": True}, r"severity must be an integer in \[1, 5\]"),
    ],
)
def test_cifar_c_bad_arguments(tmp_path, kwargs, message):
    arguments = {"dataset": "cifar10", "corruption": "fog", "severity": 1} | kwargs
    with pytest.raises(ValueError, match=message):
        load_cifar_c(tmp_path, **arguments)


def test_cifar_c_malformed_files(tmp_path):
    (tmp_path / "CIFAR-10-C").mkdir()
    np.save(tmp_path / "CIFAR-10-C" / "fog.npy", coded_images(10, side=28))
    np.save(tmp_path / "CIFAR-10-C" / "labels.npy", np.zeros(10, dtype=np.uint8))
    with pytest.raises(ValueError, match=r"\(N, 32, 32, 3\)"):
        load_cifar_c(tmp_path, "cifar10", "fog", 1)
    np.save(tmp_path / "CIFAR-10-C" / "fog.npy", coded_images(12))
    with pytest.raises(ValueError, match="multiple of 5"):
        load_cifar_c(tmp_path, "cifar10", "fog", 1)


def test_pickled_arrays_are_refused(tmp_path):
    # a downloaded .npy holding Python objects could run code when unpickled
    for folder in ("CIFAR-10-C", "CIFAR-10.1"):
        (tmp_path / folder).mkdir()
    np.save(tmp_path / "CIFAR-10-C" / "fog.npy", np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="Python objects"):  # memory-mapped read
        load_cifar_c(tmp_path, "cifar10", "fog", 1)
    np.save(tmp_path / "CIFAR-10.1" / "cifar10.1_v6_data.npy", np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        load_cifar10_1(tmp_path)


# ------------------------------------------------------------------ Tiny-ImageNet-C


def write_tiny_imagenet_c(root: Path, corruption: str, severity: int, wnids: list[str]) -> None:
    for k, wnid in enumerate(wnids):
        folder = root / "Tiny-ImageNet-C" / corruption / str(severity) / wnid
        folder.mkdir(parents=True)
        for j in range(2):
            colour = (40 * k + 20, 100, 20 * j + 50)
            Image.new("RGB", (64, 64), colour).save(folder / f"val_{k}{j}.JPEG", quality=95)
    # Tiny-ImageNet holds a few greyscale photographs; they load as RGB
    Image.new("L", (64, 64), 128).save(folder / "val_grey.JPEG", quality=95)


def test_tiny_imagenet_c_reads_jpeg_folders(tmp_path):
    wnids = ["n02085620", "n01443537", "n01629819"]
    write_tiny_imagenet_c(tmp_path, "motion_blur", 2, wnids)
    images, labels = load_tiny_imagenet_c(tmp_path, "motion_blur", 2)
    assert_image_contract(images, (7, 3, 64, 64))
    # sorted wnids: n01443537 -> 0, n01629819 -> 1 (holds the grey file), n02085620 -> 2
    assert labels.tolist() == [0, 0, 1, 1, 1, 2, 2]
    assert images[0, 0, 32, 32] * 255 == pytest.approx(40 * 1 + 20, abs=3)
    assert torch.allclose(images[4, :, 32, 32], torch.full((3,), 128 / 255), atol=3 / 255)


def test_tiny_imagenet_c_class_order(tmp_path):
    wnids = ["n02085620", "n01443537"]
    write_tiny_imagenet_c(tmp_path, "fog", 1, wnids)
    order = ["n09999999", "n02085620", "n01443537"]
    _, labels = load_shift_set(
        "tiny_imagenet_c", tmp_path, corruption="fog", severity=1, class_order=order
    )
    assert labels.tolist() == [2, 2, 2, 1, 1]
    with pytest.raises(ValueError, match="not in class_order"):
        load_tiny_imagenet_c(tmp_path, "fog", 1, class_order=["n02085620"])


def test_tiny_imagenet_c_missing_folder(tmp_path):
    with pytest.raises(ShiftSetMissing) as info:
        load_tiny_imagenet_c(tmp_path, "frost", 4)
    assert_missing(info, tmp_path / "Tiny-ImageNet-C" / "frost" / "4", "tiny_imagenet_c")
    with pytest.raises(ValueError, match="gaussian_noise"):
        load_tiny_imagenet_c(tmp_path, "saturate", 4)  # not part of Tiny-ImageNet-C


# ------------------------------------------------------------------ CIFAR-10.1 / 10.2


@pytest.mark.parametrize("version, n", [("v6", 5), ("v4", 6)])
def test_cifar10_1(tmp_path, version, n):
    folder = tmp_path / "CIFAR-10.1"
    folder.mkdir()
    np.save(folder / f"cifar10.1_{version}_data.npy", coded_images(n))
    np.save(folder / f"cifar10.1_{version}_labels.npy", np.arange(n, dtype=np.int64) % 10)
    images, labels = load_shift_set("cifar10_1", tmp_path, version=version)
    assert_image_contract(images, (n, 3, 32, 32))
    assert labels.tolist() == list(range(n))
    assert images[2, 1, 0, 0] == pytest.approx(21 / 255)


def test_cifar10_1_missing_and_bad_version(tmp_path):
    with pytest.raises(ShiftSetMissing) as info:
        load_cifar10_1(tmp_path)
    assert_missing(info, tmp_path / "CIFAR-10.1" / "cifar10.1_v6_data.npy", "cifar10_1")
    with pytest.raises(ValueError, match="v4"):
        load_cifar10_1(tmp_path, version="v7")


def test_cifar10_2_npz(tmp_path):
    folder = tmp_path / "CIFAR-10.2"
    folder.mkdir()
    np.savez(
        folder / "cifar102_test.npz",
        images=coded_images(4),
        labels=np.array([3, 1, 4, 1], dtype=np.int64),
        label_names=np.array(["airplane", "automobile"]),
        ti_indices=np.arange(4),
        keywords=np.array(["a", "b", "c", "d"]),
    )
    images, labels = load_cifar10_2(tmp_path)
    assert_image_contract(images, (4, 3, 32, 32))
    assert labels.tolist() == [3, 1, 4, 1]
    np.savez(folder / "cifar102_train.npz", data=coded_images(2), labels=np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="images"):
        load_shift_set("cifar10_2", tmp_path, split="train")


def test_cifar10_2_missing(tmp_path):
    with pytest.raises(ShiftSetMissing) as info:
        load_cifar10_2(tmp_path)
    assert_missing(info, tmp_path / "CIFAR-10.2" / "cifar102_test.npz", "cifar10_2")


# ------------------------------------------------------------------ MNIST-C


@pytest.mark.parametrize("layout", ["nhwc", "nhw", "float255"])
def test_mnist_c(tmp_path, layout):
    folder = tmp_path / "mnist_c" / "zigzag"
    folder.mkdir(parents=True)
    images = coded_images(6, side=28, channels=1)
    if layout == "nhw":
        images = images[..., 0]
    elif layout == "float255":
        images = images.astype(np.float32)
    np.save(folder / "test_images.npy", images)
    np.save(folder / "test_labels.npy", np.arange(6, dtype=np.uint8))
    loaded, labels = load_shift_set("mnist_c", tmp_path, corruption="zigzag")
    assert_image_contract(loaded, (6, 1, 28, 28))
    assert loaded[3, 0, 0, 0] == pytest.approx(30 / 255)
    assert labels.tolist() == list(range(6))


def test_mnist_c_missing_train_split_and_bad_name(tmp_path):
    with pytest.raises(ShiftSetMissing) as info:
        load_mnist_c(tmp_path, "identity", split="train")
    assert_missing(info, tmp_path / "mnist_c" / "identity" / "train_images.npy", "mnist_c")
    with pytest.raises(ValueError, match="canny_edges"):
        load_mnist_c(tmp_path, "gaussian_noise")


# ------------------------------------------------------------------ registry and docs


def test_registry_names_and_errors(tmp_path):
    assert shift_set_names() == sorted(
        ["cifar10_c", "cifar100_c", "tiny_imagenet_c", "cifar10_1", "cifar10_2", "mnist_c"]
    )
    with pytest.raises(ValueError, match="cifar10_1"):
        load_shift_set("imagenet_v2", tmp_path)
    with pytest.raises(ValueError, match="unknown parameter"):
        load_shift_set("cifar10_1", tmp_path, severity=1)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_docs_show_the_layout_the_errors_quote(layout):
    assert LAYOUTS[layout] in DOCS.read_text(encoding="utf-8")


def test_the_shift_plan_labels_tiny_imagenet_c_in_the_datasets_own_order(tmp_path):
    """Tiny-ImageNet is labelled in wnids.txt order (not sorted): the plan passes that order
    to the Tiny-ImageNet-C loader, so a corrupted image keeps its clean label."""
    from calib_pipeline.data.datasets import ImageData
    from calib_pipeline.data.shift_suites import plan_shift_sets

    wnids = ["n02085620", "n01443537"]  # wnids.txt order: n02085620 is class 0
    write_tiny_imagenet_c(tmp_path, "fog", 1, wnids)
    images = torch.zeros(8, 3, 64, 64, dtype=torch.uint8)
    labels = torch.tensor([0, 1] * 4)
    data = ImageData(
        "tiny_imagenet", images, labels, images[:4], labels[:4], 2, (0.5,) * 3, (0.25,) * 3, wnids
    )
    splits = {"standard": {"seed": 0, "fractions": {"train": 0.5, "val": 0.5}}}
    shift = {
        "corruption_source": "tiny_imagenet_c",
        "corruptions": ["fog"],
        "severities": [1],
        "root": str(tmp_path),
    }
    plan = plan_shift_sets(data, splits, shift)
    _, shifted_labels = plan.images(plan.test_sets[0], "standard")
    # n01443537 (folder read first; 2 files + the grey one) is class 1, n02085620 class 0
    assert shifted_labels.tolist() == [1, 1, 1, 0, 0]
    wrong = {**shift, "corruption_options": {"class_order": sorted(wnids)}}
    with pytest.raises(
        ValueError, match="class_order differs from the label order of 'tiny_imagenet'"
    ):
        plan_shift_sets(data, splits, wrong)
    same = {**shift, "corruption_options": {"class_order": wnids}}
    assert plan_shift_sets(data, splits, same).images(plan.test_sets[0], "standard")[
        1
    ].tolist() == [1, 1, 1, 0, 0]
