"""The shift stage on an in-memory catalog: generated suites, skipped corruptions, official
sets read from miniature files in the real formats, and the failure paths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from kedro.io import DataCatalog, MemoryDataset
from kedro.runner import SequentialRunner

from calib_pipeline.console import node_result
from calib_pipeline.data import ImageData, load_dataset, shift_suites
from calib_pipeline.data.shift_sets import LAYOUTS, ShiftSetMissing
from calib_pipeline.data.shift_suites import (
    generate_corrupted,
    parse_shift,
    plan_shift_sets,
    resolve_suites,
    shift_label,
)
from calib_pipeline.data.splits import split_dataset, split_fingerprint
from calib_pipeline.kedro_datasets import ShiftLogitsStoreDataset
from calib_pipeline.models import build_model
from calib_pipeline.pipelines import shift
from calib_pipeline.pipelines.provenance import ProvenanceError
from calib_pipeline.pipelines.run_info import RUN_INFO, run_info
from calib_pipeline.pipelines.shift.nodes import compute_shift_logits, make_shift_sets
from calib_pipeline.reports.evaluation import evaluate_runs
from calib_pipeline.settings import load_parameters

PROJECT = Path(__file__).resolve().parents[2]
SPLITS = {"standard": {"seed": 0, "fractions": {"train": 0.8, "val": 0.2}}}
# a protocol folder with no stored shift logits: every run computes its own
NOTHING_STORED = ShiftLogitsStoreDataset(path=str(PROJECT / "no-such-folder"))


@pytest.fixture(scope="module")
def digits() -> ImageData:
    full = load_dataset("digits")
    return ImageData(
        "digits",
        full.train_images[:150],
        full.train_labels[:150],
        full.test_images[:40],
        full.test_labels[:40],
        10,
        full.mean,
        full.std,
    )


@pytest.fixture(scope="module")
def cifar() -> ImageData:
    """A stand-in for CIFAR-10: random uint8 32x32 colour images (only shapes matter)."""
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (30, 3, 32, 32), dtype=torch.uint8, generator=gen)
    labels = torch.arange(30) % 10
    return ImageData(
        "cifar10", images, labels, images[:12], labels[:12], 10, (0.5,) * 3, (0.25,) * 3
    )


def checkpoint_for(data: ImageData, method: str = "ce", seed: int = 0) -> dict:
    """An untrained small CNN in the checkpoint format (the shift stage only predicts)."""
    torch.manual_seed(seed)
    params = {"width": 4, "feature_dim": 8}
    model = build_model(
        "small_cnn",
        in_channels=data.in_channels,
        num_classes=10,
        image_size=data.image_size,
        **params,
    )
    return {
        "method": method,
        "seed": seed,
        "state_dict": model.state_dict(),
        "architecture": {
            "name": "small_cnn",
            "params": params,
            "in_channels": data.in_channels,
            "num_classes": 10,
            "image_size": data.image_size,
        },
        "normalization": {"mean": list(data.mean), "std": list(data.std)},
        "config": {"split": "standard"},
        "provenance": {
            "run_id": "train-run",
            "env": "test",
            "protocol": "test",
            "dataset": data.name,
            "split": "standard",
            "split_hash": split_fingerprint(split_dataset(data, SPLITS["standard"])),
        },
    }


def run_shift(
    data: ImageData, shift_params: dict, runs=(("ce", 0),), splits=SPLITS
) -> dict[str, dict]:
    """Each run's shifted-set logits (the ``sets`` beside the provenance)."""
    datasets = {
        "raw_data": MemoryDataset(data),
        "params:splits": MemoryDataset(splits),
        "params:shift": MemoryDataset(shift_params),
        "params:logits": MemoryDataset({"device": "cpu"}),
        RUN_INFO: MemoryDataset(run_info("shift-run", "test", "test")),
        "stored_shift_logits": NOTHING_STORED,
    }
    for method, seed in runs:
        datasets[f"{method}.seed_{seed}.checkpoint"] = MemoryDataset(
            checkpoint_for(data, method, seed)
        )
        datasets[f"{method}.seed_{seed}.shift_logits"] = MemoryDataset(copy_mode="assign")
    catalog = DataCatalog(datasets=datasets)
    SequentialRunner().run(shift.create_pipeline(list(runs)), catalog)
    return {f"{m}|{s}": catalog.load(f"{m}.seed_{s}.shift_logits")["sets"] for m, s in runs}


