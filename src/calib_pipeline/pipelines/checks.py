"""Checks of every parameter group, run when the pipelines are built.

A misspelt key (``evaluation.n_bin``), an unknown top-level group (``evalution``), a bad
value (``evaluation.n_bins=0``) or an unknown metric name fails here -- before any node
runs -- with a message that names the valid choices. Nothing in the parameters is
silently ignored: every key is either used or refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from calib_pipeline.calibration.metrics import metric_names
from calib_pipeline.data.splits import check_subset
from calib_pipeline.models import check_model_params
from calib_pipeline.registry import MAX_BINS, check_bins, check_bool, check_choice, check_int

GroupCheck = Callable[[str, Any], None]


def _known_keys(group: str, entry: Any, valid: tuple[str, ...]) -> Mapping[str, Any]:
    """``entry`` as a mapping whose keys are all in ``valid``."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"{group} must be a mapping, got {entry!r}")
    unknown = sorted(set(entry) - set(valid))
    if unknown:
        raise ValueError(f"{group}: unknown key(s) {unknown}; valid keys: {list(valid)}")
    return entry


def _bin_list(name: str, values: Any) -> None:
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"{name} must be a list of bin counts in [1, {MAX_BINS}], got {values!r}")
    for value in values:
        check_bins(name, value)


def check_evaluation(group: str, entry: Any) -> None:
    """``n_bins`` and ``reliability_bins`` (bin counts in [1, ``MAX_BINS``], checked here
    rather than when a run is evaluated after every training), ``shift_metrics`` (metric
    keys) and ``metrics`` (metric keys, possibly none)."""
    entry = _known_keys(group, entry, ("n_bins", "reliability_bins", "shift_metrics", "metrics"))
    if "n_bins" in entry:
        check_bins(f"{group}.n_bins", entry["n_bins"])
    if "reliability_bins" in entry:
        _bin_list(f"{group}.reliability_bins", entry["reliability_bins"])
    if "shift_metrics" in entry:
        metrics = entry["shift_metrics"]
        if not isinstance(metrics, (list, tuple)) or not metrics:
            raise ValueError(
                f"{group}.shift_metrics must be a non-empty list of metric names, got {metrics!r}"
            )
        for metric in metrics:
            check_choice(f"{group}.shift_metrics", metric, metric_names())
    if "metrics" in entry:
        metrics = entry["metrics"]
        if not isinstance(metrics, (list, tuple)):
            raise ValueError(f"{group}.metrics must be a list of metric names, got {metrics!r}")
        for metric in metrics:
            check_choice(f"{group}.metrics", metric, metric_names())


def check_device(name: str, device: Any) -> None:
    """``auto``, ``cpu`` or ``cuda[:i]``, and a CUDA device only where one is visible."""
    if not isinstance(device, str) or not (device in ("auto", "cpu") or device.startswith("cuda")):
        raise ValueError(f"{name} must be 'auto', 'cpu' or 'cuda[:i]', got {device!r}")
    if device.startswith("cuda"):
        import torch

        index = int(device.partition(":")[2] or 0)
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            raise ValueError(
                f"{name} is {device!r} but this machine sees {torch.cuda.device_count()} CUDA "
                "device(s); use 'auto' (CUDA when present, else CPU) or 'cpu'"
            )


def check_logits(group: str, entry: Any) -> None:
    """``device`` (``auto``, ``cpu`` or ``cuda[:i]``), ``features`` (bool) and
    ``batch_size`` (images per forward pass; null: each run's ``eval_batch_size``)."""
    entry = _known_keys(group, entry, ("device", "features", "batch_size"))
    check_device(f"{group}.device", entry.get("device", "auto"))
    if "features" in entry:
        check_bool(f"{group}.features", entry["features"])
    if entry.get("batch_size") is not None:
        check_int(f"{group}.batch_size", entry["batch_size"], low=1)


