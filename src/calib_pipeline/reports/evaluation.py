"""Scoring cached logits into a study's tidy metrics table and per-bin reliability table.

``evaluate_runs`` scores every (method, seed, calibrator, split, shift, severity) cell of a
study from the runs' cached logits and fitted calibrators; every report reads its output.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
import torch

from calib_pipeline.calibration.metrics import (
    calibration_metrics,
    calibration_metrics_batched,
    default_metric_names,
    reliability_bins,
)
from calib_pipeline.calibration.posthoc import calibrated_scores
from calib_pipeline.reports.common import UNCALIBRATED, UNSHIFTED
from calib_pipeline.reports.ensembles import (
    ENSEMBLE_SEED,
    EnsembleSpec,
    calibrated_then_pooled_runs,
    pooled_run,
)

logger = logging.getLogger(__name__)

TIDY_COLUMNS = [
    "dataset",
    "study",
    "method",
    "label",
    "seed",
    "run_id",
    "calibrator",
    "split",
    "shift",
    "severity",
    "metric",
    "value",
]
SHIFT_METRICS = ("accuracy", "nll", "brier", "ece", "ece_em", "mce", "ece_l2", "auroc")

ShiftedCells = dict[tuple[str, int], list[tuple[dict[str, Any], torch.Tensor, torch.Tensor]]]


def _cells(run: dict[str, Any]) -> list[tuple[str, str, int, dict[str, Any]]]:
    """(split, shift, severity, entry) of every evaluated set of a run.

    Shift entries carry their split (``"test"``, or ``"val"`` for shifted validation sets;
    older caches have none: test); skipped corruptions have no logits and no cell.
    """
    cells = [
        (part, UNSHIFTED, 0, run["logits"][part])
        for part in ("val", "test")
        if part in run["logits"]
    ]
    for entry in (run.get("shift") or {}).values():
        if "logits" in entry:
            cells.append(
                (entry.get("split", "test"), entry["shift"], int(entry["severity"]), entry)
            )
    return cells


def _bins_frame(stats: dict[str, Any], count: int, base: dict[str, Any]) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "lower": stats["edges"][:-1],
            "upper": stats["edges"][1:],
            "count": stats["counts"],
            "confidence": stats["confidence"],
            "accuracy": stats["accuracy"],
        }
    )
    frame.insert(0, "n_bins", count)
    for column, value in reversed(list(base.items())):
        if column not in ("split", "shift", "severity"):
            frame.insert(0, column, value)
    return frame


def _score_shifted(
    shifted: ShiftedCells, n_bins: int, shift_metrics: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Rows of the shifted cells of one (run, calibrator), one batched call per score kind
    and set size (the sets of a run share their size, so they stack into R × N × K)."""
    rows: list[dict[str, Any]] = []
    for (kind, _), cells in shifted.items():
        values = calibration_metrics_batched(
            torch.stack([torch.as_tensor(c[1]) for c in cells]),
            torch.stack([torch.as_tensor(c[2]) for c in cells]),
            n_bins=n_bins,
            inputs=kind,
            keys=list(shift_metrics),
        )
        for index, (cell, _, _) in enumerate(cells):
            rows.extend({**cell, "metric": k, "value": float(v[index])} for k, v in values.items())
    return rows


def _score_run(
    run: dict[str, Any],
    base: dict[str, Any],
    calibrator: Any,
    n_bins: int,
    reliability_bin_counts: tuple[int, ...],
    shift_metrics: tuple[str, ...],
    extra_metrics: tuple[str, ...] = (),
) -> tuple[list[dict[str, Any]], list[pd.DataFrame]]:
    """Tidy rows and reliability-bin frames of one run under one calibrator (``None``: raw);
    clean cells get the default suite and ``extra_metrics``."""
    suite = default_metric_names()
    keys = [*suite, *(key for key in extra_metrics if key not in suite)]
    rows: list[dict[str, Any]] = []
    bins: list[pd.DataFrame] = []
    shifted: ShiftedCells = {}
    for split, shift, severity, entry in _cells(run):
        if calibrator is None:
            scores, kind = _raw_scores(entry)
        else:
            scores, kind = calibrated_scores(calibrator, entry["logits"])
        cell = {**base, "split": split, "shift": shift, "severity": severity}
        if shift != UNSHIFTED:
            shifted.setdefault((kind, len(entry["labels"])), []).append(
                (cell, scores, entry["labels"])
            )
            continue
        try:
            values = calibration_metrics(
                scores, entry["labels"], n_bins=n_bins, inputs=kind, keys=keys
            )
            rows.extend({**cell, "metric": k, "value": float(v)} for k, v in values.items())
            if split == "test":
                for count in reliability_bin_counts:
                    stats = reliability_bins(scores, entry["labels"], n_bins=count, inputs=kind)
                    bins.append(_bins_frame(stats, count, cell))
        except (ValueError, RuntimeError) as error:
            raise ValueError(f"{_where(cell)}: {error}") from error
    try:
        return rows + _score_shifted(shifted, n_bins, shift_metrics), bins
    except (ValueError, RuntimeError) as error:
        raise ValueError(f"{_where({**base, 'split': 'shifted sets'})}: {error}") from error


