"""Custom Kedro datasets: raw image data, a user's predictions file, torch artifacts,
fitted calibrators, resume stores, report folders.

These are the only Kedro classes that touch the science packages' I/O: nodes
receive loaded objects and return objects to save.

Safe with shared storage: nothing here loads a pickle of objects (torch files load with
``weights_only=True``, calibrators are stored as plain data), and every artifact is
written under a hidden temporary name and renamed into place, so a run killed mid-write
never leaves a partial file or folder that Kedro would resolve as the latest version.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from kedro.io.core import AbstractDataset, AbstractVersionedDataset, DatasetError, Version

from calib_pipeline.calibration.posthoc import calibrator_from_state
from calib_pipeline.data.datasets import ImageData, load_dataset
from calib_pipeline.data.predictions import (
    PredictionsArrays,
    output_name,
    predictions_files,
    read_arrays,
)
from calib_pipeline.kedro_compat import exists_at_version, pin_load_version
from calib_pipeline.reports.common import FIGURE_DPI, write_artifacts
from calib_pipeline.tensor_io import load_tensors, save_tensors
from calib_pipeline.training.checkpoint import CheckpointStore


class ImageClassificationDataset(AbstractDataset[None, ImageData]):
    """Loads a registered image dataset (``calib_pipeline.data``); read-only."""

    def __init__(
        self, *, name: str, root: str, download: bool = False, metadata: dict | None = None
    ) -> None:
        self._name = name
        self._root = root
        self._download = bool(download)
        self.metadata = metadata  # e.g. the kedro-viz layer

    def load(self) -> ImageData:
        return load_dataset(self._name, root=self._root, download=self._download)

    def save(self, data: None) -> None:
        raise DatasetError("ImageClassificationDataset is read-only")

    def _describe(self) -> dict[str, Any]:
        return {"name": self._name, "root": self._root, "download": self._download}


class PredictionsDataset(AbstractDataset[None, PredictionsArrays]):
    """One predictions file's arrays as stored (``.npz``, ``.pt`` or ``.csv``, layout in
    ``docs/predictions.md``); read-only. The score pipeline names, splits and checks them
    (:func:`calib_pipeline.reports.scoring.prepare_predictions`).

    The catalog gives the path from the command line (``--params=predictions.path=...``
    through Kedro's ``runtime_params`` resolver), so the file is read here, by the catalog,
    and the nodes receive its contents: a node reading ``params:predictions.path`` itself
    would do file I/O in a node, which the house rules keep in the catalog. Without a path,
    loading says how to give one.

    Args:
        filepath: a file, a glob pattern or a list of them (``predictions.path``).
        name: the output name of the file to read among them (the ``{name}`` of the
            catalog's ``score.{name}.file``): with one file, that file; with several, the
            one whose stem gives ``name``.
    """

    def __init__(
        self,
        *,
        filepath: str | list[str] | None = None,
        name: str | None = None,
        metadata: dict | None = None,
    ) -> None:
        self._filepath = filepath
        self._name = name
        self.metadata = metadata

    def _file(self) -> str:
        if not self._filepath:
            raise DatasetError(
                "no predictions file given: kedro run --pipelines=score "
                "--params=predictions.path=<file .npz, .pt or .csv>. The path must be given "
                "on the command line (the catalog cannot read parameters files)"
            )
        files = predictions_files("predictions.path", self._filepath)
        if len(files) == 1:
            return files[0]
        named = [file for file in files if output_name(file) == self._name]
        if len(named) != 1:
            raise DatasetError(
                f"predictions.path {self._filepath!r} holds no file scored as {self._name!r} "
                f"(files: {', '.join(files)})"
            )
        return named[0]

    def load(self) -> PredictionsArrays:
        return read_arrays(self._file())

    def save(self, data: None) -> None:
        raise DatasetError("PredictionsDataset is read-only")

    def _exists(self) -> bool:
        try:
            return Path(self._file()).is_file()
        except (DatasetError, ValueError):
            return False

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath, "name": self._name}


def versioned_load_path(dataset: AbstractVersionedDataset) -> Path:
    """The file (or folder) ``dataset`` loads; a requested version that was never saved
    (mistyped, or pruned) is named as such with the saved versions, not reported as a
    truncated file to delete or a missing stage to run.

    Raises:
        DatasetError: no such version.
    """
    path = Path(str(dataset._get_load_path()))
    if dataset._version is None or path.exists() or path.parent.exists():  # unversioned: as is
        return path  # a version folder without its file is an interrupted write: the loader says so
    root = Path(str(dataset._filepath))
    saved = (
        sorted(
            (p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
            reverse=True,
        )
        if root.is_dir()
        else []
    )
    raise DatasetError(
        f"{root} has no version {path.parent.name!r}; saved versions (newest first): "
        f"{', '.join(saved[:5]) or 'none'}{', ...' if len(saved) > 5 else ''}"
    )


class TorchDataset(AbstractVersionedDataset[Any, Any]):
    """A versioned ``torch.save`` file of tensors, dicts, lists and scalars.

    Loads use ``weights_only=True`` and ``map_location="cpu"``: no arbitrary code
    runs on load, and a GPU-trained artifact opens on a laptop. A file holding other
    objects, or a truncated or corrupt one, raises ``ValueError`` naming the file.
    """

    def __init__(
        self, *, filepath: str, version: Version | None = None, metadata: dict | None = None
    ) -> None:
        super().__init__(filepath=PurePosixPath(filepath), version=version)
        self.metadata = metadata

    def load(self) -> Any:
        return load_tensors(versioned_load_path(self), what="torch artifact")

    def save(self, data: Any) -> None:
        save_tensors(data, Path(str(self._get_save_path())))

    def _exists(self) -> bool:
        try:
            return Path(str(self._get_load_path())).exists()
        except DatasetError:
            return False

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "version": self._version}


class CalibratorsDataset(TorchDataset):
    """A versioned file of a run's fitted calibrators, ``{"provenance": {...}, "fitted":
    {key: calibrator}}`` (the posthoc node's output).

    Each calibrator is stored as its ``state_dict()`` (tensors, numbers, strings, lists)
    in one ``torch.save`` file, beside the plain provenance record, and rebuilt on load by
    registry name (``posthoc.calibrator_from_state``): loading never runs code from the file.
    """

    def load(self) -> dict[str, Any]:
        path = versioned_load_path(self)
        stored = load_tensors(path, what="calibrators")
        if not isinstance(stored, dict) or not isinstance(stored.get("fitted"), dict):
            raise ValueError(
                f"calibrators {path} hold no 'fitted' mapping of calibrator states; "
                "rerun the posthoc stage to rewrite them"
            )
        calibrators = {}
        for key, state in stored["fitted"].items():
            try:
                calibrators[key] = calibrator_from_state(state)
            except ValueError as error:
                raise ValueError(f"calibrators {path}, entry {key!r}: {error}") from None
        return {**stored, "fitted": calibrators}

    def save(self, data: dict[str, Any]) -> None:
        fitted = {key: calibrator.state_dict() for key, calibrator in data["fitted"].items()}
        super().save({**data, "fitted": fitted})


class CheckpointStoreDataset(AbstractDataset[None, CheckpointStore]):
    """Hands a training node the :class:`CheckpointStore` of its run folder.

    The catalog decides where resumable state lives; the engine writes into it
    while it trains, which is what lets an interrupted run resume.
    """

    def __init__(self, *, path: str, metadata: dict | None = None) -> None:
        self._path = path
        self.metadata = metadata

    def load(self) -> CheckpointStore:
        return CheckpointStore(self._path)

    def save(self, data: None) -> None:
        raise DatasetError("CheckpointStoreDataset is read-only")

    def _exists(self) -> bool:
        return True

    def _describe(self) -> dict[str, Any]:
        return {"path": self._path}


# the file names of a run's logits under its folder (the catalog's "{method}.{seed}.logits")
RUN_LOGITS, RUN_SHIFT_LOGITS = "logits.pt", "shift_logits.pt"


class StoredRuns(Mapping[str, dict[str, Any]]):
    """Every (method, seed) run with stored logits under a protocol's model-output folder
    (``<root>/<method>/seed_<k>/logits.pt/<version>/``), by run name ``<method>.seed_<k>``;
    a run's artifacts are loaded when it is looked up, one run at a time.

    A run maps to ``{"logits": ..., "shift_logits": ... or None}``, each the newest complete
    version (the one ``catalog.load("<method>.seed_<k>.logits")`` gives).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        found = sorted(root.glob(f"*/seed_*/{RUN_LOGITS}")) if root.is_dir() else []
        self._runs = {
            f"{folder.parent.parent.name}.{folder.parent.name}": folder.parent
            for folder in found
            if _newest(folder).exists()
        }

    def __getitem__(self, run: str) -> dict[str, Any]:
        folder = self._runs[run]
        shift = _newest(folder / RUN_SHIFT_LOGITS)
        return {
            "logits": _newest(folder / RUN_LOGITS).load(),
            "shift_logits": shift.load() if shift.exists() else None,
        }

    def __iter__(self) -> Iterator[str]:
        return iter(self._runs)

    def __len__(self) -> int:
        return len(self._runs)


def _newest(path: Path) -> TorchDataset:
    """The versioned torch artifact at ``path``, loading its newest version."""
    return TorchDataset(filepath=path.as_posix(), version=Version(None, None))


class StoredShiftLogits:
    """Every run's newest stored shifted-set logits under a protocol's model-output folder
    (``<root>/<method>/seed_<k>/shift_logits.pt/<version>/``), looked up one run at a time.

    What the shift stage's logits nodes read to reuse their own earlier output when the
    run, the shift settings and the code are the same (``pipelines/shift/nodes.py``). A
    version is read as the ``{method}.{seed}.shift_logits`` entry reads it: a file that
    holds objects (or is corrupt) is refused, naming it.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def newest(self, method: str, seed: int) -> dict[str, Any] | None:
        """The run's newest stored shift logits, or None when it has none."""
        stored = _newest(self.root / method / f"seed_{seed}" / RUN_SHIFT_LOGITS)
        return stored.load() if stored.exists() else None


class ShiftLogitsStoreDataset(AbstractDataset[None, StoredShiftLogits]):
    """Hands the shift stage's nodes the :class:`StoredShiftLogits` of the protocol; one
    dataset for every run (kedro-viz draws one store feeding every shift node, as it does
    the resume store). Read-only: the ``{method}.{seed}.shift_logits`` entries write."""

    def __init__(self, *, path: str, metadata: dict | None = None) -> None:
        self._path = path
        self.metadata = metadata

    def load(self) -> StoredShiftLogits:
        return StoredShiftLogits(Path(self._path))

    def save(self, data: None) -> None:
        raise DatasetError("ShiftLogitsStoreDataset is read-only")

    def _exists(self) -> bool:
        return True  # a run with nothing stored yet finds None

    def _describe(self) -> dict[str, Any]:
        return {"path": self._path}


class RunLogitsStoreDataset(AbstractDataset[None, StoredRuns]):
    """Every run's newest stored logits of a protocol (:class:`StoredRuns`), whichever
    studies made them: for reports over all runs there are (the ``posthoc_arena``
    pipeline). Read-only; the ``{method}.{seed}.logits`` entries write these files."""

    def __init__(self, *, path: str, metadata: dict | None = None) -> None:
        self._path = path
        self.metadata = metadata

    def load(self) -> StoredRuns:
        return StoredRuns(Path(self._path))

    def save(self, data: None) -> None:
        raise DatasetError("RunLogitsStoreDataset is read-only")

    def _exists(self) -> bool:
        return len(StoredRuns(Path(self._path))) > 0

    def _describe(self) -> dict[str, Any]:
        return {"path": self._path}


# Written last into a report folder: the file name -> size in bytes of every artifact.
# A folder without it (a write cut short, an empty folder) is never a version to load.
REPORT_MANIFEST = ".manifest.json"


def is_complete_report(folder: str | Path) -> bool:
    """Whether ``folder`` holds a report whose save finished (it has its manifest)."""
    return (Path(folder) / REPORT_MANIFEST).is_file()


def _write_manifest(folder: Path) -> None:
    sizes = {path.name: path.stat().st_size for path in sorted(folder.iterdir())}
    (folder / REPORT_MANIFEST).write_text(json.dumps({"artifacts": sizes}, indent=2), "utf-8")


def report_artifacts(folder: Path) -> list[str]:
    """The artifact file names of the report ``folder``, once its manifest vouches for them.

    Raises:
        DatasetError: no manifest (the save never finished), an unreadable one, or an
            artifact missing or of another size than written.
    """
    if not is_complete_report(folder):
        raise DatasetError(
            f"report folder {folder} is incomplete: it has no {REPORT_MANIFEST}, which a "
            "save writes last (the write was interrupted, or another program wrote the "
            "folder); delete it and re-run the reporting pipeline"
        )
    try:
        sizes = json.loads((folder / REPORT_MANIFEST).read_text("utf-8")).get("artifacts")
    except (ValueError, AttributeError):
        sizes = None
    if not isinstance(sizes, dict):
        raise DatasetError(
            f"report folder {folder} has an unreadable {REPORT_MANIFEST}; re-run the "
            "reporting pipeline"
        )
    names = sorted(sizes)
    damaged = [
        name
        for name in names
        if Path(name).name != name
        or name.startswith(".")
        or not (folder / name).is_file()
        or (folder / name).stat().st_size != sizes[name]
    ]
    if damaged:
        raise DatasetError(
            f"report folder {folder} is damaged: {', '.join(map(repr, damaged))} missing, "
            "outside the folder or not of the size written; re-run the reporting pipeline"
        )
    return names


class ReportDataset(AbstractVersionedDataset[dict, dict]):
    """A versioned folder of report artifacts, written atomically.

    Saving a dict writes each entry by type (:func:`calib_pipeline.reports.common.write_artifacts`:
    a DataFrame as CSV, Markdown and LaTeX, a string as Markdown, a figure as PDF and PNG
    (``dpi``, default 300), a dict/list as JSON) into a hidden temporary folder, adds a
    manifest of the files last, and renames the folder into its version: a save that fails
    or is killed leaves no version folder. Only folders with a manifest count as versions,
    so "latest" is always a complete report. Loading returns DataFrames from the CSVs,
    strings from the Markdown files and paths of the PNGs and JSON files (a figure's PDF is
    the PNG's path with ``.pdf``).
    """

    def __init__(
        self,
        *,
        filepath: str,
        version: Version | None = None,
        dpi: int = FIGURE_DPI,
        metadata: dict | None = None,
    ) -> None:
        super().__init__(
            filepath=PurePosixPath(filepath), version=version, exists_function=is_complete_report
        )
        self._dpi = dpi
        self.metadata = metadata
        # the folder of the last save (the MLflow hook logs it as written)
        self.saved_folder: Path | None = None

    def save(self, data: dict[str, Any]) -> None:
        folder = Path(str(self._get_save_path()))
        staging = folder.with_name(f".{folder.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            write_artifacts(staging, data, dpi=self._dpi)
            _write_manifest(staging)
            # a directory rename is atomic, and refuses to replace a non-empty folder
            staging.rename(folder)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            with contextlib.suppress(OSError):  # the version folder, unless something else is in it
                folder.parent.rmdir()
            raise
        self.saved_folder = folder

    def load(self) -> dict[str, Any]:
        import pandas as pd

        folder = versioned_load_path(self)
        out: dict[str, Any] = {}
        for name in report_artifacts(folder):
            path = folder / name
            if path.suffix == ".csv":
                out[path.stem] = pd.read_csv(path)
            elif path.suffix == ".md" and path.stem not in out:
                out[path.stem] = path.read_text(encoding="utf-8")
            elif path.suffix in (".png", ".json"):
                out[path.stem] = str(path)
        return out

    def _exists(self) -> bool:
        try:
            return is_complete_report(str(self._get_load_path()))
        except DatasetError:
            return False

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "version": self._version}


def read_own_version(catalog: Any, name: str) -> None:
    """Pin ``name``'s load version in ``catalog`` to the run's save version, for a dataset
    this run has saved: its loads then read that version, never a newer one another run
    saved since. Datasets without versions are left alone; a ``--load-versions`` pin still
    wins (Kedro reads it before the cache). Used by
    :class:`~calib_pipeline.hooks.versions.OwnVersionsHook` in the process that saved, and by the
    Dask runner (:mod:`calib_pipeline.runner`) for what its workers saved."""
    dataset = catalog.get(name, fallback_to_runtime_pattern=True)
    if not isinstance(dataset, AbstractVersionedDataset):
        return
    version = dataset.resolve_save_version()  # the session's, or the one the save cached
    dataset.release()  # drops a "latest" version cached before the save
    if exists_at_version(dataset, version):
        pin_load_version(dataset, version)


def saved_at_save_version(catalog: Any, name: str) -> bool:
    """Whether versioned dataset ``name`` already exists at the run's save version (an
    earlier attempt of this run saved it); ``False`` for unversioned datasets."""
    dataset = catalog.get(name, fallback_to_runtime_pattern=True)
    return isinstance(dataset, AbstractVersionedDataset) and exists_at_version(
        dataset, dataset.resolve_save_version()
    )


def read_latest_version_of_now(catalog: Any, name: str) -> None:
    """Fix the version of ``name`` that the run reads to the latest one now, at the run's
    start: for inputs the run does not make, so that all its nodes read one consistent set
    of earlier runs' artifacts, even if another run saves newer versions while it runs.
    A ``--load-versions`` pin still wins; a dataset with no version yet is left alone (the
    run's preflight reports it). Uses Kedro's own resolution, which caches the version.
    Names that only the runtime pattern would make (in-memory datasets that other hooks
    register, e.g. ``run_info``) are left alone.
    """
    dataset = catalog.get(name)
    if isinstance(dataset, AbstractVersionedDataset):
        with contextlib.suppress(DatasetError):  # VersionNotFoundError is a DatasetError
            dataset.resolve_load_version()
