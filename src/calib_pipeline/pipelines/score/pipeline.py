"""The score pipeline: for each file, read → prepare (key mapping, val/test split, checks) →
fit → evaluate → per-file reports and bootstrap intervals; then one table across the files.

Its nodes are :mod:`calib_pipeline.reports.scoring`'s functions; each file is read by the
catalog (``kedro_datasets.PredictionsDataset``, paths from ``--params=predictions.path=...``:
a file, a glob pattern or a list). Not part of ``__default__``: ``kedro run`` runs the
studies; files are scored when asked by name. Outputs are ``score.<name>.<kind>`` (catalog
factories under ``08_reporting/score/<name>/``), ``<name>`` being ``predictions.name`` (one
file) or each file's stem, and the table across files ``score.summary``
(``08_reporting/score/summary/``).
"""

from functools import partial, update_wrapper
from pathlib import Path
from typing import Any

from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.artifacts import artifact_name
from calib_pipeline.reports.scoring import (
    ScoreOptions,
    fit_calibrators,
    predictions_report,
    prepare_predictions,
    score_intervals,
    score_predictions,
    scores_summary,
)

REPORTS = ("summary", "reliability")
BINS = ["params:evaluation.n_bins", "params:evaluation.reliability_bins"]


def _named(func, **kwargs):
    return update_wrapper(partial(func, **kwargs), func)


def _file_nodes(options: ScoreOptions, name: str) -> list:
    """The nodes of one file, named ``<name>.<step>`` (``score.<name>.<step>`` in the
    pipeline)."""
    predictions = artifact_name("score_predictions", name=name)
    calibrators = artifact_name("score_calibrators", name=name)
    metrics = artifact_name("score_metrics", name=name)
    bins = artifact_name("score_reliability_bins", name=name)
    # inputs in the order of the functions' arguments: Kedro maps them by position
    return [
        node(
            _named(
                prepare_predictions,
                keys=options.keys,
                val_fraction=options.val_fraction,
                split_seed=options.split_seed,
            ),
            inputs=artifact_name("predictions", name=name),
            outputs=predictions,
            name=f"{name}.prepare",
        ),
        node(
            _named(
                fit_calibrators,
                keys=list(options.calibrators),
                skip_logit_maps=options.defaulted,
            ),
            inputs=[predictions, "params:calibrators"],
            outputs=calibrators,
            name=f"{name}.fit_calibrators",
        ),
        node(
            _named(score_predictions, name=name),
            inputs=[predictions, calibrators, *BINS, "params:evaluation.metrics"],
            outputs=[metrics, bins],
            name=f"{name}.evaluate",
        ),
        node(
            _named(
                score_intervals,
                name=name,
                n_resamples=options.ci_resamples,
                level=options.ci_level,
                seed=options.ci_seed,
            ),
            inputs=[predictions, calibrators, BINS[0]],
            outputs=artifact_name("score_intervals", name=name),
            name=f"{name}.intervals",
        ),
        *(
            node(
                _named(predictions_report, report=report),
                inputs=[metrics, bins, calibrators, BINS[1]],
                outputs=artifact_name("score_report", name=name, report=report),
                name=f"{name}.report_{report}",
            )
            for report in REPORTS
        ),
    ]


def create_pipeline(parameters: dict) -> Pipeline:
    """The score pipeline of the ``predictions`` parameters (checked here, at build time)."""
    options = ScoreOptions.from_params(
        parameters.get("predictions"), parameters.get("calibrators") or {}
    )
    nodes = [n for name in options.names for n in _file_nodes(options, name)]
    nodes.append(
        node(
            _named(scores_summary, calibrators=list(options.calibrators)),
            inputs=[artifact_name("score_intervals", name=name) for name in options.names],
            outputs=artifact_name("score_summary"),
            name="summary",
        )
    )
    return Pipeline(
        nodes, namespace="score", tags=["score", "reporting"], prefix_datasets_with_namespace=False
    )


def score_run_description(pipeline: Pipeline, catalog: Any) -> dict[str, str] | None:
    """What a run of the score pipeline alone scores, in place of the environment's
    dataset and protocol (console header, MLflow tags): ``dataset`` the file names,
    ``protocol`` how val and test are drawn. None for any other run (nodes of another stage,
    none at all) or a catalog without the ``predictions`` and ``calibrators`` parameters."""
    nodes = getattr(pipeline, "nodes", [])
    groups = ("predictions", "calibrators")
    if not nodes or not all("score" in n.tags for n in nodes) or catalog is None:
        return None
    if not all(f"params:{group}" in catalog for group in groups):
        return None
    parameters = {group: catalog.load(f"params:{group}") for group in groups}
    options = ScoreOptions.from_params(parameters["predictions"], parameters["calibrators"] or {})
    if options.val_fraction is None:
        protocol = "score: val and test as given"
    else:
        protocol = (
            f"score: val fraction {options.val_fraction:g}, stratified, seed {options.split_seed}"
        )
    names = [Path(file).name for file in options.files.values()]
    return {"dataset": ",".join(names) or "none", "protocol": protocol}