def _raw_scores(entry: dict[str, Any]) -> tuple[Any, str]:
    """The uncalibrated scores of a set: its probabilities where it was given as such (a
    user's predictions file, whose ``logits`` are then the log-probabilities calibrators
    read), else its logits."""
    return (entry["probs"], "probs") if "probs" in entry else (entry["logits"], "logits")


def evaluation_options(
    evaluation: Mapping[str, Any],
    report_bins: Iterable[int] = (),
    report_metrics: Iterable[str] = (),
) -> dict[str, Any]:
    """The scoring options of :func:`evaluate_runs` that ``evaluation`` settings give.

    Args:
        evaluation: ``n_bins`` (default 15), ``reliability_bins`` (bin counts of the per-bin
            table besides ``n_bins``), ``shift_metrics`` (default ``SHIFT_METRICS``) and
            ``metrics`` (metrics for clean val/test besides the default suite, such as the
            on-request kernel metrics; default none).
        report_bins: bin counts that reports draw, kept in the per-bin table too.
        report_metrics: metrics that reports show, computed on clean val/test too.

    Returns:
        ``n_bins``, ``reliability_bin_counts`` (sorted, unique), ``shift_metrics`` and
        ``extra_metrics`` (``metrics`` then ``report_metrics``, each once).
    """
    n_bins = int(evaluation.get("n_bins", 15))
    return {
        "n_bins": n_bins,
        "reliability_bin_counts": tuple(
            sorted({n_bins, *evaluation.get("reliability_bins", []), *report_bins})
        ),
        "shift_metrics": tuple(evaluation.get("shift_metrics", SHIFT_METRICS)),
        "extra_metrics": tuple(dict.fromkeys([*evaluation.get("metrics", []), *report_metrics])),
    }


def _where(cell: dict[str, Any]) -> str:
    """The run, calibrator and split a failing cell belongs to, as a user names them."""
    shift = cell.get("shift", UNSHIFTED)
    shifted = "" if shift == UNSHIFTED else f", shift {shift} severity {cell.get('severity')}"
    run = f" (run {cell['run_id']})" if cell.get("run_id") else ""  # a scored file has none
    return (
        f"{cell['method']} seed {cell['seed']}{run}, calibrator "
        f"{cell['calibrator']}, split {cell['split']}{shifted}"
    )