def test_generated_suite_gives_logits_per_run_set_and_severity_and_lists_skipped(digits):
    params = {
        "corruptions": ["gaussian_noise", "contrast", "frost", "saturate"],
        "severities": [1, 5],
    }
    out = run_shift(digits, params, runs=(("ce", 0), ("ls", 1)))
    for entries in out.values():
        graded = {k: v for k, v in entries.items() if "logits" in v}
        assert sorted(graded) == [
            "contrast/1",
            "contrast/5",
            "gaussian_noise/1",
            "gaussian_noise/5",
        ]
        for entry in graded.values():
            assert entry["logits"].shape == (40, 10) and torch.equal(
                entry["labels"], digits.test_labels
            )
            assert entry["source"] == "generated" and entry["split"] == "test"
        assert {v["shift"] for v in graded.values()} == {"gaussian_noise", "contrast"}
        # greyscale digits: saturate is undefined, frost has no textures -- listed, not silent
        skipped = {k: v for k, v in entries.items() if "skipped" in v}
        assert sorted(skipped) == ["skipped/frost", "skipped/saturate"]
        assert "frost_dir" in skipped["skipped/frost"]["skipped"]
        assert "1-channel" in skipped["skipped/saturate"]["skipped"]
    # every run sees the same shifted images; different weights give different logits
    a, b = out["ce|0"]["contrast/5"], out["ls|1"]["contrast/5"]
    assert not torch.equal(a["logits"], b["logits"])


def test_shift_logits_carry_the_checkpoint_provenance(digits):
    datasets = {
        "raw_data": MemoryDataset(digits),
        "params:splits": MemoryDataset(SPLITS),
        "params:shift": MemoryDataset({"corruptions": ["contrast"], "severities": [1]}),
        "params:logits": MemoryDataset({"device": "cpu"}),
        RUN_INFO: MemoryDataset(run_info("shift-run", "test", "test")),
        "stored_shift_logits": NOTHING_STORED,
        "ce.seed_0.checkpoint": MemoryDataset(checkpoint_for(digits)),
        "ce.seed_0.shift_logits": MemoryDataset(copy_mode="assign"),
    }
    catalog = DataCatalog(datasets=datasets)
    SequentialRunner().run(shift.create_pipeline([("ce", 0)]), catalog)
    shifted = catalog.load("ce.seed_0.shift_logits")
    assert shifted["provenance"]["run_id"] == "train-run"
    assert shifted["execution"] == {"device": "cpu", "name": "cpu"}, "where they were predicted"


def test_a_checkpoint_trained_on_another_split_is_refused(digits):
    resplit = {"standard": {**SPLITS["standard"], "seed": 7}}
    with pytest.raises(
        ProvenanceError,
        match=r"ce\.seed_0\.checkpoint \(trained by run train-run\) does "
        r"not match the data it is given: split 'standard' had hash \w+ when "
        r"trained, the split given has hash \w+ \(the split changed since training",
    ):
        run_shift(digits, {"corruptions": ["contrast"], "severities": [1]}, splits=resplit)


def test_skipped_corruptions_are_warned_once_in_one_line_when_sets_are_planned(
    digits, caplog, monkeypatch
):
    monkeypatch.setattr(shift_suites, "_WARNED_SKIPS", set())
    params = {"corruptions": ["contrast", "frost", "saturate"], "severities": [1], "cache_mb": 0}
    with caplog.at_level("DEBUG", logger="calib_pipeline"):
        resolve_suites(
            params, "digits", channels=1
        )  # checking parameters (registry, viz) warns nothing
        assert not caplog.records
        for _ in range(2):  # e.g. two runs in one process
            plan_shift_sets(digits, SPLITS, params)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "\n" not in warnings[0] and len(warnings[0]) < 200, warnings
    assert warnings[0].startswith("shift: skipped 2 generated corruption(s): frost (")
    assert (
        "shift.frost_dir" in warnings[0]
        and "saturate (not defined for greyscale images)" in warnings[0]
    )
    full = [
        r.getMessage()
        for r in caplog.records
        if r.levelname == "DEBUG" and "frost skipped" in r.getMessage()
    ]
    assert full and "frost1.png" in full[0], "the full reason stays in the log file"