def check_model(group: str, entry: Any) -> None:
    """A registered architecture whose ``params`` its factory accepts."""
    entry = _known_keys(group, entry, ("name", "params"))
    try:
        check_model_params(entry.get("name"), entry.get("params"))
    except ValueError as error:
        raise ValueError(f"{group}: {error}") from None


def check_dataset(group: str, entry: Any) -> None:
    """``name`` and ``download`` (the rest of a dataset's settings live in the catalog)."""
    entry = _known_keys(group, entry, ("name", "download"))
    if "download" in entry:
        check_bool(f"{group}.download", entry["download"])


def check_splits(group: str, entry: Any) -> None:
    """Each split: ``seed`` (>= 0), ``fractions`` and an optional ``subset`` (null or >= 10)."""
    if not isinstance(entry, Mapping) or not entry:
        raise ValueError(f"{group} must be a non-empty mapping of split definitions, got {entry!r}")
    for name, split in entry.items():
        split = _known_keys(f"{group}.{name}", split, ("seed", "fractions", "subset"))
        check_int(f"{group}.{name}.seed", split.get("seed", 0), low=0)
        try:
            check_subset(split.get("subset"))
        except ValueError as error:
            raise ValueError(f"{group}.{name}: {error}") from None


def check_calibrators(group: str, entry: Any) -> None:
    """Each calibrator: ``name`` and ``params`` (their values are checked by building)."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"{group} must be a mapping, got {entry!r}")
    for key, calibrator in entry.items():
        calibrator = _known_keys(f"{group}.{key}", calibrator, ("name", "params"))
        if "name" not in calibrator:
            raise ValueError(f"{group}.{key} needs a 'name'")


def check_seeds(group: str, entry: Any) -> None:
    """A non-empty list of distinct non-negative integers."""
    if not isinstance(entry, (list, tuple)) or not entry:
        raise ValueError(f"{group} must be a non-empty list of seeds, got {entry!r}")
    for seed in entry:
        check_int(group, seed, low=0)
    if len(set(entry)) != len(entry):
        raise ValueError(f"{group} lists a seed twice: {list(entry)}")


def check_training(group: str, entry: Any) -> None:
    """The device here; every other key and value in ``TrainConfig.from_params``."""
    if isinstance(entry, Mapping) and "device" in entry:
        check_device(f"{group}.device", entry["device"])


def check_methods(group: str, entry: Any) -> None:
    """A method's ``training`` overrides name a usable device; the rest in ``config``."""
    for key, method in (entry or {}).items():
        if isinstance(method, Mapping):
            check_training(f"{group}.{key}.training", method.get("training") or {})


def _checked_elsewhere(group: str, entry: Any) -> None:
    """Groups whose keys their own parser checks (shift, studies, predictions, posthoc_arena)."""


GROUPS: dict[str, GroupCheck] = {
    "dataset": check_dataset,
    "model": check_model,
    "training": check_training,  # and TrainConfig.from_params
    "seeds": check_seeds,
    "splits": check_splits,
    "logits": check_logits,
    "calibrators": check_calibrators,
    "evaluation": check_evaluation,
    "shift": _checked_elsewhere,  # data.shift_suites.resolve_suites
    "methods": check_methods,  # and config.parse_structure
    "studies": _checked_elsewhere,  # config.parse_structure
    "predictions": _checked_elsewhere,  # reports.scoring.ScoreOptions (score pipeline)
    "posthoc_arena": _checked_elsewhere,  # reports.arena.ArenaOptions (posthoc_arena pipeline)
}


def check_parameters(parameters: Mapping[str, Any]) -> None:
    """Check every parameter group; an unknown group names the valid ones."""
    unknown = sorted(set(parameters) - set(GROUPS))
    if unknown:
        raise ValueError(f"unknown parameter group(s) {unknown}; valid groups: {list(GROUPS)}")
    for group, entry in parameters.items():
        GROUPS[group](group, entry)
