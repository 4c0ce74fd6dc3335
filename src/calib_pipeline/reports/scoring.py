"""Scoring a user's own predictions: fit calibrators on val, score val and test.

The job netcal's and torchmetrics' users do by hand, on a file of logits or probabilities
(:mod:`calib_pipeline.calibration.predictions`), with this project's calibrators, metrics and
reports. The tidy table has the study tables' columns (``evaluation.TIDY_COLUMNS``): the
file is one "method" named after it, seed 0, no training run id. Several files make one
table across them (:func:`scores_summary`), each file's test metrics with percentile
bootstrap intervals (:func:`score_intervals`).

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
    rows = scoring.score_intervals(predictions, calibrators, name="my_model")
    scoring.scores_summary(rows)["summary"]           # the table across files, Markdown

The ``score`` pipeline (``pipelines/score``) runs these functions as its nodes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from torch import Tensor

from calib_pipeline.calibration.metrics import bootstrap_ci
from calib_pipeline.calibration.posthoc import (
    CALIBRATORS,
    Calibrator,
    build_calibrator,
    calibrated_scores,
)
from calib_pipeline.calibration.predictions import PredictionsFile, predictions_from_arrays
from calib_pipeline.data.predictions import (
    SPLITS,
    PredictionsArrays,
    check_key_mapping,
    output_name,
    predictions_files,
)
from calib_pipeline.registry import check_int, check_range
from calib_pipeline.reports.common import METRIC_NAMES, UNCALIBRATED, metric_unit, units_note
from calib_pipeline.reports.evaluation import evaluate_runs
from calib_pipeline.reports.registry import StudyResults, build_report

logger = logging.getLogger(__name__)

OPTION_KEYS = (
    "path",
    "name",
    "calibrators",
    "keys",
    "val_fraction",
    "split_seed",
    "ci_resamples",
    "ci_level",
    "ci_seed",
)
# The file is scored as one run of one method, under this seed.
SEED = 0
# The folder of the table across files (08_reporting/score/summary/): no file may be named so.
SUMMARY_NAME = "summary"
# The metrics of the table across files, each with its bootstrap interval on the test split.
TABLE_METRICS = ("accuracy", "nll", "brier", "ece")


@dataclass(frozen=True)
class ScoreOptions:
    """The ``predictions`` parameters, checked.

    Attributes:
        files: output name -> predictions file, in the order given (empty: no path given;
            the score pipeline then has one input that says how to give one).
        calibrators: keys of the ``calibrators`` parameters to fit on val.
        defaulted: whether ``calibrators`` is the default set (every key of ``calibrators``),
            from which those that need logits are left out on files of probabilities.
        keys: our name -> the file's key (:func:`calib_pipeline.data.predictions.read_predictions`).
        val_fraction: the fraction drawn as val from a file of one split (None: files hold
            val and test).
        split_seed: the seed of that draw.
        ci_resamples, ci_level, ci_seed: the percentile bootstrap of the test metrics'
            confidence intervals (:func:`calib_pipeline.calibration.metrics.bootstrap_ci`).
    """

    files: dict[str, str]
    calibrators: tuple[str, ...]
    defaulted: bool = True
    keys: dict[str, str] = field(default_factory=dict)
    val_fraction: float | None = None
    split_seed: int = 0
    ci_resamples: int = 1000
    ci_level: float = 0.95
    ci_seed: int = 0

    @property
    def names(self) -> list[str]:
        """The output names, one per file (``predictions`` when no file is given)."""
        return list(self.files) or ["predictions"]

    @classmethod
    def from_params(
        cls, entry: Mapping[str, Any] | None, calibrators: Mapping[str, Any]
    ) -> ScoreOptions:
        """Check ``predictions`` against the configured ``calibrators``.

        Raises:
            ValueError: an unknown key, a path or pattern that names no file of a supported
                format, a bad name (or a name with several files), two files of one name,
                a calibrator key that ``calibrators`` does not define, a bad key mapping,
                val fraction, seed or bootstrap setting.
        """
        entry = {} if entry is None else entry
        if not isinstance(entry, Mapping):
            raise ValueError(f"predictions must be a mapping, got {entry!r}")
        unknown = sorted(set(entry) - set(OPTION_KEYS))
        if unknown:
            raise ValueError(
                f"predictions: unknown key(s) {unknown}; valid keys: {list(OPTION_KEYS)}"
            )
        keys = entry.get("calibrators")
        val_fraction = entry.get("val_fraction")
        return cls(
            files=_named_files(entry.get("path"), entry.get("name")),
            calibrators=_chosen_calibrators(keys, calibrators),
            defaulted=keys is None,
            keys=check_key_mapping("predictions.keys", entry.get("keys")),
            val_fraction=None
            if val_fraction is None
            else _fraction("predictions.val_fraction", val_fraction),
            split_seed=check_int("predictions.split_seed", entry.get("split_seed", 0)),
            ci_resamples=check_int(
                "predictions.ci_resamples", entry.get("ci_resamples", 1000), low=1
            ),
            ci_level=_fraction("predictions.ci_level", entry.get("ci_level", 0.95)),
            ci_seed=check_int("predictions.ci_seed", entry.get("ci_seed", 0)),
        )


def _chosen_calibrators(keys: Any, calibrators: Mapping[str, Any]) -> tuple[str, ...]:
    """``predictions.calibrators`` checked against ``calibrators`` (None: every key)."""
    chosen = list(calibrators) if keys is None else keys
    if not isinstance(chosen, (list, tuple)) or not all(isinstance(k, str) for k in chosen):
        raise ValueError(
            f"predictions.calibrators must be a list of calibrator keys, got {chosen!r}"
        )
    undefined = [k for k in chosen if k not in calibrators]
    if undefined or len(set(chosen)) != len(chosen):
        raise ValueError(
            f"predictions.calibrators {list(chosen)} must name distinct keys of the "
            f"calibrators parameters ({', '.join(calibrators) or 'none defined'})"
        )
    return tuple(chosen)


def _fraction(name: str, value: Any) -> float:
    """A number strictly between 0 and 1."""
    return check_range(name, value, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)


def _named_files(path: Any, name: Any) -> dict[str, str]:
    """Output name -> file of ``predictions.path`` (a file, a glob pattern or a list of
    them), each name the file's stem or, for one file, ``predictions.name``."""
    files = predictions_files("predictions.path", path)
    if name is not None:
        output_name(None, name)  # checked even before a path is given
    if name is not None and len(files) > 1:
        raise ValueError(
            f"predictions.name names the outputs of one file; predictions.path gives "
            f"{len(files)}, each named by its stem: leave predictions.name out"
        )
    named: dict[str, str] = {}
    for file in files:
        key = output_name(file, name)
        if key in named:
            raise ValueError(
                f"predictions.path: {named[key]} and {file} would both be scored as {key!r} "
                "(outputs are named by the file's stem); rename one"
            )
        if key == SUMMARY_NAME:
            raise ValueError(
                f"predictions.path: {file} would be scored as {SUMMARY_NAME!r}, the folder of "
                "the table across files; rename it or give predictions.name"
            )
        named[key] = file
    return named