def test_uncached_sets_are_regenerated_identically_in_each_run(digits):
    params = {"corruptions": ["shot_noise", "spatter"], "severities": [2], "chunk_size": 16}
    cached = run_shift(digits, params)["ce|0"]
    regenerated = run_shift(digits, {**params, "cache_mb": 0})["ce|0"]
    for key in ("shot_noise/2", "spatter/2"):
        torch.testing.assert_close(
            cached[key]["logits"], regenerated[key]["logits"], rtol=0, atol=0
        )


def test_sets_predicted_together_match_sets_predicted_alone(digits, monkeypatch):
    params = {"corruptions": ["contrast", "fog"], "severities": [1, 4]}
    together = run_shift(digits, params)["ce|0"]
    monkeypatch.setattr("calib_pipeline.data.shift_suites.PREDICT_BLOCK_BYTES", 1)
    alone = run_shift(digits, params)["ce|0"]
    assert list(together) == list(alone)
    for key in ("contrast/1", "fog/4"):
        torch.testing.assert_close(together[key]["logits"], alone[key]["logits"])
        assert together[key]["logits"].shape == (40, 10)


def test_plan_caches_within_budget_only(digits):
    params = {"corruptions": ["gaussian_noise"], "severities": [1, 2, 3]}
    assert len(make_shift_sets(digits, SPLITS, params).cache) == 3
    assert make_shift_sets(digits, SPLITS, {**params, "cache_mb": 0}).cache == {}
    plan = make_shift_sets(digits, SPLITS, params)
    images, _ = plan.cache["gaussian_noise/3"]
    assert images.dtype == torch.uint8 and images.shape == digits.test_images.shape


def test_generated_chunks_draw_distinct_noise_and_are_deterministic():
    images = torch.full((8, 1, 8, 8), 0.5)
    once = generate_corrupted(images, "gaussian_noise", 5, seed=3, chunk_size=4)
    assert torch.equal(once, generate_corrupted(images, "gaussian_noise", 5, seed=3, chunk_size=4))
    assert not torch.equal(once[:4], once[4:])  # one seed per chunk would repeat the noise
    assert not torch.equal(
        once, generate_corrupted(images, "gaussian_noise", 5, seed=4, chunk_size=4)
    )
    assert once.dtype == torch.uint8 and once.shape == images.shape


def test_shifted_val_sets_follow_the_run_split_and_become_val_rows(digits):
    params = {
        "corruptions": ["contrast"],
        "severities": [3],
        "shifted_val": {"corruptions": ["gaussian_noise"], "severities": [2]},
    }
    entries = run_shift(digits, params)["ce|0"]
    val = entries["val/gaussian_noise/2"]
    n_val = 150 - round(150 * 0.8)
    assert (
        val["split"] == "val"
        and abs(len(val["labels"]) - n_val) <= 2
        and val["logits"].shape[1] == 10
    )
    clean = {
        "val": {"logits": torch.randn(5, 10), "labels": torch.arange(5)},
        "test": {"logits": torch.randn(5, 10), "labels": torch.arange(5)},
    }
    table, _ = evaluate_runs(
        {"ce|0": {"logits": clean, "calibrators": {}, "shift": entries}},
        dataset="digits",
        study="s",
        labels={},
        calibrators=[],
    )
    cells = set(
        map(tuple, table[["split", "shift", "severity"]].drop_duplicates().to_numpy().tolist())
    )
    assert ("val", "gaussian_noise", 2) in cells and ("test", "contrast", 3) in cells
    assert not any(shift in ("frost", "saturate") for _, shift, _ in cells)  # skipped: no rows


# ------------------------------------------------------------------ official sets


