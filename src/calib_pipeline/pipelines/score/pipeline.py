"""The score pipeline: fit → evaluate → summary and reliability reports of one file.

Its nodes are :mod:`calib_pipeline.reports.scoring`'s functions; the file is read by the
catalog (``kedro_datasets.PredictionsDataset``, path from ``--params=predictions.path=...``).
Not part of ``__default__``: ``kedro run`` runs the studies; a file is scored when asked by
name. Outputs are ``score.<name>.<kind>`` (catalog factories under
``08_reporting/score/<name>/``), ``<name>`` being ``predictions.name`` or the file's stem.
"""

from functools import partial, update_wrapper

from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.artifacts import artifact_name
from calib_pipeline.reports.scoring import (
    ScoreOptions,
    fit_calibrators,
    predictions_report,
    score_predictions,
)

REPORTS = ("summary", "reliability")
BINS = ["params:evaluation.n_bins", "params:evaluation.reliability_bins"]


def _named(func, **kwargs):
    return update_wrapper(partial(func, **kwargs), func)


def create_pipeline(parameters: dict) -> Pipeline:
    """The score pipeline of the ``predictions`` parameters (checked here, at build time)."""
    options = ScoreOptions.from_params(
        parameters.get("predictions"), parameters.get("calibrators") or {}
    )
    calibrators = artifact_name("score_calibrators", name=options.name)
    metrics = artifact_name("score_metrics", name=options.name)
    bins = artifact_name("score_reliability_bins", name=options.name)
    predictions = artifact_name("predictions")
    # inputs in the order of the functions' arguments: Kedro maps them by position
    nodes = [
        node(
            _named(fit_calibrators, keys=list(options.calibrators)),
            inputs=[predictions, "params:calibrators"],
            outputs=calibrators,
            name="fit_calibrators",
        ),
        node(
            _named(score_predictions, name=options.name),
            inputs=[predictions, calibrators, *BINS],
            outputs=[metrics, bins],
            name="evaluate",
        ),
        *(
            node(
                _named(predictions_report, report=report),
                inputs=[metrics, bins, calibrators, BINS[1]],
                outputs=artifact_name("score_report", name=options.name, report=report),
                name=f"report_{report}",
            )
            for report in REPORTS
        ),
    ]
    return Pipeline(
        nodes, namespace="score", tags=["score", "reporting"], prefix_datasets_with_namespace=False
    )
