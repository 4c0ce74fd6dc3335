"""The score pipeline: fit → evaluate → summary and reliability reports, one file.

Not part of ``__default__``: ``kedro run`` runs the studies, and scoring a file is asked
for by name. Outputs are ``score.<name>.<kind>`` (catalog factories under
``08_reporting/score/<name>/``), ``<name>`` being ``predictions.name`` or the file's stem.
"""

from functools import partial, update_wrapper

from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.score.nodes import evaluate, fit, report
from calib_pipeline.reports.scoring import ScoreOptions

REPORTS = ("summary", "reliability")


def _named(func, **kwargs):
    return update_wrapper(partial(func, **kwargs), func)


def create_pipeline(parameters: dict) -> Pipeline:
    """The score pipeline of the ``predictions`` parameters (checked here, at build time)."""
    options = ScoreOptions.from_params(
        parameters.get("predictions"), parameters.get("calibrators") or {}
    )
    prefix = f"score.{options.name}"
    tags = ["score", "reporting"]
    # inputs in the order of the functions' arguments: Kedro maps them by position
    nodes = [
        node(
            _named(fit, keys=list(options.calibrators)),
            inputs=["score.predictions", "params:calibrators"],
            outputs=f"{prefix}.calibrators",
            name="fit_calibrators",
            tags=tags,
        ),
        node(
            _named(evaluate, name=options.name),
            inputs=["score.predictions", f"{prefix}.calibrators", "params:evaluation"],
            outputs=[f"{prefix}.metrics", f"{prefix}.reliability_bins"],
            name="evaluate",
            tags=tags,
        ),
    ]
    for name in REPORTS:
        nodes.append(
            node(
                _named(report, report=name),
                inputs=[
                    f"{prefix}.metrics",
                    f"{prefix}.reliability_bins",
                    f"{prefix}.calibrators",
                    "params:evaluation",
                ],
                outputs=f"{prefix}.report_{name}",
                name=f"report_{name}",
                tags=tags,
            )
        )
    return Pipeline(nodes, namespace="score", prefix_datasets_with_namespace=False)
