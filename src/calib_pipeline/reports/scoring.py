"""Scoring a user's own predictions: fit calibrators on val, score val and test.

The job netcal's and torchmetrics' users do by hand, on a file of logits or probabilities
(:mod:`calib_pipeline.calibration.predictions`), with this project's calibrators, metrics and
reports. The tidy table has the study tables' columns (``evaluation.TIDY_COLUMNS``): the
file is one "method" named after it, seed 0, no training run id.

From a notebook::

    from calib_pipeline.calibration.predictions import load_predictions
    from calib_pipeline.reports import scoring, standard

    predictions = load_predictions("my_model.npz")
    calibrators = scoring.fit_calibrators(predictions, {"ts": {"name": "temperature_nll"}})
    calibrators["fitted"]["ts"].temperature
    metrics, bins = scoring.score_predictions(predictions, calibrators, name="my_model")
    results = scoring.predictions_results(metrics, bins, calibrators)
    standard.summary(results)["summary"]             # Markdown
    standard.reliability(results)                     # {"reliability_15_bins": Figure}

The ``score`` pipeline (``pipelines/score``) runs these functions as its nodes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from calib_pipeline.calibration.posthoc import CALIBRATORS, Calibrator, build_calibrator
from calib_pipeline.calibration.predictions import PredictionsFile
from calib_pipeline.data.predictions import SPLITS, check_predictions_path, output_name
from calib_pipeline.reports.evaluation import evaluate_runs
from calib_pipeline.reports.registry import StudyResults, build_report

logger = logging.getLogger(__name__)

OPTION_KEYS = ("path", "name", "calibrators")
# The file is scored as one run of one method, under this seed.
SEED = 0


@dataclass(frozen=True)
class ScoreOptions:
    """The ``predictions`` parameters, checked.

    Attributes:
        path: the predictions file (None: not given; the score pipeline then has no input).
        name: the folder of the outputs (``08_reporting/score/<name>/``).
        calibrators: keys of the ``calibrators`` parameters to fit on val.
    """

    path: str | None
    name: str
    calibrators: tuple[str, ...]

    @classmethod
    def from_params(
        cls, entry: Mapping[str, Any] | None, calibrators: Mapping[str, Any]
    ) -> ScoreOptions:
        """Check ``predictions`` against the configured ``calibrators``.

        Raises:
            ValueError: an unknown key, a path that is no file of a supported format, a
                bad name, or a calibrator key that ``calibrators`` does not define.
        """
        entry = {} if entry is None else entry
        if not isinstance(entry, Mapping):
            raise ValueError(f"predictions must be a mapping, got {entry!r}")
        unknown = sorted(set(entry) - set(OPTION_KEYS))
        if unknown:
            raise ValueError(
                f"predictions: unknown key(s) {unknown}; valid keys: {list(OPTION_KEYS)}"
            )
        path = entry.get("path")
        if path is not None:
            check_predictions_path("predictions.path", path)
        keys = entry.get("calibrators")
        keys = list(calibrators) if keys is None else keys
        if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys):
            raise ValueError(
                f"predictions.calibrators must be a list of calibrator keys, got {keys!r}"
            )
        undefined = [k for k in keys if k not in calibrators]
        if undefined or len(set(keys)) != len(keys):
            raise ValueError(
                f"predictions.calibrators {list(keys)} must name distinct keys of the "
                f"calibrators parameters ({', '.join(calibrators) or 'none defined'})"
            )
        return cls(path, output_name(path, entry.get("name")), tuple(keys))


def fit_calibrators(
    predictions: PredictionsFile,
    calibrators: Mapping[str, Mapping[str, Any]],
    keys: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Fit calibrators on the file's validation split.

    On probabilities, calibrators fit on log-probabilities
    (:meth:`PredictionsFile.calibration_logits`), exactly as on the model's logits for
    every calibrator but those whose ``needs_logits`` is true (vector and matrix scaling),
    which are refused.

    Args:
        predictions: the file's scores and labels.
        calibrators: key -> ``{"name": registry name, "params": {...}}``.
        keys: the keys of ``calibrators`` to fit, in this order (None: all).

    Returns:
        ``{"provenance": the file's record, "fitted": key -> fitted calibrator}``, the
        layout of the project's stored calibrators.

    Raises:
        ValueError: an unknown calibrator or hyperparameter, a calibrator that needs logits
            on a file of probabilities, or a fit that fails (the message names the calibrator
            and, for a fit, the file).
    """
    fitted: dict[str, Calibrator] = {}
    for key in calibrators if keys is None else keys:
        entry = calibrators[key]
        try:
            calibrator = build_calibrator(entry["name"], **(entry.get("params") or {}))
        except (KeyError, ValueError) as error:
            raise ValueError(f"calibrator {key!r}: {error}") from None
        if predictions.inputs == "probs" and calibrator.needs_logits:
            usable = [n for n in CALIBRATORS.names() if not CALIBRATORS.factory(n).needs_logits]
            raise ValueError(
                f"calibrator {key!r} ({entry['name']}) maps logits, and {predictions.source} "
                "holds probabilities: their logarithm differs from the model's logits by a "
                "per-row constant this calibrator does not ignore, so its fit would not be "
                f"{entry['name']}. Give logits, or pick from {', '.join(usable)} (dirichlet is "
                "matrix scaling of log-probabilities)"
            )
        try:
            fitted[key] = calibrator.fit(
                predictions.calibration_logits("val"), predictions.labels["val"]
            )
        except (ValueError, RuntimeError) as error:
            where = f"calibrator {key!r} on {predictions.source} (val)"
            raise ValueError(f"{where}: {error}") from error
        logger.info("%s: %s learned %s", predictions.source, key, _scalars(calibrator.learned()))
    return {"provenance": predictions.provenance(), "fitted": fitted}


