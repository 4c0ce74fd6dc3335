import gzip

import numpy as np
import pytest
import torch

import calib_pipeline.data.datasets as datasets_module
from calib_pipeline.data import (
    DatasetMissing,
    ImageData,
    check_fractions,
    dataset_names,
    load_dataset,
    stratified_split,
    to_float,
)
from calib_pipeline.data.splits import (
    split_dataset,
    stratified_folds,
    stratified_subset,
    val_test_split,
)


def test_registry_lists_the_datasets():
    assert {"digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "svhn"} <= set(
        dataset_names()
    )


def test_digits_is_bundled_and_has_a_fixed_test_part():
    a = load_dataset("digits")
    b = load_dataset("digits")
    assert a.train_images.shape == (1437, 1, 8, 8) and a.test_images.shape == (360, 1, 8, 8)
    assert torch.equal(a.test_labels, b.test_labels)
    assert float(a.train_images.min()) >= 0.0 and float(a.train_images.max()) <= 1.0
    assert a.num_classes == 10 and a.in_channels == 1 and a.image_size == 8


def test_unknown_dataset_lists_valid_names():
    with pytest.raises(ValueError, match=r"valid dataset names are: .*cifar10.*digits"):
        load_dataset("imagenet")


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "svhn", "mnist"])
def test_missing_files_name_exact_paths(tmp_path, name):
    with pytest.raises(DatasetMissing) as info:
        load_dataset(name, root=tmp_path, download=False)
    message = str(info.value)
    assert str(tmp_path) in message and "download: true" in message
    assert not any(tmp_path.iterdir()), "a failed load must not create files"


def _idx(array: np.ndarray, magic: int) -> bytes:
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.tobytes()


def test_fashion_mnist_uses_debian_files(tmp_path, monkeypatch):
    debian = tmp_path / "debian"
    debian.mkdir()
    images = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    labels = np.array([3, 7], dtype=np.uint8)
    for prefix in ("train", "t10k"):
        (debian / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(images, 2051)))
        (debian / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(labels, 2049)))
    monkeypatch.setattr(datasets_module, "DEBIAN_FASHION_MNIST", debian)
    data = load_dataset("fashion_mnist", root=tmp_path / "raw", download=False)
    assert data.train_images.shape == (2, 1, 28, 28) and data.train_images.dtype == torch.uint8
    assert data.test_labels.tolist() == [3, 7]
    assert torch.equal(to_float(data.train_images)[0, 0, 0, :3], torch.tensor([0, 1, 2]) / 255.0)


def _fashion_idx_gz(folder, images, labels):
    """The four Fashion-MNIST files as distributed (Debian package, torchvision's download)."""
    folder.mkdir(parents=True, exist_ok=True)
    for prefix in ("train", "t10k"):
        (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(images, 2051)))
        (folder / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(labels, 2049)))


