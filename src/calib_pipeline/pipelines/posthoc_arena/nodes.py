"""Nodes of the calibrator arena: stored runs (and predictions files) in, the tidy scores
table out; the table in, the report out. The work is :mod:`calib_pipeline.reports.arena`'s."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd

from calib_pipeline.calibration.predictions import PredictionsFile
from calib_pipeline.pipelines.provenance import check_protocol_of
from calib_pipeline.reports.arena import (
    CLEAN_TEST,
    ArenaOptions,
    ArenaRun,
    NoPredictionSetsError,
    arena_report,
    arena_scores,
)
from calib_pipeline.reports.scoring import ScoreOptions, prepare_predictions
from calib_pipeline.training.artifacts import SHIFT_LOGITS_SETS

logger = logging.getLogger(__name__)


def run_of(name: str, stored: Mapping[str, Any], shifted: bool) -> ArenaRun:
    """The arena run of a stored (method, seed) run ``<method>.seed_<k>``: its val and test
    logits and, with ``shifted``, its shifted test sets (those with logits)."""
    logits = stored["logits"]
    tests = {CLEAN_TEST: (logits["test"]["logits"], logits["test"]["labels"])}
    sets = (stored.get("shift_logits") or {}).get(SHIFT_LOGITS_SETS, {}) if shifted else {}
    for key, entry in sets.items():
        if entry.get("split") == "test" and "logits" in entry:
            tests[key] = (entry["logits"], entry["labels"])
    method = name.rsplit(".seed_", 1)[0]
    return ArenaRun(name, method, (logits["val"]["logits"], logits["val"]["labels"]), tests)


def _runs(
    stored_runs: Mapping[str, Mapping[str, Any]],
    run_info: dict[str, str],
    shifted: bool,
    files: Mapping[str, PredictionsFile],
) -> Iterator[ArenaRun]:
    for name in stored_runs:
        stored = stored_runs[name]
        check_protocol_of(f"{name}.logits", stored["logits"]["provenance"], run_info)
        yield run_of(name, stored, shifted)
    for name, predictions in files.items():
        yield ArenaRun.from_predictions(name.removesuffix(".file"), predictions)


def score_arena(
    stored_runs: Mapping[str, Mapping[str, Any]],
    run_info: dict[str, str],
    n_bins: int,
    *,
    options: ArenaOptions,
    files: ScoreOptions,
    **predictions: Any,
) -> pd.DataFrame:
    """Every calibrator of ``options`` on every stored run and predictions file.

    Args:
        stored_runs: run name -> its stored logits (``kedro_datasets.StoredRuns``).
        run_info: the session's identity; each run's logits must be of its protocol.
        n_bins: bins of the binned metrics (``evaluation.n_bins``).
        options: the checked ``posthoc_arena`` parameters.
        files: the ``predictions`` parameters (how each file is split and named).
        predictions: ``score.<name>.file`` -> the file's arrays as read; its run is named
            ``score.<name>``.

    Returns:
        The tidy scores table (:func:`calib_pipeline.reports.arena.arena_scores`).

    Raises:
        NoPredictionSetsError: no run has stored logits and no file was given.
        ProvenanceError: a run's logits were made under another protocol.
    """
    prepared = {
        name: prepare_predictions(
            arrays, keys=files.keys, val_fraction=files.val_fraction, split_seed=files.split_seed
        )
        for name, arrays in predictions.items()
    }
    if not stored_runs and not prepared:
        raise NoPredictionSetsError(
            f"no prediction sets for the calibrator arena: no run has stored logits under "
            f"{getattr(stored_runs, 'root', 'the model-output folder')} and no predictions file "
            "was given. Run a study first (e.g. kedro run --pipelines=focal) or give files with "
            "--params=predictions.path=<file>"
        )
    logger.info(
        "calibrator arena: %d run(s), %d file(s), %d calibrator(s)",
        len(stored_runs),
        len(prepared),
        len(options.calibrators),
    )
    runs = _runs(stored_runs, run_info, options.shifted, prepared)
    return arena_scores(runs, options.factories(), options.metrics, n_bins=n_bins)


def rank_arena(scores: pd.DataFrame, *, options: ArenaOptions) -> dict[str, Any]:
    """The arena's report over its scores table
    (:func:`calib_pipeline.reports.arena.arena_report`)."""
    report = arena_report(scores, options.rank)
    logger.info("%s", report["summary"].splitlines()[4])
    return report
