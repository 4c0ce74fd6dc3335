"""A user's own predictions: validation and test logits or probabilities read from a file.

Three formats, one layout (``docs/predictions.md`` has it in full; the README's "Score your
own predictions" shows it)::

    .npz   arrays val_logits, val_labels, test_logits, test_labels
           (or val_probs / test_probs instead of the logits)
           -- or one split: logits (or probs) and labels, split by a stated val fraction
    .pt    a dict of tensors with the same keys (read with torch.load(weights_only=True))
    .csv   one row per sample: split (val or test), label, and logit_0 .. logit_{K-1}
           (or prob_0 .. prob_{K-1})

A file whose arrays have other names (netcal's CIFAR records: ``predictions``,
``ground_truth``) is read through a key mapping, our name -> the file's
(``{"probs": "predictions", "labels": "ground_truth"}``; ``predictions.keys`` in the score
pipeline). Whether a file holds logits or probabilities is said by its key or column names
(or the mapping's), never guessed. Scores are N x K (a 1-D array is a binary problem: the
logit or probability of class 1); labels are integers in [0, K) (an N x 1 column counts as N
labels); val and test have the same K. Probabilities lie
in [0, 1] with rows summing to 1 within the metrics' tolerance (``docs/metrics.md``).
Nothing read can run code: ``.npz`` files load with ``allow_pickle=False``, ``.pt`` files
with ``weights_only=True``. A bad file raises ``ValueError`` naming the file and the fault.

This module reads a file and checks its layout (:func:`read_predictions`: the format, the
keys or columns, one score kind); :func:`calib_pipeline.calibration.predictions.load_predictions`
then checks the values as the metrics do, and splits a one-split file. From a notebook::

    from calib_pipeline.calibration.predictions import load_predictions

    predictions = load_predictions("my_model.npz")
    predictions.inputs, predictions.num_classes     # ("probs", 10)
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import re
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from torch import Tensor

from calib_pipeline.tensor_io import load_tensors

SPLITS = ("val", "test")
# the key suffixes of scores, which are also the metrics' ``inputs`` kinds
SCORE_KINDS = ("logits", "probs")
# the names of a file of one split (no val/test): scores and labels, split by a val fraction
ONE_SPLIT_NAMES = (*SCORE_KINDS, "labels")
# every name a key mapping may map a file's key to
LAYOUT_NAMES = (
    *(f"{split}_{kind}" for split in SPLITS for kind in (*SCORE_KINDS, "labels")),
    *ONE_SPLIT_NAMES,
)
CSV_SCORE_PREFIX = {"logits": "logit", "probs": "prob"}
FORMATS = (".npz", ".pt", ".csv")
OUTPUT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def check_predictions_path(name: str, path: Any) -> str:
    """``path`` as a string, once it names an existing file of a supported format."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"{name} must be the path of a predictions file, got {path!r}")
    if Path(path).suffix.lower() not in FORMATS:
        raise ValueError(
            f"{name}: {path} is not a predictions file; the formats are {', '.join(FORMATS)} "
            "(layouts in docs/predictions.md)"
        )
    if not Path(path).is_file():
        raise ValueError(f"{name}: no file at {path} (relative paths start at the project folder)")
    return path


def output_name(path: str | None, name: Any = None) -> str:
    """The folder name of a file's outputs: ``name`` when given, else the file's stem with
    characters other than letters, digits, ``_`` and ``-`` replaced by ``_``."""
    if isinstance(name, int) and not isinstance(name, bool):
        name = str(name)  # --params=predictions.name=2024 arrives as an integer
    if name is None:
        stem = re.sub(r"[^A-Za-z0-9_-]", "_", Path(path or "predictions").stem).strip("_-")
        return stem or "predictions"
    if not isinstance(name, str) or not OUTPUT_NAME.match(name):
        raise ValueError(
            "predictions.name must start with a letter or digit and hold only letters, "
            f"digits, '_' and '-', got {name!r}"
        )
    return name


@dataclass(frozen=True)
class PredictionsArrays:
    """A predictions file's arrays as stored, before any key mapping or value check.

    Attributes:
        source: the file's path.
        sha256: the file's SHA-256 (what calibrators fitted on it record).
        arrays: the file's keys (a CSV's as ``val_<kind>``, ...) -> arrays or tensors.
    """

    source: str
    sha256: str
    arrays: dict[str, Any]