def _scalars(learned: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in learned.items() if not isinstance(v, list)}


def score_predictions(
    predictions: PredictionsFile,
    calibrators: Mapping[str, Any],
    n_bins: int = 15,
    reliability_bins: Sequence[int] = (15,),
    *,
    name: str,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tidy metrics table of val and test, uncalibrated (``none``) and under each
    fitted calibrator, and the per-bin reliability table of test.

    Uncalibrated rows score the file's scores as given (``inputs="probs"`` for
    probabilities), so they equal ``calibration_metrics`` on the file's arrays.

    Args:
        predictions: the file's scores and labels.
        calibrators: what :func:`fit_calibrators` returned for this file.
        n_bins: bins of the binned metrics.
        reliability_bins: bin counts of the per-bin table (``n_bins`` is always kept).
        name: the method name, label and study of every row.

    Raises:
        ValueError: the calibrators were fitted on another file.
    """
    predictions.check_provenance(calibrators["provenance"])
    sets = {}
    for split in SPLITS:
        entry = {
            "logits": predictions.calibration_logits(split),
            "labels": predictions.labels[split],
        }
        if predictions.inputs == "probs":
            entry["probs"] = predictions.scores[split]
        sets[split] = entry
    fitted = dict(calibrators["fitted"])
    return evaluate_runs(
        {f"{name}|{SEED}": {"logits": sets, "calibrators": fitted, "run_id": None}},
        dataset=Path(predictions.source).name,
        study=name,
        labels={name: name},
        calibrators=list(fitted),
        n_bins=n_bins,
        reliability_bin_counts=tuple(sorted({int(n_bins), *map(int, reliability_bins)})),
    )


def predictions_results(
    metrics: pd.DataFrame, bins: pd.DataFrame, calibrators: Mapping[str, Any]
) -> StudyResults:
    """The :class:`StudyResults` the standard reports (``summary``, ``reliability``) read,
    for the tables :func:`score_predictions` made with ``calibrators``."""
    name = str(metrics["method"].iloc[0])
    return StudyResults(
        study=name,
        dataset=str(metrics["dataset"].iloc[0]),
        methods=[name],
        seeds=[SEED],
        labels={name: name},
        groups={name: name},
        metrics=metrics,
        bins=bins,
        calibrators={(name, SEED): dict(calibrators["fitted"])},
    )


def predictions_report(
    metrics: pd.DataFrame,
    bins: pd.DataFrame,
    calibrators: Mapping[str, Any],
    reliability_bins: Sequence[int] = (15,),
    *,
    report: str,
) -> dict[str, Any]:
    """Registered report ``report`` of a scored file (``summary``, or ``reliability`` drawn
    at each of ``reliability_bins``): artifact name -> DataFrame / Markdown / Figure."""
    options = {"n_bins": [int(b) for b in reliability_bins]} if report == "reliability" else {}
    return build_report(report, predictions_results(metrics, bins, calibrators), **options)
