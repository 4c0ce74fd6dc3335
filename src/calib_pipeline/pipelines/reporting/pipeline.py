from functools import partial, update_wrapper
from typing import Any

import pandas as pd
from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.config import StudySpec, Structure
from calib_pipeline.pipelines.reporting.nodes import evaluate_runs, reliability_figure, summary_tables
from calib_pipeline.pipelines.training.pipeline import run_prefix


def evaluate_study(
    dataset: dict[str, Any],
    evaluation: dict[str, Any],
    *,
    study: str,
    run_keys: dict[str, tuple[str, int]],
    labels: dict[str, str],
    calibrators: list[str],
    **artifacts: Any,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Gather a study's cached artifacts (``r<i>_<kind>`` keyword inputs) and score them."""
    runs = {
        f"{method}|{seed}": {
            "logits": artifacts[f"{key}_logits"],
            "calibrators": artifacts[f"{key}_calibrators"],
            "shift": artifacts.get(f"{key}_shift"),
        }
        for key, (method, seed) in run_keys.items()
    }
    return evaluate_runs(
        runs,
        dataset=dataset["name"],
        study=study,
        labels=labels,
        calibrators=calibrators,
        n_bins=int(evaluation.get("n_bins", 15)),
        reliability_bin_counts=tuple(
            sorted({int(evaluation.get("n_bins", 15)), *evaluation.get("reliability_bins", [])})
        ),
    )


def _named(func, **kwargs):
    return update_wrapper(partial(func, **kwargs), func)


def study_pipeline(structure: Structure, study: StudySpec, with_shift: bool = True) -> Pipeline:
    runs = [(m, s) for m in study.methods for s in study.seeds]
    run_keys = {f"r{i}": run for i, run in enumerate(runs)}
    inputs = {"dataset": "params:dataset", "evaluation": "params:evaluation"}
    for key, (method, seed) in run_keys.items():
        prefix = run_prefix(method, seed)
        inputs[f"{key}_logits"] = f"{prefix}.logits"
        inputs[f"{key}_calibrators"] = f"{prefix}.calibrators"
        if with_shift:
            inputs[f"{key}_shift"] = f"{prefix}.shift_logits"
    labels = {m: structure.methods[m].label for m in study.methods}
    name = study.name
    return Pipeline(
        [
            node(
                _named(evaluate_study, study=name, run_keys=run_keys, labels=labels,
                       calibrators=list(study.calibrators)),
                inputs=inputs,
                outputs=[f"{name}.metrics", f"{name}.reliability_bins"],
                name="evaluate",
                tags=["reporting", "evaluation"],
            ),
            node(
                summary_tables,
                inputs=[f"{name}.metrics", "params:summary"],
                outputs=[f"{name}.summary_table", f"{name}.summary_md"],
                name="summary",
                tags=["reporting"],
            ),
            node(
                reliability_figure,
                inputs=[f"{name}.reliability_bins", "params:evaluation"],
                outputs=f"{name}.reliability_diagram",
                name="reliability_diagram",
                tags=["reporting"],
            ),
        ],
        namespace=name,
        prefix_datasets_with_namespace=False,
    )


def create_pipeline(structure: Structure, studies: list[str], with_shift: bool = True) -> Pipeline:
    return Pipeline([study_pipeline(structure, structure.studies[s], with_shift) for s in studies])
