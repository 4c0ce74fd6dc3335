"""Nodes of the reporting stage: unpack the catalog's inputs, call :mod:`calib_pipeline.reports`.

``collect_runs`` hands a study one method's run artifacts in one value (a node in the
method's namespace, so each method keeps its artifacts inside its own kedro-viz box);
``evaluate_study`` scores a study's cached logits into the tidy metrics table
(:func:`~calib_pipeline.reports.evaluation.evaluate_runs`); ``run_report`` builds one
registered report from that table, the per-bin reliability table and whatever per-run
artifacts the report needs.
"""

from __future__ import annotations

from typing import Any

import matplotlib

# Report nodes draw figures in worker processes without a display.
matplotlib.use("Agg")

import pandas as pd

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.pipelines.artifacts import run_artifact
from calib_pipeline.pipelines.provenance import check_run
from calib_pipeline.reports.ensembles import EnsembleSpec
from calib_pipeline.reports.evaluation import evaluate_runs, evaluation_options
from calib_pipeline.reports.registry import StudyResults, build_report, report_needs
from calib_pipeline.training.artifacts import (
    FITTED_CALIBRATORS,
    HISTORY_PROVENANCE,
    SHIFT_LOGITS_SETS,
)
from calib_pipeline.training.provenance import method_setups

# Reports read a run's collections without the provenance stored beside their members.
COLLECTION_MEMBERS = {"calibrators": FITTED_CALIBRATORS, "shift": SHIFT_LOGITS_SETS}


def collect_runs(**artifacts: Any) -> dict[str, Any]:
    """One method's run artifacts for a study, handed on as one value.

    Args:
        **artifacts: ``r<i>_<kind>`` -> the run's artifact (``r<i>`` is the study's key of
            the run, ``<kind>`` one of ``logits``, ``calibrators``, ``shift``, ``histories``).

    Returns:
        The same mapping.
    """
    return artifacts


