"""The ``posthoc_arena`` pipeline: two nodes over whatever the environment holds.

``score`` reads ``stored_run_logits`` -- every (method, seed) run's newest logits under the
protocol's folder, whichever studies trained them -- and, when ``predictions.path`` is given,
the same files the ``score`` pipeline reads; it fits every calibrator of ``posthoc_arena`` on
each run's val split and writes ``posthoc_arena.scores``. ``report`` ranks them into
``posthoc_arena.report``. Nothing is trained; not part of ``__default__`` (it would add its
fits to ``make run`` and a report to its outputs): run it by name after any studies.
"""

from __future__ import annotations

from functools import partial, update_wrapper

from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.artifacts import artifact_name
from calib_pipeline.pipelines.posthoc_arena.nodes import rank_arena, score_arena
from calib_pipeline.pipelines.run_info import RUN_INFO
from calib_pipeline.reports.arena import ArenaOptions
from calib_pipeline.reports.scoring import ScoreOptions


def _named(func, **kwargs):
    return update_wrapper(partial(func, **kwargs), func)


def create_pipeline(parameters: dict) -> Pipeline:
    """The arena of the ``posthoc_arena`` parameters (checked here, at build time), over the
    stored runs and the ``predictions.path`` files, if any."""
    calibrators = parameters.get("calibrators") or {}
    options = ArenaOptions.from_params(parameters.get("posthoc_arena"), calibrators)
    files = ScoreOptions.from_params(parameters.get("predictions"), calibrators)
    # keyed by catalog name (``score.<name>.file``): no file name can shadow an argument
    predictions = {
        artifact_name("predictions", name=name): artifact_name("predictions", name=name)
        for name in files.files
    }
    scores = artifact_name("arena_scores")
    return Pipeline(
        [
            node(
                _named(score_arena, options=options, files=files),
                inputs={
                    "stored_runs": artifact_name("run_logits_store"),
                    "run_info": RUN_INFO,
                    "n_bins": "params:evaluation.n_bins",
                    **predictions,
                },
                outputs=scores,
                name="posthoc_arena.score",
            ),
            node(
                _named(rank_arena, options=options),
                inputs=scores,
                outputs=artifact_name("arena_report"),
                name="posthoc_arena.report",
            ),
        ],
        tags=["posthoc_arena"],
    )