def write_official(root: Path, n: int = 6) -> dict[str, np.ndarray]:
    """Miniature CIFAR-10-C (fog), CIFAR-10.1 (v6, v4) and CIFAR-10.2 (test) files."""
    rng = np.random.default_rng(0)
    files = {
        "c": rng.integers(0, 256, (5 * n, 32, 32, 3), dtype=np.uint8),
        "v6": rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
        "v4": rng.integers(0, 256, (n + 1, 32, 32, 3), dtype=np.uint8),
        "102": rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
    }
    (root / "CIFAR-10-C").mkdir(parents=True)
    np.save(root / "CIFAR-10-C" / "fog.npy", files["c"])
    np.save(root / "CIFAR-10-C" / "labels.npy", np.tile(np.arange(n, dtype=np.uint8), 5))
    (root / "CIFAR-10.1").mkdir()
    for version in ("v6", "v4"):
        np.save(root / "CIFAR-10.1" / f"cifar10.1_{version}_data.npy", files[version])
        np.save(
            root / "CIFAR-10.1" / f"cifar10.1_{version}_labels.npy",
            np.arange(len(files[version])) % 10,
        )
    (root / "CIFAR-10.2").mkdir()
    np.savez(
        root / "CIFAR-10.2" / "cifar102_test.npz",
        images=files["102"],
        labels=np.arange(n, dtype=np.int64) % 10,
    )
    return files


def test_official_sets_are_read_from_files_and_labelled_by_source(cifar, tmp_path):
    files = write_official(tmp_path)
    params = {
        "corruptions": ["fog"],
        "severities": [2, 5],
        "corruption_source": "cifar10_c",
        "natural": {"cifar10_1": {}, "cifar10_2": {}},
        "root": str(tmp_path),
    }
    plan = make_shift_sets(cifar, SPLITS, params)
    images, labels = plan.cache["cifar10_c:fog/5"]
    assert torch.equal(images, torch.from_numpy(files["c"][24:30]).permute(0, 3, 1, 2))
    assert torch.equal(labels, torch.arange(6))
    assert torch.equal(
        plan.cache["cifar10_1/0"][0], torch.from_numpy(files["v6"]).permute(0, 3, 1, 2)
    )
    entries = run_shift(cifar, params)["ce|0"]
    assert sorted(entries) == ["cifar10_1/0", "cifar10_2/0", "cifar10_c:fog/2", "cifar10_c:fog/5"]
    assert {k: (v["shift"], v["source"], v["severity"]) for k, v in entries.items()} == {
        "cifar10_1/0": ("cifar10_1", "cifar10_1", 0),
        "cifar10_2/0": ("cifar10_2", "cifar10_2", 0),
        "cifar10_c:fog/2": ("cifar10_c:fog", "cifar10_c", 2),
        "cifar10_c:fog/5": ("cifar10_c:fog", "cifar10_c", 5),
    }
    assert entries["cifar10_2/0"]["logits"].shape == (6, 10)


def test_a_non_default_variant_is_part_of_the_label(cifar, tmp_path):
    write_official(tmp_path)
    plan = make_shift_sets(
        cifar,
        SPLITS,
        {"corruptions": [], "natural": {"cifar10_1": {"version": "v4"}}, "root": str(tmp_path)},
    )
    (spec,) = plan.test_sets
    assert spec.shift == "cifar10_1:v4" and len(plan.cache[spec.key][1]) == 7


@pytest.mark.parametrize(
    ("params", "missing", "layout"),
    [
        ({"natural": ["cifar10_1"]}, "CIFAR-10.1/cifar10.1_v6_data.npy", "cifar10_1"),
        ({"natural": ["cifar10_2"]}, "CIFAR-10.2/cifar102_test.npz", "cifar10_2"),
        (
            {"corruption_source": "cifar10_c", "corruptions": ["snow"]},
            "CIFAR-10-C/snow.npy",
            "cifar_c",
        ),
    ],
)
@pytest.mark.parametrize("cache_mb", [2048, 0])
def test_missing_official_file_fails_with_the_layout(
    cifar, tmp_path, params, missing, layout, cache_mb
):
    params = {"corruptions": [], **params, "root": str(tmp_path), "cache_mb": cache_mb}
    with pytest.raises(ShiftSetMissing) as info:
        run_shift(cifar, params)
    assert str(tmp_path / missing) in str(info.value) and LAYOUTS[layout] in str(info.value)


def test_missing_official_files_do_not_matter_when_not_requested(cifar, tmp_path):
    entries = run_shift(
        cifar, {"corruptions": ["contrast"], "severities": [1], "root": str(tmp_path / "absent")}
    )["ce|0"]
    assert list(entries) == ["contrast/1"]


