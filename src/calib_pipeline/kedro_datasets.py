"""Custom Kedro datasets: raw image data, torch artifacts, resume stores, report folders.

These are the only Kedro classes that touch the science packages' I/O: nodes
receive loaded objects and return objects to save.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import torch
from kedro.io.core import AbstractDataset, AbstractVersionedDataset, DatasetError, Version

from calib_pipeline.data.datasets import ImageData, load_dataset
from calib_pipeline.reports.common import write_artifacts
from calib_pipeline.training.checkpoint import CheckpointStore


class ImageClassificationDataset(AbstractDataset[None, ImageData]):
    """Loads a registered image dataset (``calib_pipeline.data``); read-only."""

    def __init__(self, *, name: str, root: str, download: bool = False) -> None:
        self._name = name
        self._root = root
        self._download = bool(download)

    def load(self) -> ImageData:
        return load_dataset(self._name, root=self._root, download=self._download)

    def save(self, data: None) -> None:
        raise DatasetError("ImageClassificationDataset is read-only")

    def _describe(self) -> dict[str, Any]:
        return {"name": self._name, "root": self._root, "download": self._download}


class TorchDataset(AbstractVersionedDataset[Any, Any]):
    """A versioned ``torch.save`` file of tensors, dicts, lists and scalars.

    Loads use ``weights_only=True`` and ``map_location="cpu"``: no arbitrary code
    runs on load, and a GPU-trained artifact opens on a laptop.
    """

    def __init__(
        self, *, filepath: str, version: Version | None = None, metadata: dict | None = None
    ) -> None:
        super().__init__(filepath=PurePosixPath(filepath), version=version)
        self.metadata = metadata

    def load(self) -> Any:
        path = Path(str(self._get_load_path()))
        return torch.load(path, map_location="cpu", weights_only=True)

    def save(self, data: Any) -> None:
        path = Path(str(self._get_save_path()))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        torch.save(data, tmp)
        tmp.replace(path)

    def _exists(self) -> bool:
        try:
            return Path(str(self._get_load_path())).exists()
        except DatasetError:
            return False

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "version": self._version}


class CheckpointStoreDataset(AbstractDataset[None, CheckpointStore]):
    """Hands a training node the :class:`CheckpointStore` of its run folder.

    The catalog decides where resumable state lives; the engine writes into it
    while it trains, which is what lets an interrupted run resume.
    """

    def __init__(self, *, path: str) -> None:
        self._path = path

    def load(self) -> CheckpointStore:
        return CheckpointStore(self._path)

    def save(self, data: None) -> None:
        raise DatasetError("CheckpointStoreDataset is read-only")

    def _exists(self) -> bool:
        return True

    def _describe(self) -> dict[str, Any]:
        return {"path": self._path}


class ReportDataset(AbstractVersionedDataset[dict, dict]):
    """A versioned folder of report artifacts.

    Saving a dict writes each entry by type (:func:`calib_pipeline.reports.common.write_artifacts`:
    a DataFrame as CSV and Markdown, a string as Markdown, a figure as PNG, a dict/list as
    JSON). Loading returns DataFrames from the CSVs, strings from the Markdown files and
    paths of the PNGs and JSON files.
    """

    def __init__(self, *, filepath: str, version: Version | None = None, dpi: int = 120) -> None:
        super().__init__(filepath=PurePosixPath(filepath), version=version)
        self._dpi = dpi
        # the folder of the last save (the MLflow hook logs it as written)
        self.saved_folder: Path | None = None

    def save(self, data: dict[str, Any]) -> None:
        folder = Path(str(self._get_save_path()))
        write_artifacts(folder, data, dpi=self._dpi)
        self.saved_folder = folder

    def load(self) -> dict[str, Any]:
        import pandas as pd

        folder = Path(str(self._get_load_path()))
        out: dict[str, Any] = {}
        for path in sorted(folder.iterdir()):
            if path.suffix == ".csv":
                out[path.stem] = pd.read_csv(path)
            elif path.suffix == ".md" and path.stem not in out:
                out[path.stem] = path.read_text(encoding="utf-8")
            elif path.suffix in (".png", ".json"):
                out[path.stem] = str(path)
        return out

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "version": self._version}