def predictions_files(name: str, path: Any) -> list[str]:
    """The files of ``path``: a file, a glob pattern (``preds/*.npz``; quote it in a shell)
    or a list of them, each checked by :func:`check_predictions_path`; ``[]`` for None."""
    if path is None:
        return []
    patterns = list(path) if isinstance(path, (list, tuple)) else [path]
    files: list[str] = []
    for pattern in patterns:
        if isinstance(pattern, str) and glob.has_magic(pattern):
            found = sorted(glob.glob(pattern))
            if not found:
                raise ValueError(f"{name}: no file matches {pattern}")
            files.extend(found)
        else:
            files.append(pattern)
    if not files:
        raise ValueError(f"{name} must name at least one predictions file, got {path!r}")
    return [check_predictions_path(name, file) for file in dict.fromkeys(files)]


def read_arrays(path: str | Path) -> PredictionsArrays:
    """The arrays of a predictions file (``.npz``, ``.pt`` or ``.csv``) as stored.

    Raises:
        ValueError: an unknown format, a missing or unreadable file (a CSV of another
            layout); the message starts with the file's path.
    """
    path = Path(path)
    readers = {".npz": _read_npz, ".pt": _read_torch, ".csv": _read_csv}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise ValueError(
            f"predictions file {path}: unknown format; use one of {', '.join(FORMATS)}"
        )
    if not path.is_file():
        raise ValueError(f"predictions file {path} does not exist")
    with naming_the_file(path):
        arrays = reader(path)
    return PredictionsArrays(str(path), hashlib.sha256(path.read_bytes()).hexdigest(), arrays)


def read_predictions(
    path: str | Path, keys: Mapping[str, str] | None = None
) -> tuple[str, dict[str, Any]]:
    """The score kind (``"logits"`` or ``"probs"``) and the arrays of a predictions file
    (``.npz``, ``.pt`` or ``.csv``), once its layout is one kind's; values unchecked.

    The arrays are named as the layout names them: ``val_<kind>``, ``val_labels``,
    ``test_<kind>``, ``test_labels`` for a file of both splits, ``<kind>`` and ``labels``
    for a file of one split.

    Args:
        path: the file.
        keys: our name (one of ``LAYOUT_NAMES``) -> the file's key, for files whose arrays
            are named otherwise (``.npz`` and ``.pt``); keys not mapped keep their names.

    Raises:
        ValueError: an unknown format, a missing or unreadable file, a mapping of an
            unknown name or to a key the file does not hold (the message lists the file's
            keys), or missing, unknown or mixed keys or columns; the message starts with
            the file's path.
    """
    return layout(read_arrays(path), keys)


def layout(stored: PredictionsArrays, keys: Mapping[str, str] | None = None) -> tuple[str, dict]:
    """The score kind and the arrays of ``stored`` named by the layout (``keys``: our name
    -> the file's key); see :func:`read_predictions`."""
    path = Path(stored.source)
    arrays = stored.arrays
    with naming_the_file(path):
        if keys:
            if path.suffix.lower() == ".csv":
                raise ValueError(
                    "a key mapping applies to .npz and .pt files; a CSV file names its "
                    "columns split, label and logit_* or prob_*"
                )
            arrays = mapped_keys(arrays, keys)
        return _score_kind(arrays, mapped=bool(keys)), _column_labels(arrays)


def check_key_mapping(name: str, keys: Any) -> dict[str, str]:
    """``keys`` (our name -> the file's key) once every name is a layout name and every
    key a non-empty string; ``{}`` for None."""
    if keys is None:
        return {}
    if not isinstance(keys, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in keys.items()
    ):
        raise ValueError(
            f"{name} must map our names to the file's keys, e.g. {{probs: predictions, "
            f"labels: ground_truth}}, got {keys!r}"
        )
    unknown = sorted(set(keys) - set(LAYOUT_NAMES))
    if unknown:
        raise ValueError(f"{name}: unknown name(s) {unknown}; valid names: {list(LAYOUT_NAMES)}")
    return dict(keys)