@pytest.mark.parametrize(
    ("params", "dataset", "message"),
    [
        ({"corruption": ["fog"]}, "digits", r"unknown key\(s\) \['corruption'\]; valid keys"),
        (
            {"corruptions": ["fogg"]},
            "digits",
            r"unknown corruption\(s\) \['fogg'\].*valid: \['gaussian_noise'",
        ),
        (
            {"corruptions": ["fog"], "severities": [0, 6]},
            "digits",
            r"integers in \[1, 2, 3, 4, 5\]",
        ),
        ({"corruptions": "some"}, "digits", "'all', 'benchmark' or a list"),
        ({"corruption_source": "cifar10c"}, "cifar10", "must be 'generated' or one of"),
        ({"natural": ["imagenet_v2"]}, "cifar10", r"unknown set\(s\) \['imagenet_v2'\]"),
        (
            {"natural": {"cifar10_1": {"split": "test"}}},
            "cifar10",
            r"unknown option\(s\) \['split'\]; valid: \['version'\]",
        ),
        (
            {"natural": ["cifar10_1"], "root": "/x"},
            "digits",
            "shifts the cifar10 test set; this run's dataset is 'digits'",
        ),
        ({"natural": ["cifar10_1"]}, "cifar10", "set shift.root"),
        ({"chunk_size": 0}, "digits", "shift.chunk_size must be an integer >= 1, got 0"),
        (
            {"shifted_val": {"corruptions": "all", "levels": [1]}},
            "digits",
            r"shifted_val: unknown key\(s\) \['levels'\]",
        ),
    ],
)
def test_bad_shift_parameters_fail_before_any_image_is_made(params, dataset, message):
    with pytest.raises(ValueError, match=message):
        resolve_suites(params, dataset, channels=3)


def test_official_set_of_the_wrong_shape_is_rejected(tmp_path):
    write_official(tmp_path)
    small = ImageData(
        "cifar10",
        torch.zeros(4, 3, 16, 16),
        torch.zeros(4, dtype=torch.long),
        torch.zeros(4, 3, 16, 16),
        torch.zeros(4, dtype=torch.long),
        10,
        (0.5,) * 3,
        (0.25,) * 3,
    )
    with pytest.raises(
        ValueError, match=r"images \(3, 32, 32\).*do not match the dataset \(\(3, 16, 16\)"
    ):
        make_shift_sets(
            small, SPLITS, {"corruptions": [], "natural": ["cifar10_1"], "root": str(tmp_path)}
        )


# ---------------------------------------------------- labels and the shipped parameters


@pytest.mark.parametrize(
    ("source", "name", "label", "kind"),
    [
        ("generated", "gaussian_noise", "gaussian_noise", "corruption"),
        ("cifar10_c", "gaussian_noise", "cifar10_c:gaussian_noise", "corruption"),
        ("mnist_c", "zigzag", "mnist_c:zigzag", "corruption"),
        ("cifar10_1", "", "cifar10_1", "natural"),
        ("cifar10_1", "v4", "cifar10_1:v4", "natural"),
    ],
)
def test_shift_labels_encode_the_source(source, name, label, kind):
    assert shift_label(source, name) == label
    parsed = parse_shift(label)
    assert (parsed.source, parsed.kind) == (source, kind)
    assert parsed.name == (name if kind == "corruption" else label)


def test_shipped_parameters_sweep_every_generated_corruption_at_five_severities():
    params = load_parameters(None, PROJECT)["shift"]
    tests, vals, skipped = resolve_suites(params, "digits", channels=1)
    assert len(tests) == 17 * 5 and not vals and sorted(skipped) == ["frost", "saturate"]
    assert {s.severity for s in tests} == {1, 2, 3, 4, 5} and {s.source for s in tests} == {
        "generated"
    }
    colour, _, skipped = resolve_suites(params, "cifar10", channels=3)
    assert len(colour) == 18 * 5 and list(skipped) == ["frost"]
    assert str(params["root"]).endswith("01_raw/shift")


# --- reuse of a run's stored shift logits -------------------------------------------------


class OneRunStored:
    """The catalog's store of stored shift logits, holding ``earlier`` for ce seed 0."""

    def __init__(self, earlier):
        self.earlier = earlier

    def newest(self, method, seed):
        return self.earlier if (method, seed) == ("ce", 0) else None


def shift_node(data, checkpoint, earlier, params=None, session="session-2"):
    plan = make_shift_sets(
        data, SPLITS, params or {"corruptions": ["contrast"], "severities": [1, 3]}
    )
    info = run_info(session, "test", "test")
    return compute_shift_logits(checkpoint, plan, {"device": "cpu"}, info, OneRunStored(earlier))


