"""The score pipeline: fit → evaluate → summary and reliability reports of one file.

Its nodes are :mod:`calib_pipeline.reports.scoring`'s functions; the file is read by the
catalog (``kedro_datasets.PredictionsDataset``, path from ``--params=predictions.path=...``).
Not part of ``__default__``: ``kedro run`` runs the studies; a file is scored when asked by
name. Outputs are ``score.<name>.<kind>`` (catalog factories under
``08_reporting/score/<name>/``), ``<name>`` being ``predictions.name`` or the file's stem.
"""

from functools import partial, update_wrapper

from kedro.pipeline import Pipeline, node

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
    out = f"score.{options.name}"
    # inputs in the order of the functions' arguments: Kedro maps them by position
    nodes = [
        node(
            _named(fit_calibrators, keys=list(options.calibrators)),
            inputs=["score.predictions", "params:calibrators"],
            outputs=f"{out}.calibrators",
            name="fit_calibrators",
        ),
        node(
            _named(score_predictions, name=options.name),
            inputs=["score.predictions", f"{out}.calibrators", *BINS],
            outputs=[f"{out}.metrics", f"{out}.reliability_bins"],
            name="evaluate",
        ),
        *(
            node(
                _named(predictions_report, report=report),
                inputs=[f"{out}.metrics", f"{out}.reliability_bins", f"{out}.calibrators", BINS[1]],
                outputs=f"{out}.report_{report}",
                name=f"report_{report}",
            )
            for report in REPORTS
        ),
    ]
    return Pipeline(
        nodes, namespace="score", tags=["score", "reporting"], prefix_datasets_with_namespace=False
    )