def mapped_keys(arrays: dict[str, Any], keys: Mapping[str, str]) -> dict[str, Any]:
    """``arrays`` with the file's keys renamed to ours (``keys``: ours -> the file's)."""
    keys = check_key_mapping("the key mapping", keys)
    missing = {ours: theirs for ours, theirs in keys.items() if theirs not in arrays}
    if missing:
        wanted = ", ".join(f"{theirs!r} (for {ours})" for ours, theirs in missing.items())
        raise ValueError(f"has no key {wanted}; the file's keys are {sorted(arrays)}")
    kept = {key: value for key, value in arrays.items() if key not in keys.values()}
    clash = sorted(set(kept) & set(keys))
    if clash:
        raise ValueError(
            f"holds {clash} besides the keys mapped to that name; map or remove one of them "
            f"(the file's keys are {sorted(arrays)})"
        )
    return {**kept, **{ours: arrays[theirs] for ours, theirs in keys.items()}}


def _column_labels(arrays: dict[str, Any]) -> dict[str, Any]:
    """Labels stored as an N x 1 column (as some libraries write them, e.g. Kumar et al.'s
    CIFAR files) read as the N labels they unambiguously are; any other 2-D label array
    (one-hot, N x 2) is left for the value checks to refuse."""
    return {
        key: value.reshape(-1)
        if key.endswith("labels") and value.ndim == 2 and value.shape[1] == 1
        else value
        for key, value in arrays.items()
    }


@contextlib.contextmanager
def naming_the_file(path: Path) -> Iterator[None]:
    """Start the message of a ``ValueError`` raised inside with ``predictions file <path>:``
    (unless it names the file already, as ``tensor_io.load_tensors`` does)."""
    try:
        yield
    except ValueError as error:
        named = str(error).startswith(f"predictions file {path}")
        raise ValueError(str(error) if named else f"predictions file {path}: {error}") from None


