"""The artifacts of one training run, as the pipelines store them: the checkpoint (weights,
what rebuilds the model and learner, the configuration and provenance), the per-epoch
history with its provenance columns, the network a configuration names, and the run's
fitted calibrators (on val, and on the pooled clean + shifted validation logits). Pure
PyTorch/pandas."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import torch

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.calibration.posthoc import Calibrator, build_calibrator
from calib_pipeline.data import ImageData
from calib_pipeline.models import build_model
from calib_pipeline.training.engine import TrainResult, describe_device, method_hyperparameters

logger = logging.getLogger(__name__)

# A run's stored collections hold their members under these keys, beside "provenance":
# shifted-set logits (spec key -> logits) with the shift settings that defined the sets,
# and fitted calibrators (key -> calibrator).
SHIFT_LOGITS_SETS = "sets"
SHIFT_SETTINGS = "settings"
FITTED_CALIBRATORS = "fitted"
# Calibrators fitted again on the run's shifted validation are stored as "<key>@shifted_val".
SHIFTED_VAL_SUFFIX = "@shifted_val"
# Columns of a training history that say which training wrote it (dropped before reports).
HISTORY_PROVENANCE = ("run_id", "fingerprint")


def model_from_config(data: ImageData, model_params: dict[str, Any]) -> torch.nn.Module:
    return build_model(
        model_params["name"],
        in_channels=data.in_channels,
        num_classes=data.num_classes,
        image_size=data.image_size,
        **(model_params.get("params") or {}),
    )


def run_history(
    key: str, seed: int, result: TrainResult, provenance: dict[str, Any]
) -> pd.DataFrame:
    """The per-epoch history with the run's method, seed, ``run_id`` and ``fingerprint`` (as
    in the checkpoint's provenance) as leading columns: the evaluation refuses a history of
    another training configuration than the logits it scores."""
    history = pd.DataFrame(result.history)
    history.insert(0, "fingerprint", provenance["fingerprint"])
    history.insert(0, "run_id", provenance["run_id"])
    history.insert(0, "seed", seed)
    history.insert(0, "method", key)
    return history


def run_checkpoint(
    method: MethodSpec,
    seed: int,
    data: ImageData,
    run_config: dict[str, Any],
    result: TrainResult,
    provenance: dict[str, Any],
    learner: Any,
) -> dict[str, Any]:
    """The run's artifact: selected weights, what rebuilds the model and the learner
    (architecture, normalisation, ``meta_state``, ``config``), learned epochs, the
    method's effective hyperparameters (``config`` holds those set; these have the
    defaults filled in, for MLflow) and the provenance record everything derived from the
    run copies."""
    model_cfg = run_config["model"]
    return {
        "method": method.key,
        "label": method.label,
        "seed": seed,
        "state_dict": result.state_dict,
        "architecture": {
            "name": model_cfg["name"],
            "params": dict(model_cfg.get("params") or {}),
            "in_channels": data.in_channels,
            "num_classes": data.num_classes,
            "image_size": data.image_size,
        },
        "normalization": {"mean": list(data.mean), "std": list(data.std)},
        "selected_epoch": result.selected_epoch,
        "resumed_after_epoch": result.resumed_after_epoch,  # = epochs: reused, not trained
        "learned_epoch": result.learned_epoch,
        "epoch_logits": result.epoch_logits,
        "meta_state": result.meta_state,
        "config": run_config,
        "hyperparameters": method_hyperparameters(learner),
        "provenance": provenance,
        "execution": training_execution(result),
    }


def training_execution(result: TrainResult) -> dict[str, Any]:
    """Where and how fast this call trained (what a GPU acceptance run checks): the device,
    its name, the epochs trained here (0: a finished state reused) and the images/s."""
    return {
        **describe_device(torch.device(result.device)),
        "epochs_trained": len(result.history) - result.resumed_after_epoch,
        "images_per_second": result.images_per_second,
    }


def shifted_validation(
    logits: dict[str, Any], shift_sets: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Clean val pooled with every shifted val set of the run (``split == "val"``), or None.

    Args:
        logits: the run's cached logits.
        shift_sets: spec key -> logits of the run's shifted sets (``shift_logits["sets"]``).
    """
    shifted = [e for e in (shift_sets or {}).values() if e.get("split") == "val" and "logits" in e]
    if not shifted:
        return None
    return {
        "logits": torch.cat([logits["val"]["logits"], *(e["logits"] for e in shifted)]),
        "labels": torch.cat([logits["val"]["labels"], *(e["labels"] for e in shifted)]),
    }


def selected_calibrators(
    calibrators: Mapping[str, Mapping[str, Any]], keys: Sequence[str]
) -> dict[str, Mapping[str, Any]]:
    """The definitions of ``keys``, in that order.

    Raises:
        ValueError: a key ``calibrators`` lacks (listing the defined ones).
    """
    missing = [key for key in keys if key not in calibrators]
    if missing:
        raise ValueError(
            f"calibrator(s) {missing} are not in the calibrators parameters; defined: "
            f"{sorted(calibrators)}"
        )
    return {key: calibrators[key] for key in keys}


def fit_run_calibrators(
    logits: dict[str, Any],
    definitions: Mapping[str, Mapping[str, Any]],
    shift_sets: dict[str, Any] | None = None,
    *,
    shifted_suffix: str,
    description: str,
) -> dict[str, Calibrator]:
    """Fit calibrators on a run's validation logits, and again on clean val pooled with
    its shifted val sets (:func:`shifted_validation`) where it has some.

    Args:
        logits: the run's cached logits (``logits["val"]`` is fitted on).
        definitions: key -> ``{"name": registry name, "params": {...}}``.
        shift_sets: spec key -> logits of the run's shifted sets, or None.
        shifted_suffix: appended to a key for its fit on the pooled set.
        description: names the run in the log of what each calibrator learned.

    Returns:
        ``<key>`` -> calibrator fitted on clean val, then, with shifted val sets,
        ``<key><shifted_suffix>`` -> calibrator fitted on the pooled set.
    """
    fitting_sets = {"": logits["val"]}
    pooled = shifted_validation(logits, shift_sets)
    if pooled is not None:
        fitting_sets[shifted_suffix] = pooled
    return {
        f"{key}{suffix}": _fit_logged(f"{key}{suffix}", entry, val, description)
        for suffix, val in fitting_sets.items()
        for key, entry in definitions.items()
    }


def _fit_logged(
    key: str, entry: Mapping[str, Any], val: dict[str, Any], description: str
) -> Calibrator:
    """Calibrator ``entry`` fitted on ``val``; logs what it learned (scalars only)."""
    calibrator = build_calibrator(entry["name"], **(entry.get("params") or {}))
    fitted = calibrator.fit(val["logits"], val["labels"])
    logger.info(
        "%s: %s learned %s%s",
        description,
        key,
        {k: v for k, v in calibrator.learned().items() if not isinstance(v, list)},
        "" if calibrator.converged else " (NOT converged)",
    )
    return fitted


def training_reuse(checkpoint: dict[str, Any], epochs: int | None = None) -> str | None:
    """``"reused"`` when the checkpoint's training found a finished state of its
    configuration (nothing trained), ``"resumed"`` when it continued an interrupted one,
    None when it trained from the start (or the checkpoint predates the record). The
    epoch count is the configuration's, else ``epochs`` (e.g. the history's length)."""
    resumed = int(checkpoint.get("resumed_after_epoch") or 0)
    if not resumed:
        return None
    epochs = (checkpoint.get("config") or {}).get("training", {}).get("epochs", epochs)
    return "reused" if epochs is not None and resumed >= int(epochs) else "resumed"