def test_stored_shift_logits_of_the_same_network_settings_and_code_are_reused(digits, caplog):
    checkpoint = checkpoint_for(digits)
    first = shift_node(digits, checkpoint, None, session="session-1")
    assert "reused" not in first and isinstance(first["weights"], str)
    assert "data/shift_suites.py::generate_corrupted" in first["code"]  # the images' maker
    assert "training/predict.py::checkpoint_predictor" in first["code"]
    caplog.set_level("INFO", logger="calib_pipeline.pipelines.shift.nodes")
    again = shift_node(digits, checkpoint_for(digits), first)  # the same weights, rebuilt
    assert again["reused"] is True and "reused (computed earlier)" in caplog.text
    assert again["sets"] is first["sets"]  # not predicted again
    # the provenance is the checkpoint's as this session hands it over, like its other artifacts
    assert again["provenance"] == first["provenance"] == checkpoint["provenance"]
    assert node_result({"ce.seed_0.shift_logits": again}) == (
        "2 shifted set(s) (reused: computed earlier)"
    )
    assert node_result({"ce.seed_0.shift_logits": first}) == "2 shifted set(s)"


@pytest.mark.parametrize(
    "change, reason",
    [
        ("weights", "the stored ones are of another training of the run"),
        ("fingerprint", "the stored ones are of another training of the run"),
        ("settings", "the shift settings changed"),
        ("sets", "the stored sets are not the plan's"),
        ("code", "the code they depend on changed (data/shift_suites.py::generate_corrupted)"),
        ("no code", "the stored ones do not record the code they were made by"),
    ],
)
def test_stored_shift_logits_are_computed_again_when_anything_they_came_from_differs(
    digits, caplog, change, reason
):
    first = shift_node(digits, checkpoint_for(digits), None)
    stale = {**first, "sets": dict(first["sets"])}
    if change == "weights":
        stale["weights"] = "0" * 16
    elif change == "fingerprint":
        stale["provenance"] = {**first["provenance"], "fingerprint": "another"}
    elif change == "settings":
        stale["settings"] = {**first["settings"], "seed": 1}
    elif change == "sets":
        del stale["sets"]["contrast/3"]
    elif change == "code":
        stale["code"] = {**first["code"], "data/shift_suites.py::generate_corrupted": "edited"}
    else:
        del stale["code"]
    caplog.set_level("INFO", logger="calib_pipeline.pipelines.shift.nodes")
    again = shift_node(digits, checkpoint_for(digits), stale)
    assert "reused" not in again
    assert f"ce seed 0: shifted-set logits computed again: {reason}" in caplog.text
    assert sorted(again["sets"]) == sorted(first["sets"])
    assert torch.equal(again["sets"]["contrast/3"]["logits"], first["sets"]["contrast/3"]["logits"])


def test_other_weights_never_reuse_stored_shift_logits(digits):
    first = shift_node(digits, checkpoint_for(digits, seed=0), None)
    other = checkpoint_for(digits, seed=1)  # same architecture and provenance, other weights
    again = shift_node(digits, other, first)
    assert "reused" not in again and again["weights"] != first["weights"]
    assert not torch.equal(
        again["sets"]["contrast/1"]["logits"], first["sets"]["contrast/1"]["logits"]
    )


def test_the_batch_size_sets_how_fast_not_what_so_stored_logits_are_reused_across_it(
    digits, forward_batches
):
    plan = make_shift_sets(digits, SPLITS, {"corruptions": ["contrast"], "severities": [1, 3]})
    info = run_info("session-2", "test", "test")
    params = {"device": "cpu", "batch_size": 30}

    first = compute_shift_logits(checkpoint_for(digits), plan, params, info, OneRunStored(None))
    images = sum(len(entry["labels"]) for entry in first["sets"].values())
    assert len(forward_batches) > 1 and max(forward_batches) == 30
    assert sum(forward_batches) == images
    forward_batches.clear()
    again = compute_shift_logits(
        checkpoint_for(digits), plan, {"device": "cpu"}, info, OneRunStored(first)
    )
    assert again["reused"] is True and forward_batches == [], "nothing predicted again"