def evaluate_runs(
    runs: dict[str, dict[str, Any]],
    *,
    dataset: str,
    study: str,
    labels: dict[str, str],
    calibrators: list[str],
    n_bins: int = 15,
    reliability_bin_counts: tuple[int, ...] = (15,),
    shift_metrics: tuple[str, ...] = SHIFT_METRICS,
    ensembles: Sequence[EnsembleSpec] = (),
    calibrator_definitions: Mapping[str, Mapping[str, Any]] | None = None,
    extra_metrics: tuple[str, ...] = (),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Score every cell of a study, then of each of its ensembles.

    Clean val/test cells get the default metric suite and ``extra_metrics``; shifted sets
    (often ~100 per run) get ``shift_metrics``, scored in one batched call per (run,
    calibrator) -- the sets of a run share their size, so they stack into R × N × K.

    Args:
        runs: ``"<method>|<seed>"`` -> ``{"logits", "calibrators", "shift"}`` artifacts and
            the ``run_id`` of the training that made them (None when unknown). A set
            (``logits["val"]``, ...) with ``"probs"`` is scored uncalibrated on them and
            calibrated from its ``"logits"``.
        dataset, study: identifiers written into every row.
        labels: method key -> display label.
        calibrators: calibrator keys of the study (``"none"`` is always added first).
        n_bins, reliability_bin_counts: bins of the binned metrics; bin counts of the
            per-bin table (clean test split).
        shift_metrics: metric keys computed on shifted sets.
        ensembles: ensembles of runs of ``runs``, scored after them (seed
            ``ENSEMBLE_SEED``, calibrators in both pooling orders; docs/ensembles.md).
        calibrator_definitions: key -> ``{"name", "params"}`` of ``calibrators``: what the
            ensembles' pool-then-calibrate calibrators are fitted as.
        extra_metrics: on-request metrics for clean val/test cells (``skce``, ...).

    Returns:
        The tidy metrics table (``TIDY_COLUMNS``; ``run_id`` says which training produced
        each row's model) and the per-bin reliability table.
    """
    scoring = {
        "n_bins": n_bins,
        "reliability_bin_counts": reliability_bin_counts,
        "shift_metrics": shift_metrics,
        "extra_metrics": extra_metrics,
    }
    identifiers = {"dataset": dataset, "study": study}
    scored = [
        _evaluate_run(key, run, identifiers, labels, calibrators, **scoring)
        for key, run in runs.items()
    ] + [
        _evaluate_ensemble(spec, runs, identifiers, calibrators, calibrator_definitions, **scoring)
        for spec in ensembles
    ]
    table = pd.DataFrame([row for rows, _ in scored for row in rows], columns=TIDY_COLUMNS)
    logger.info("%s: scored %d rows", study, len(table))
    bins = [frame for _, run_bins in scored for frame in run_bins]
    return table, pd.concat(bins, ignore_index=True) if bins else pd.DataFrame()


def _evaluate_run(
    run_key: str,
    run: dict[str, Any],
    identifiers: dict[str, str],
    labels: dict[str, str],
    calibrators: list[str],
    **scoring: Any,
) -> tuple[list[dict[str, Any]], list[pd.DataFrame]]:
    """Rows and per-bin tables of one run (``"<method>|<seed>"``), uncalibrated and with
    each of ``calibrators``; ``scoring`` holds :func:`_score_run`'s options.

    Raises:
        KeyError: a calibrator of ``calibrators`` the run's fitted ones lack.
    """
    method, seed = run_key.split("|")
    fitted = run.get("calibrators") or {}
    missing = [c for c in calibrators if c not in fitted]
    if missing:
        raise KeyError(
            f"{method} seed {seed}: calibrator(s) {missing} were not fitted; re-run posthoc"
        )
    rows: list[dict[str, Any]] = []
    bins: list[pd.DataFrame] = []
    for cal_name in [UNCALIBRATED, *calibrators]:
        base = {
            **identifiers,
            "method": method,
            "label": labels.get(method, method),
            "seed": int(seed),
            "run_id": run.get("run_id"),
            "calibrator": cal_name,
        }
        calibrator = None if cal_name == UNCALIBRATED else fitted[cal_name]
        run_rows, run_bins = _score_run(run, base, calibrator, **scoring)
        rows.extend(run_rows)
        bins.extend(run_bins)
    return rows, bins


def _evaluate_ensemble(
    spec: EnsembleSpec,
    runs: dict[str, dict[str, Any]],
    identifiers: dict[str, str],
    calibrators: list[str],
    definitions: Mapping[str, Mapping[str, Any]] | None,
    **scoring: Any,
) -> tuple[list[dict[str, Any]], list[pd.DataFrame]]:
    """Rows and per-bin tables of ensemble ``spec``: its averaged probabilities
    uncalibrated and pool-then-calibrate (``<key>``), then calibrate-then-pool
    (``<key>@calibrate_then_pool``) for each of ``calibrators``."""
    pooled = pooled_run(spec, runs, definitions or {})
    rows, bins = _evaluate_run(
        f"{spec.key}|{ENSEMBLE_SEED}",
        pooled,
        identifiers,
        {spec.key: spec.label},
        calibrators,
        **scoring,
    )
    for name, run in calibrated_then_pooled_runs(spec, runs, calibrators).items():
        base = {
            **identifiers,
            "method": spec.key,
            "label": spec.label,
            "seed": ENSEMBLE_SEED,
            "run_id": run["run_id"],
            "calibrator": name,
        }
        run_rows, run_bins = _score_run(run, base, None, **scoring)
        rows.extend(run_rows)
        bins.extend(run_bins)
    return rows, bins
