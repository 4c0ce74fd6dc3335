"""Torch and calibrator datasets: what the catalog loads never runs code from the file, a
bad file is named in the error, and a save never leaves a partial or temporary file."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import pytest
import torch
from kedro.config import OmegaConfigLoader
from kedro.io import DataCatalog, DatasetError
from kedro.io.core import Version

from calib_pipeline.calibration.posthoc import CALIBRATORS, build_calibrator
from calib_pipeline.kedro_datasets import CalibratorsDataset, TorchDataset
from calib_pipeline.settings import CONFIG_LOADER_ARGS, project_root
from tests.calibration.same_calibrator import assert_same_calibrator
from tests.crafted import MarkerPayload

VERSION = "2026-01-02T03.04.05.678Z"
# Dataset types whose load reads only data (tensors, tables, JSON, images), never pickles
# (Parquet too: pyarrow refuses pickled extension types since 14.0.1).
SAFE_DATASET_TYPES = {
    "MemoryDataset",
    "json.JSONDataset",
    "pandas.ParquetDataset",
    "calib_pipeline.kedro_datasets.ImageClassificationDataset",
    "calib_pipeline.kedro_datasets.CheckpointStoreDataset",
    "calib_pipeline.kedro_datasets.TorchDataset",
    "calib_pipeline.kedro_datasets.CalibratorsDataset",
    "calib_pipeline.kedro_datasets.ReportDataset",
    "calib_pipeline.kedro_datasets.PredictionsDataset",  # np.load(allow_pickle=False), weights_only
    "calib_pipeline.kedro_datasets.RunLogitsStoreDataset",  # each run through TorchDataset
    "calib_pipeline.kedro_datasets.ShiftLogitsStoreDataset",  # each run through TorchDataset
}
ENVIRONMENTS = sorted(p.name for p in (Path(project_root()) / "conf").iterdir() if p.is_dir())


def catalog_config(env: str, data_dir: Path, monkeypatch) -> dict:
    """The project's catalog configuration of ``env``, writing under ``data_dir``."""
    monkeypatch.setenv("CALIB_DATA_DIR", str(data_dir))
    conf = str(Path(project_root()) / "conf")
    return OmegaConfigLoader(conf_source=conf, env=env, **CONFIG_LOADER_ARGS)["catalog"]


def versioned(dataset_type: type, path: Path, save_version: str | None = VERSION):
    """``dataset_type`` at ``path``, saving as ``save_version`` and loading the latest."""
    return dataset_type(filepath=str(path), version=Version(None, save_version))