def _runs(collections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``r<i>_<kind>`` -> artifact over every method's :func:`collect_runs` value."""
    return {key: value for collection in collections.values() for key, value in collection.items()}


def evaluate_study(
    dataset: dict[str, Any],
    model: dict[str, Any],
    training: dict[str, Any],
    splits: dict[str, Any],
    run_info: dict[str, str],
    evaluation: dict[str, Any],
    shift: dict[str, Any] | None = None,
    *,
    study: str,
    run_keys: dict[str, tuple[str, int]],
    methods: dict[str, MethodSpec],
    calibrators: list[str],
    report_bins: tuple[int, ...] = (),
    report_metrics: tuple[str, ...] = (),
    calibrator_definitions: dict[str, dict[str, Any]] | None = None,
    ensembles: tuple[EnsembleSpec, ...] = (),
    **collections: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Score a study's cached artifacts.

    Args:
        dataset: the ``dataset`` parameters (its ``name`` goes into every row).
        model, training, splits, run_info: the session's parameters and identity; every
            run's artifacts must have been trained as they (with ``dataset``) say, under
            its protocol.
        evaluation: the ``evaluation`` parameters
            (:func:`~calib_pipeline.reports.evaluation.evaluation_options`).
        shift: the session's ``shift`` parameters; shift logits made under others are refused.
        study: the study name.
        run_keys: ``r<i>`` -> (method, seed) of the runs' ``r<i>_<kind>`` artifacts.
        methods: method key -> method of the study (labels, what a run's training was).
        calibrators: calibrator keys of the study.
        report_bins, report_metrics: bin counts and on-request metrics the reports show.
        calibrator_definitions: key -> the session's ``calibrators.<key>``; a stored
            calibrator fitted under another definition is refused (ensembles' are fitted).
        ensembles: the study's ensembles (:mod:`calib_pipeline.reports.ensembles`).
        **collections: one :func:`collect_runs` value per method (its runs' artifacts).

    Returns:
        The tidy metrics table (with the ``run_id`` that trained each row's model) and the
        per-bin reliability table.

    Raises:
        ProvenanceError: a run's artifacts come from different trainings, another protocol
            or a training the session's parameters do not describe; nothing is scored.
    """
    session = {"dataset": dataset, "model": model, "training": training, "splits": splits}
    session["run_info"] = run_info
    runs = _checked_runs(
        run_keys, methods, _runs(collections), session, calibrator_definitions or {}, shift
    )
    labels = {key: method.label for key, method in methods.items()}
    options = {
        "calibrators": calibrators,
        "ensembles": ensembles,
        "calibrator_definitions": calibrator_definitions,
        **evaluation_options(evaluation, report_bins, report_metrics),
    }
    return evaluate_runs(runs, dataset=dataset["name"], study=study, labels=labels, **options)


def _checked_runs(
    run_keys: dict[str, tuple[str, int]],
    methods: dict[str, MethodSpec],
    artifacts: dict[str, Any],
    session: dict[str, Any],
    calibrator_definitions: dict[str, dict[str, Any]],
    shift_params: dict[str, Any] | None,
) -> dict[str, dict[str, Any]]:
    """``"<method>|<seed>"`` -> the ``evaluate_runs`` entry of each run of ``run_keys``."""
    return {
        f"{method}|{seed}": _checked_run(
            methods[method], seed, key, artifacts, session, calibrator_definitions, shift_params
        )
        for key, (method, seed) in run_keys.items()
    }


def _checked_run(
    method: MethodSpec,
    seed: int,
    key: str,
    artifacts: dict[str, Any],
    session: dict[str, Any],
    calibrator_definitions: dict[str, dict[str, Any]],
    shift_params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``evaluate_runs`` entry of run ``key``, once its artifacts (shift settings,
    calibrator definitions and history included) passed ``check_run``."""
    logits = run_artifact("logits", method.key, seed)
    calibrators = run_artifact("calibrators", method.key, seed)
    named = {logits: artifacts[f"{key}_logits"], calibrators: artifacts[f"{key}_calibrators"]}
    shift = artifacts.get(f"{key}_shift")
    if shift is not None:
        named[run_artifact("shift_logits", method.key, seed)] = shift
    provenance = check_run(
        method,
        seed,
        named,
        **session,
        shift=shift_params,
        calibrator_definitions=calibrator_definitions,
        history=artifacts.get(f"{key}_histories"),
    )
    return {
        "logits": named[logits],
        "calibrators": named[calibrators][FITTED_CALIBRATORS],
        "shift": None if shift is None else shift[SHIFT_LOGITS_SETS],
        "run_id": provenance["run_id"],
    }


def run_report(
    metrics: pd.DataFrame,
    bins: pd.DataFrame,
    model: dict[str, Any] | None = None,
    *,
    report: str,
    options: dict[str, Any],
    study: dict[str, Any],
    run_keys: dict[str, tuple[str, int]],
    model_overrides: dict[str, dict | None] | None = None,
    training: dict[str, Any] | None = None,
    training_overrides: dict[str, dict] | None = None,
    **collections: dict[str, Any],
) -> dict[str, Any]:
    """Build report ``report`` for a study.

    Args:
        metrics: the study's tidy metrics table.
        bins: the study's per-bin reliability table.
        model: the ``model`` parameters (its ``name`` is the architecture of every run
            whose method does not override it).
        report: registered report name.
        options: the report's options from the study's ``reports`` entry.
        study: name, dataset, protocol, methods, seeds, labels and sweep groups of the study.
        run_keys: ``r<i>`` -> (method, seed) of the runs' ``r<i>_<kind>`` artifacts.
        model_overrides: method -> its own ``model`` entry (``None``: none), over ``model``
            as in training (``training.provenance.method_model``).
        training: the ``training`` parameters; with ``training_overrides`` (method -> its
            own ``training`` entry) they give each method's effective settings, which the
            claims report compares with its paper's schedule.
        **collections: one :func:`collect_runs` value per method when the report declared
            per-run artifacts it needs (only those are handed to it).

    Returns:
        artifact name -> DataFrame / Markdown string / Figure.
    """
    models, schedules = method_setups(
        study["methods"], model, model_overrides, training, training_overrides
    )
    results = StudyResults(metrics=metrics, bins=bins, models=models, schedules=schedules, **study)
    _add_run_artifacts(results, report_needs(report), run_keys, _runs(collections))
    return build_report(report, results, **options)


def _add_run_artifacts(
    results: StudyResults,
    kinds: tuple[str, ...],
    run_keys: dict[str, tuple[str, int]],
    artifacts: dict[str, Any],
) -> None:
    """Put each run's artifacts of ``kinds`` into ``results`` as reports read them: the
    collections' members without their provenance, histories without provenance columns."""
    for key, (method, seed) in run_keys.items():
        for kind in kinds:
            value = artifacts.get(f"{key}_{kind}")
            if value is not None and kind == "histories":  # checked by evaluate_study
                value = value.drop(columns=[c for c in HISTORY_PROVENANCE if c in value.columns])
            if value is not None:
                members = COLLECTION_MEMBERS.get(kind)
                getattr(results, kind)[(method, int(seed))] = value[members] if members else value