def prepare_predictions(
    stored: PredictionsArrays,
    *,
    keys: Mapping[str, str] | None = None,
    val_fraction: float | None = None,
    split_seed: int = 0,
) -> PredictionsFile:
    """A file's arrays as read by the catalog, named by ``keys``, split by ``val_fraction``
    (a file of one split) and validated (:func:`.predictions.predictions_from_arrays`); its
    description is the node's line on the run's console."""
    predictions = predictions_from_arrays(
        stored, keys=keys, val_fraction=val_fraction, split_seed=split_seed
    )
    logger.info("scoring %s", predictions.describe())
    return predictions


def fit_calibrators(
    predictions: PredictionsFile,
    calibrators: Mapping[str, Mapping[str, Any]],
    keys: Sequence[str] | None = None,
    *,
    skip_logit_maps: bool = False,
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
        skip_logit_maps: on a file of probabilities, leave out (with a warning) the
            calibrators that need logits instead of refusing them -- for the default set.

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
        calibrator = _usable_calibrator(predictions, key, calibrators[key], skip_logit_maps)
        if calibrator is None:
            continue
        try:
            fitted[key] = calibrator.fit(
                predictions.calibration_logits("val"), predictions.labels["val"]
            )
        except (ValueError, RuntimeError) as error:
            where = f"calibrator {key!r} on {predictions.source} (val)"
            raise ValueError(f"{where}: {error}") from error
        logger.info("%s: %s learned %s", predictions.source, key, _scalars(calibrator.learned()))
    return {"provenance": predictions.provenance(), "fitted": fitted}


def _usable_calibrator(
    predictions: PredictionsFile, key: str, entry: Mapping[str, Any], skip_logit_maps: bool
) -> Calibrator | None:
    """Calibrator ``key`` built, or None (with a warning) when it maps logits, the file
    holds probabilities and ``skip_logit_maps`` is set; refused without it."""
    try:
        calibrator = build_calibrator(entry["name"], **(entry.get("params") or {}))
    except (KeyError, ValueError) as error:
        raise ValueError(f"calibrator {key!r}: {error}") from None
    if predictions.inputs != "probs" or not calibrator.needs_logits:
        return calibrator
    if skip_logit_maps:
        logger.warning(
            "%s holds probabilities: %s (%s) maps logits and is not fitted "
            '(docs/predictions.md, "Calibrators on probabilities")',
            predictions.source,
            key,
            entry["name"],
        )
        return None
    usable = [n for n in CALIBRATORS.names() if not CALIBRATORS.factory(n).needs_logits]
    raise ValueError(
        f"calibrator {key!r} ({entry['name']}) maps logits, and {predictions.source} "
        "holds probabilities: their logarithm differs from the model's logits by a "
        "per-row constant this calibrator does not ignore, so its fit would not be "
        f"{entry['name']}. Give logits, or pick from {', '.join(usable)} (dirichlet is "
        "matrix scaling of log-probabilities)"
    )


def _scalars(learned: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in learned.items() if not isinstance(v, list)}


def score_predictions(
    predictions: PredictionsFile,
    calibrators: Mapping[str, Any],
    n_bins: int = 15,
    reliability_bins: Sequence[int] = (15,),
    metrics: Sequence[str] = (),
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
        metrics: metrics besides the default suite (``evaluation.metrics``: e.g. the
            on-request ``skce``, ``ece_kde``).
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
        extra_metrics=tuple(metrics),
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


def score_intervals(
    predictions: PredictionsFile,
    calibrators: Mapping[str, Any],
    n_bins: int = 15,
    *,
    name: str,
    metrics: Sequence[str] = TABLE_METRICS,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """The rows of one file in the table across files: for the test split, uncalibrated and
    under each fitted calibrator, each of ``metrics`` with its percentile bootstrap interval
    (:func:`calib_pipeline.calibration.metrics.bootstrap_ci`, ``n_resamples`` resamples of
    the test samples drawn with ``seed``; the same resamples for every calibrator).

    Returns:
        Columns name, file, classes, inputs, n_val, n_test, split, calibrator, metric,
        value, low, high, level, n_resamples.
    """
    predictions.check_provenance(calibrators["provenance"])
    logits, labels = predictions.calibration_logits("test"), predictions.labels["test"]
    scored = {UNCALIBRATED: (predictions.scores["test"], predictions.inputs)}
    for key, calibrator in calibrators["fitted"].items():
        scored[key] = calibrated_scores(calibrator, logits)
    rows = [
        {"calibrator": key, "metric": metric, **interval}
        for key, (scores, inputs) in scored.items()
        for metric, interval in _intervals(
            scores, labels, inputs, metrics, n_bins, n_resamples=n_resamples, level=level, seed=seed
        ).items()
    ]
    file = {
        "name": name,
        "file": Path(predictions.source).name,
        "classes": predictions.num_classes,
        "inputs": predictions.inputs,
        "n_val": predictions.labels["val"].numel(),
        "n_test": labels.numel(),
        "split": predictions.split,
    }
    return pd.DataFrame(rows).assign(**file, level=level, n_resamples=n_resamples)[
        [*file, "calibrator", "metric", "value", "low", "high", "level", "n_resamples"]
    ]


def _intervals(
    scores: Tensor, labels: Tensor, inputs: str, metrics: Sequence[str], n_bins: int, **bootstrap
) -> dict[str, dict[str, float]]:
    """Metric -> ``{"value", "low", "high"}`` of ``bootstrap_ci`` on one set of scores."""
    out = {}
    for metric in metrics:
        # an infinite NLL (a test label at probability 0) makes the percentile's
        # interpolation inf - inf: NaN bounds, which the summary cell explains
        with np.errstate(invalid="ignore"):
            interval = bootstrap_ci(
                scores,
                labels,
                metric,
                inputs=inputs,
                **bootstrap,
                **({"n_bins": n_bins} if metric == "ece" else {}),
            )
        out[metric] = {"value": interval["point"], "low": interval["low"], "high": interval["high"]}
    return out


def scores_summary(*tables: pd.DataFrame, calibrators: Sequence[str] = ()) -> dict[str, Any]:
    """The table across scored files (the score summary): one row block per file -- its
    classes, split sizes and origin -- and one row per calibrator with each metric's test
    value and bootstrap interval, in the reports' units.

    Args:
        tables: :func:`score_intervals` of each file, in the order of the run.
        calibrators: the calibrator keys asked for; one a file has no rows of (left out on
            probabilities) is named under the table.

    Returns:
        ``{"summary": Markdown, "table": the rows of every file (CSV)}``.
    """
    table = pd.concat(tables, ignore_index=True)
    metrics = list(dict.fromkeys(table["metric"]))
    level, resamples = float(table["level"].iloc[0]), int(table["n_resamples"].iloc[0])
    blocks = []
    for name, rows in table.groupby("name", sort=False):
        first = rows.iloc[0]
        wide = rows.pivot(index="calibrator", columns="metric", values=["value", "low", "high"])
        order = list(dict.fromkeys(rows["calibrator"]))
        for position, key in enumerate(order):
            cells = {
                METRIC_NAMES.get(metric, metric): _interval_cell(
                    metric, *(wide.loc[key, (part, metric)] for part in ("value", "low", "high"))
                )
                for metric in metrics
            }
            blocks.append(
                {
                    "file": _file_label(str(name), str(first["file"])) if position == 0 else "",
                    "classes": int(first["classes"]) if position == 0 else "",
                    "val / test": f"{first['n_val']:,} / {first['n_test']:,}"
                    if position == 0
                    else "",
                    "calibrator": key,
                    **cells,
                }
            )
    header = (
        f"# Scored predictions: {table['name'].nunique()} file(s)\n\n"
        f"Test split of each file; each cell is the value [{level:.0%} percentile bootstrap "
        f"interval over the test samples, {resamples:,} resamples]. {units_note(metrics)} "
        "`none` = the file's scores; other calibrators were fitted on the file's val split. "
        "Binned ECE is biased upward on a resample (repeated samples share bins), so its "
        "interval can lie above the value.\n"
    )
    origins = "\n".join(
        f"- {name} ({rows['file'].iloc[0]}): {rows['inputs'].iloc[0]}, {rows['split'].iloc[0]}"
        + _not_fitted(rows, calibrators)
        for name, rows in table.groupby("name", sort=False)
    )
    body = pd.DataFrame(blocks).to_markdown(index=False)
    return {
        "summary": f"{header}\n{body}\n\n## Files\n\n{origins}\n",
        "table": table,
    }


def _file_label(name: str, file: str) -> str:
    """The file's name, and the output name where it is not the file's stem."""
    return file if output_name(file) == name else f"{name} ({file})"


def _interval_cell(metric: str, value: float, low: float, high: float) -> str:
    if not math.isfinite(value):
        return f"{value} (a test label at probability 0)"
    scale = 100.0 if metric_unit(metric) else 1.0
    bounds = "unbounded" if not (math.isfinite(low) and math.isfinite(high)) else None
    interval = bounds or f"{low * scale:.2f}, {high * scale:.2f}"
    return f"{value * scale:.2f} [{interval}]"


def _not_fitted(rows: pd.DataFrame, calibrators: Sequence[str]) -> str:
    missing = [key for key in calibrators if key not in set(rows["calibrator"])]
    if not missing:
        return ""
    return f"; not fitted (they map logits, the file holds probabilities): {', '.join(missing)}"