def _read_npz(path: Path) -> dict[str, Any]:
    unreadable = "is not an .npz archive of numeric arrays"
    try:
        archive = np.load(path, allow_pickle=False)
    except ValueError:  # numpy would have to unpickle the file, which is never done
        raise ValueError(
            f"{unreadable} (numpy reads it only as a pickle, which is never loaded)"
        ) from None
    except (OSError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(f"{unreadable} ({error})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError("holds a single array; an .npz archive of named arrays is expected")
    with archive:
        try:
            return {key: archive[key] for key in archive.files}
        except ValueError:
            raise ValueError(
                "holds object arrays, which need pickle and are never loaded; store numbers"
            ) from None
        except (OSError, EOFError, zipfile.BadZipFile) as error:
            raise ValueError(f"{unreadable} ({error})") from None


def _read_torch(path: Path) -> dict[str, Any]:
    stored = load_tensors(path, what="predictions file", hint="write it again with torch.save")
    if not isinstance(stored, dict):
        raise ValueError(f"holds a {type(stored).__name__}; a dict of tensors is expected")
    for key, value in stored.items():
        if not isinstance(value, Tensor):
            raise ValueError(f"entry {key!r} is a {type(value).__name__}, not a tensor")
    return stored


def _read_csv(path: Path) -> dict[str, Any]:
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise ValueError(f"is not a readable CSV file ({error})") from None
    missing = [c for c in ("split", "label") if c not in frame.columns]
    if missing:
        raise ValueError(f"has no {' or '.join(map(repr, missing))} column")
    kind, columns = _csv_score_columns(list(frame.columns))
    unknown = sorted(set(frame.columns) - {"split", "label", *columns})
    if unknown:
        raise ValueError(
            f"has unknown column(s) {unknown}; expected split, label and "
            f"{columns[0]}..{columns[-1]}"
        )
    bad = sorted(set(frame["split"].astype(str)) - set(SPLITS))
    if bad:
        raise ValueError(f"column 'split' holds {bad}; each row's split must be 'val' or 'test'")
    text = [c for c in columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if text:
        raise ValueError(f"column(s) {text} hold text; scores must be numbers")
    arrays = {}
    for split in SPLITS:
        rows = frame[frame["split"].astype(str) == split]
        if rows.empty:
            raise ValueError(f"has no rows of split {split!r}; both val and test are needed")
        arrays[f"{split}_{kind}"] = rows[columns].to_numpy(dtype=np.float64)
        arrays[f"{split}_labels"] = rows["label"].to_numpy()
    return arrays


def _csv_score_columns(columns: list[str]) -> tuple[str, list[str]]:
    """The score kind and its columns ``<prefix>_0 .. <prefix>_{K-1}``, in class order."""
    found = {
        kind: {int(m.group(1)): c for c in columns if (m := re.fullmatch(rf"{prefix}_(\d+)", c))}
        for kind, prefix in CSV_SCORE_PREFIX.items()
    }
    kind = _single_kind(
        [kind for kind, indexed in found.items() if indexed],
        f"columns {columns}",
        "logit_0..logit_K-1 or prob_0..prob_K-1 columns",
    )
    indexed = found[kind]
    expected = range(len(indexed))
    if sorted(indexed) != list(expected):
        prefix = CSV_SCORE_PREFIX[kind]
        gaps = [f"{prefix}_{i}" for i in range(max(indexed) + 1) if i not in indexed]
        raise ValueError(f"score columns must be numbered from 0 without gaps; missing {gaps}")
    return kind, [indexed[i] for i in expected]


def _single_kind(present: list[str], found: str, expected: str) -> str:
    """The one score kind in ``present``: a file holds logits or probabilities, not both."""
    if len(present) != 1:
        have = "both logits and probabilities" if present else "neither logits nor probabilities"
        raise ValueError(f"holds {have} ({found}); expected {expected}")
    return present[0]


def _score_kind(arrays: dict[str, Any], *, mapped: bool = False) -> str:
    """``"logits"`` or ``"probs"``, once the keys are exactly one kind's layout: both splits
    (``val_<kind>``, ``test_<kind>`` and their labels) or one (``<kind>`` and ``labels``)."""
    split_keys = [k for k in arrays if k.startswith(tuple(f"{s}_" for s in SPLITS))]
    one_split = not split_keys and any(k in arrays for k in ONE_SPLIT_NAMES)
    expected_layout = (
        "val_logits and test_logits, or val_probs and test_probs, with val_labels and "
        "test_labels (or one split: logits or probs, with labels)"
    )
    kind = _single_kind(
        [
            kind
            for kind in SCORE_KINDS
            if (kind in arrays if one_split else any(f"{s}_{kind}" in arrays for s in SPLITS))
        ],
        f"keys {sorted(arrays)}",
        expected_layout + ("" if mapped else _mapping_hint(arrays)),
    )
    expected = (
        {kind, "labels"} if one_split else {f"{s}_{k}" for s in SPLITS for k in (kind, "labels")}
    )
    missing = sorted(expected - set(arrays))
    unknown = sorted(set(arrays) - expected)
    if missing or unknown:
        raise ValueError(
            f"keys {sorted(arrays)}: "
            + "; ".join(
                [f"missing {missing}"] * bool(missing) + [f"unknown {unknown}"] * bool(unknown)
            )
            + f"; expected exactly {sorted(expected)}"
            + ("" if mapped else _mapping_hint(arrays))
        )
    return kind


def _mapping_hint(arrays: dict[str, Any]) -> str:
    """How to read a file whose arrays are named otherwise: a key mapping, spelled out for a
    file of one score array and one label array (netcal's ``predictions``/``ground_truth``)."""
    hint = (
        "; a file whose arrays are named otherwise is read with a key mapping, "
        "--params=predictions.keys.<our name>=<file key> (docs/predictions.md)"
    )
    shapes = {key: np.shape(value) for key, value in arrays.items()}
    scores = [k for k, shape in shapes.items() if len(shape) == 2 and shape[1] > 1]
    labels = [k for k, shape in shapes.items() if len(shape) == 1]
    if len(arrays) != 2 or len(scores) != 1 or len(labels) != 1:
        return hint
    values = np.asarray(arrays[scores[0]], dtype=np.float64)
    sums_to_one = bool(np.all(values >= 0) and np.allclose(values.sum(axis=1), 1.0, atol=1e-3))
    kind = "probs" if sums_to_one else "logits"
    why = "its rows sum to 1" if sums_to_one else "its rows do not sum to 1"
    return (
        f"{hint}; here --params=predictions.keys.{kind}={scores[0]},"
        f"predictions.keys.labels={labels[0]},predictions.val_fraction=0.5 ({scores[0]!r} "
        f"looks like {'probabilities' if sums_to_one else 'logits'}: {why})"
    )