def test_fashion_mnist_reads_gz_files_of_torchvisions_download_layout(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets_module, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian-package")
    images = np.full((3, 28, 28), 255, dtype=np.uint8)
    _fashion_idx_gz(tmp_path / "FashionMNIST" / "raw", images, np.array([0, 9, 4], dtype=np.uint8))
    data = load_dataset("fashion_mnist", root=tmp_path, download=False)
    assert data.train_labels.tolist() == [0, 9, 4] and data.test_images.shape == (3, 1, 28, 28)
    assert float(to_float(data.test_images).min()) == 1.0
    assert not list((tmp_path / "FashionMNIST" / "raw").glob(".*partial")), (
        "no partial file is left"
    )


def test_missing_fashion_mnist_names_the_apt_package_and_the_download(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets_module, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian-package")
    with pytest.raises(DatasetMissing) as info:
        load_dataset("fashion_mnist", root=tmp_path / "raw", download=False)
    message = str(info.value)
    assert "apt-get install dataset-fashion-mnist" in message
    assert str(tmp_path / "no-debian-package") in message and "download: true" in message
    assert str(tmp_path / "raw" / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte") in message
    assert not (tmp_path / "raw").exists(), "a failed load must not create files"


def test_a_truncated_fashion_mnist_file_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets_module, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian-package")
    images, labels = np.zeros((2, 28, 28), np.uint8), np.array([1, 2], np.uint8)
    _write_mnist_files(tmp_path / "FashionMNIST" / "raw", images, labels)
    truncated = tmp_path / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte"
    truncated.write_bytes(truncated.read_bytes()[:6])
    with pytest.raises(
        ValueError, match=r"dataset 'fashion_mnist': the files under .* could not be read"
    ):
        load_dataset("fashion_mnist", root=tmp_path, download=False)


def _write_mnist_files(raw, images, labels):
    raw.mkdir(parents=True)
    for prefix in ("train", "t10k"):
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(_idx(images, 2051))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(_idx(labels, 2049))


def test_a_corrupt_raw_file_fails_naming_the_folder_and_files(tmp_path):
    images = np.zeros((2, 28, 28), dtype=np.uint8)
    _write_mnist_files(tmp_path / "MNIST" / "raw", images, np.array([3, 7], dtype=np.uint8))
    truncated = tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte"
    truncated.write_bytes(truncated.read_bytes()[:50])
    with pytest.raises(
        ValueError,
        match=(
            rf"dataset 'mnist': the files under {tmp_path} could not be read "
            r".*truncated or corrupt"
        ),
    ):
        load_dataset("mnist", root=tmp_path, download=False)


def test_labels_outside_the_classes_are_refused(tmp_path):
    images = np.zeros((2, 28, 28), dtype=np.uint8)
    _write_mnist_files(tmp_path / "MNIST" / "raw", images, np.array([3, 12], dtype=np.uint8))
    with pytest.raises(ValueError, match=r"train labels span 3..12, outside 0..9"):
        load_dataset("mnist", root=tmp_path, download=False)


def test_split_is_stratified_disjoint_and_seeded():
    labels = np.repeat(np.arange(5), 100)
    fractions = {"train": 0.8, "val": 0.1, "meta_val": 0.1}
    a = stratified_split(labels, fractions, seed=3)
    b = stratified_split(labels, fractions, seed=3)
    c = stratified_split(labels, fractions, seed=4)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["val"], c["val"])
    union = np.concatenate(list(a.values()))
    assert len(union) == len(set(union.tolist())) == 500
    assert np.bincount(labels[a["val"]]).tolist() == [10] * 5
    assert np.bincount(labels[a["train"]]).tolist() == [80] * 5


def test_a_subset_split_uses_a_stratified_seeded_sample_of_the_training_part():
    labels = torch.as_tensor(np.repeat(np.arange(10), 600))  # 6,000 training images
    data = ImageData(
        "toy",
        torch.zeros(6000, 1, 2, 2),
        labels,
        torch.zeros(5, 1, 2, 2),
        torch.zeros(5, dtype=torch.int64),
        10,
        (0.0,),
        (1.0,),
    )
    definition = {"seed": 0, "fractions": {"train": 0.8, "val": 0.2}, "subset": 1000}
    a, b = split_dataset(data, definition), split_dataset(data, definition)
    assert a == b and (len(a["train"]), len(a["val"])) == (800, 200)
    assert np.bincount(labels[a["val"]].numpy()).tolist() == [20] * 10
    assert not set(a["train"]) & set(a["val"])
    other = split_dataset(data, {**definition, "seed": 1})
    assert set(other["train"]) != set(a["train"])
    whole = split_dataset(data, {"seed": 0, "fractions": {"train": 0.8, "val": 0.2}})
    assert whole == split_dataset(data, {**definition, "subset": None}), (
        "no subset: the whole part, as before"
    )
    assert len(whole["train"]) == 4800


@pytest.mark.parametrize(
    ("subset", "message"),
    [(0, "integer >= 10, got 0"), (True, "got True"), (7000, "exceeds the 6000")],
)
def test_a_bad_subset_is_refused(subset, message):
    with pytest.raises(ValueError, match=message):
        stratified_subset(np.repeat(np.arange(10), 600), subset, seed=0)


def test_cifar_protocol_fractions_give_45k_5k():
    labels = np.repeat(np.arange(10), 5000)
    parts = stratified_split(labels, {"train": 0.9, "val": 0.1}, seed=0)
    assert (len(parts["train"]), len(parts["val"])) == (45000, 5000)


@pytest.mark.parametrize(
    ("fractions", "message"),
    [
        ({"train": 0.8, "val": 0.1}, "must sum to 1, got 0.9"),
        ({"train": 0.9, "test": 0.1}, r"unknown split name\(s\) \['test'\]"),
        ({"train": 1.0}, "must include 'val'"),
        ({"train": 1.2, "val": -0.2}, r"must be in \(0, 1\]"),
    ],
)
def test_bad_fractions_are_rejected(fractions, message):
    with pytest.raises(ValueError, match=message):
        check_fractions(fractions)


def test_tiny_imagenet_reads_the_distributed_layout(tmp_path):
    from PIL import Image

    base = tmp_path / "tiny-imagenet-200"
    wnids = ["n01", "n02"]
    (base / "val" / "images").mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(wnids) + "\n")
    rng = np.random.default_rng(0)
    for wnid in wnids:
        folder = base / "train" / wnid / "images"
        folder.mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(
                folder / f"{wnid}_{i}.JPEG"
            )
    Image.fromarray(np.zeros((64, 64, 3), dtype=np.uint8)).save(
        base / "val" / "images" / "val_0.JPEG"
    )
    (base / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn02\t0\t0\t62\t62\n")
    data = load_dataset("tiny_imagenet", root=tmp_path)
    assert data.train_images.shape == (4, 3, 64, 64) and data.train_labels.tolist() == [0, 0, 1, 1]
    assert data.test_labels.tolist() == [1] and data.num_classes == 2
    with pytest.raises(DatasetMissing, match=r"tiny-imagenet-200/wnids\.txt"):
        load_dataset("tiny_imagenet", root=tmp_path / "elsewhere")


@pytest.mark.parametrize(("name", "download_hint"), [("cifar10", True), ("tiny_imagenet", False)])
def test_a_missing_dataset_says_what_to_put_where_and_offers_download_only_where_it_works(
    tmp_path, name, download_hint
):
    with pytest.raises(datasets_module.DatasetMissing) as info:
        datasets_module.load_dataset(name, root=tmp_path)
    message = str(info.value)
    assert f"dataset {name!r} is not available under {tmp_path}" in message
    assert ("dataset.download: true in the environment's globals.yml" in message) is download_hint
    assert ("cannot be downloaded automatically" in message) is not download_hint
    if not download_hint:  # download: true cannot help either: the same message, nothing fetched
        with pytest.raises(datasets_module.DatasetMissing, match="cannot be downloaded"):
            datasets_module.load_dataset(name, root=tmp_path, download=True)


def test_stratified_folds_deal_each_class_evenly_and_are_seeded():
    labels = np.repeat([0, 1, 2], [10, 7, 23])
    folds = stratified_folds(labels, 4, seed=0)
    for k in range(3):
        counts = np.bincount(folds[labels == k], minlength=4)
        assert counts.max() - counts.min() <= 1
    sizes = np.bincount(folds, minlength=4)
    assert sizes.max() - sizes.min() <= 1  # the classes' remainders go to different folds
    np.testing.assert_array_equal(folds, stratified_folds(labels, 4, seed=0))
    assert not np.array_equal(folds, stratified_folds(labels, 4, seed=1))
    with pytest.raises(ValueError, match="5-fold cross-validation needs at least 5 samples"):
        stratified_folds(labels[:4], 5, seed=0)
    with pytest.raises(ValueError, match="folds must be an integer >= 2"):
        stratified_folds(labels, 1, seed=0)


def test_val_test_split_draws_a_stratified_val_fraction():
    labels = np.repeat([0, 1], [40, 60])
    parts = val_test_split(labels, 0.25, seed=0)
    assert sorted(np.concatenate([parts["val"], parts["test"]])) == list(range(100))
    assert np.bincount(labels[parts["val"]]).tolist() == [10, 15]
    with pytest.raises(ValueError, match=r"val_fraction must be in \(0, 1\)"):
        val_test_split(labels, 1.0, seed=0)