def write_crafted(path: Path, marker: Path, writer: str) -> None:
    """A file whose unpickling creates ``marker``: a plain pickle (what a pickle loader
    reads) or a ``torch.save`` archive."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"ts": MarkerPayload(str(marker))}
    if writer == "pickle":
        path.write_bytes(pickle.dumps(payload))
    else:
        torch.save(payload, path)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_catalog_entry_loads_without_unpickling(env, tmp_path, monkeypatch):
    config = catalog_config(env, tmp_path, monkeypatch)
    unsafe = {
        name: entry.get("type")
        for name, entry in config.items()
        if entry.get("type") not in SAFE_DATASET_TYPES
    }
    assert not unsafe, f"catalog entries that may unpickle objects: {unsafe}"


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch on a protocol-4 pickle
@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
@pytest.mark.parametrize("kind", ["calibrators", "logits", "checkpoint"])
def test_a_crafted_artifact_is_refused_by_the_catalog_and_runs_no_code(
    kind, writer, tmp_path, monkeypatch
):
    entry = f"ce.seed_0.{kind}"
    catalog = DataCatalog.from_config(catalog_config("test", tmp_path / "data", monkeypatch))
    path = Path(str(catalog.get(entry)._get_versioned_path(VERSION)))
    marker = tmp_path / "pwned"
    write_crafted(path, marker, writer)
    refused = f"{re.escape(str(path))} holds objects that could run code"
    with pytest.raises(DatasetError, match=refused):
        catalog.load(entry)
    assert not marker.exists(), "loading must not have executed the payload"


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_the_run_logits_store_refuses_a_crafted_run_and_runs_no_code(tmp_path, monkeypatch):
    catalog = DataCatalog.from_config(catalog_config("test", tmp_path / "data", monkeypatch))
    path = Path(str(catalog.get("ce.seed_0.logits")._get_versioned_path(VERSION)))
    marker = tmp_path / "pwned"
    write_crafted(path, marker, "torch.save")
    runs = catalog.load("stored_run_logits")
    assert list(runs) == ["ce.seed_0"]
    with pytest.raises(DatasetError, match="holds objects that could run code"):
        runs["ce.seed_0"]
    assert not marker.exists(), "loading must not have executed the payload"


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_the_shift_logits_store_gives_none_then_the_newest_and_refuses_a_crafted_one(
    tmp_path, monkeypatch
):
    catalog = DataCatalog.from_config(catalog_config("test", tmp_path / "data", monkeypatch))
    assert catalog.load("stored_shift_logits").newest("ce", 0) is None  # nothing stored yet
    catalog.save("ce.seed_0.shift_logits", {"sets": {"contrast/1": {"logits": torch.ones(2, 3)}}})
    stored = catalog.load("stored_shift_logits")
    newest = stored.newest("ce", 0)
    assert torch.equal(newest["sets"]["contrast/1"]["logits"], torch.ones(2, 3))
    assert stored.newest("ce", 1) is None and stored.newest("ls", 0) is None  # runs apart
    with pytest.raises(DatasetError, match="read-only"):
        catalog.save("stored_shift_logits", stored)
    later = Path(str(catalog.get("ce.seed_0.shift_logits")._get_versioned_path("9999-12-31")))
    marker = tmp_path / "pwned"
    write_crafted(later, marker, "torch.save")  # the newest version now
    with pytest.raises(DatasetError, match="holds objects that could run code"):
        stored.newest("ce", 0)
    assert not marker.exists(), "loading must not have executed the payload"


@pytest.mark.parametrize("dataset_type", [TorchDataset, CalibratorsDataset])
def test_a_truncated_file_names_itself(dataset_type, tmp_path):
    if dataset_type is TorchDataset:
        data = {"logits": torch.randn(100, 10)}
    else:
        fitted = build_calibrator("matrix_scaling").fit(torch.randn(50, 3), torch.arange(50) % 3)
        data = {"provenance": {}, "fitted": {"ms": fitted}}
    versioned(dataset_type, tmp_path / "artifact.pt").save(data)
    saved = tmp_path / "artifact.pt" / VERSION / "artifact.pt"
    saved.write_bytes(saved.read_bytes()[:200])
    with pytest.raises(DatasetError, match=f"{re.escape(str(saved))} is truncated or corrupt"):
        versioned(dataset_type, tmp_path / "artifact.pt", None).load()


def test_a_save_writes_through_a_hidden_temporary_file_unique_to_the_process(tmp_path, monkeypatch):
    written = []
    real_save = torch.save

    def recording_save(data, target):
        written.append(Path(target))
        real_save(data, target)

    monkeypatch.setattr(torch, "save", recording_save)
    later = "2026-01-02T03.04.05.679Z"
    for version in (VERSION, later):
        versioned(TorchDataset, tmp_path / "logits.pt", version).save({"x": torch.ones(2)})
    assert len(set(written)) == 2
    assert all(p.name.startswith(".logits.pt.") and f".{os.getpid()}." in p.name for p in written)
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == [f"logits.pt/{VERSION}/logits.pt", f"logits.pt/{later}/logits.pt"]


def test_a_failed_save_leaves_neither_the_file_nor_a_temporary(tmp_path):
    with pytest.raises(DatasetError):
        # a lambda cannot be pickled
        versioned(TorchDataset, tmp_path / "logits.pt").save({"not_data": lambda: None})
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_every_calibrator_round_trips_through_the_versioned_dataset(tmp_path):
    generator = torch.Generator().manual_seed(0)
    val_logits = 3 * torch.randn(300, 4, generator=generator)
    val_labels = torch.randint(0, 4, (300,), generator=generator)
    test_logits = 3 * torch.randn(200, 4, generator=generator)
    fitted = {name: build_calibrator(name) for name in CALIBRATORS.names()}
    fitted = {name: calibrator.fit(val_logits, val_labels) for name, calibrator in fitted.items()}
    provenance = {
        "run_id": "2026-11-26T06.00.00.000Z",
        "config": {"seed": 0, "training": {"lr": 0.1}},
    }
    versioned(CalibratorsDataset, tmp_path / "calibrators.pt").save(
        {"provenance": provenance, "fitted": fitted}
    )
    loaded = versioned(CalibratorsDataset, tmp_path / "calibrators.pt", None).load()
    assert loaded["provenance"] == provenance
    assert list(loaded["fitted"]) == list(fitted)
    for name, calibrator in fitted.items():
        assert_same_calibrator(loaded["fitted"][name], calibrator, test_logits)


def test_a_file_that_is_not_calibrators_is_refused_naming_the_entry(tmp_path):
    not_a_state = {"name": "temperature_nll", "arguments": {}, "format": 1}
    versioned(TorchDataset, tmp_path / "calibrators.pt").save(
        {"provenance": {}, "fitted": {"ts": not_a_state}}
    )
    refused = r"calibrators .*calibrators.pt, entry 'ts': a calibrator state is a dict"
    with pytest.raises(DatasetError, match=refused):
        versioned(CalibratorsDataset, tmp_path / "calibrators.pt", None).load()
    versioned(TorchDataset, tmp_path / "old.pt").save(
        {"ts": not_a_state}
    )  # the layout before provenance
    with pytest.raises(
        DatasetError,
        match=r"hold no 'fitted' mapping of calibrator states; rerun the posthoc stage",
    ):
        versioned(CalibratorsDataset, tmp_path / "old.pt", None).load()


def test_a_version_that_was_never_saved_is_named_with_the_saved_ones(tmp_path):
    """A mistyped or pruned version is not "truncated or corrupt ... delete it"."""
    from calib_pipeline.kedro_datasets import ReportDataset

    path = tmp_path / "logits.pt"
    TorchDataset(filepath=str(path), version=Version(None, "2026-01-01T00.00.00.000Z")).save(
        {"x": torch.ones(1)}
    )
    missing = TorchDataset(filepath=str(path), version=Version("2026-01-01T00.00.00.000", None))
    with pytest.raises(
        DatasetError,
        match=r"has no version '2026-01-01T00.00.00.000'; saved versions "
        r"\(newest first\): 2026-01-01T00.00.00.000Z",
    ):
        missing.load()
    report = ReportDataset(
        filepath=str(tmp_path / "summary"), version=Version("2026-02-02T00.00.00.000Z", None)
    )
    with pytest.raises(
        DatasetError, match=r"has no version '2026-02-02T00.00.00.000Z'; saved versions .*: none"
    ):
        report.load()


def test_an_unversioned_file_that_is_missing_is_not_called_a_missing_version(tmp_path):
    plain = TorchDataset(filepath=str(tmp_path / "nowhere" / "logits.pt"))
    with pytest.raises(DatasetError) as error:
        plain.load()
    assert "has no version" not in str(error.value)
