from functools import partial, update_wrapper
from typing import Any

import pandas as pd
from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.config import StudySpec, Structure
from calib_pipeline.pipelines.posthoc.nodes import SHIFTED_VAL_SUFFIX
from calib_pipeline.pipelines.reporting.nodes import SHIFT_METRICS, evaluate_runs, run_report
from calib_pipeline.pipelines.reporting.reports import report_needs
from calib_pipeline.pipelines.training.pipeline import run_prefix

ARTIFACT_SUFFIX = {"logits": "logits", "calibrators": "calibrators", "shift": "shift_logits", "histories": "history"}


def evaluate_study(
    dataset: dict[str, Any],
    evaluation: dict[str, Any],
    *,
    study: str,
    run_keys: dict[str, tuple[str, int]],
    labels: dict[str, str],
    calibrators: list[str],
    report_bins: tuple[int, ...] = (),
    **artifacts: Any,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Gather a study's cached artifacts (``r<i>_<kind>`` keyword inputs) and score them;
    reliability bins are kept for the evaluation's bin counts and those the study's
    reports ask for (``report_bins``)."""
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
            sorted({int(evaluation.get("n_bins", 15)), *evaluation.get("reliability_bins", []), *report_bins})
        ),
        shift_metrics=tuple(evaluation.get("shift_metrics", SHIFT_METRICS)),
    )


def _named(func, **kwargs):
    return update_wrapper(partial(func, **kwargs), func)


def _run_inputs(run_keys: dict[str, tuple[str, int]], kinds: tuple[str, ...]) -> dict[str, str]:
    return {
        f"{key}_{kind}": f"{run_prefix(method, seed)}.{ARTIFACT_SUFFIX[kind]}"
        for key, (method, seed) in run_keys.items()
        for kind in kinds
    }


def study_pipeline(
    structure: Structure, study: StudySpec, dataset_name: str = "", shifted_val: bool = False
) -> Pipeline:
    """Evaluation (tidy table + reliability bins) and one node per report of the study;
    with ``shifted_val`` every calibrator also appears as ``<key>@shifted_val``."""
    runs = [(m, s) for m in study.methods for s in study.seeds]
    run_keys = {f"r{i}": run for i, run in enumerate(runs)}
    name = study.name
    labels = {m: structure.methods[m].label for m in study.methods}
    calibrators = list(study.calibrators)
    if shifted_val:
        calibrators += [f"{key}{SHIFTED_VAL_SUFFIX}" for key in study.calibrators]
    requested = (study.reports.get("reliability") or {}).get("n_bins", [])
    report_bins = tuple(int(b) for b in ([requested] if isinstance(requested, int) else requested))
    nodes = [
        node(
            _named(evaluate_study, study=name, run_keys=run_keys, labels=labels,
                   calibrators=calibrators, report_bins=report_bins),
            inputs={
                "dataset": "params:dataset",
                "evaluation": "params:evaluation",
                **_run_inputs(run_keys, ("logits", "calibrators", "shift")),
            },
            outputs=[f"{name}.metrics", f"{name}.reliability_bins"],
            name="evaluate",
            tags=["reporting", "evaluation"],
        )
    ]
    study_info = {
        "study": name,
        "dataset": dataset_name,
        "methods": list(study.methods),
        "seeds": list(study.seeds),
        "labels": labels,
        "groups": {m: structure.methods[m].group for m in study.methods},
    }
    for report, options in study.reports.items():
        nodes.append(
            node(
                _named(run_report, report=report, options=dict(options or {}), study=study_info, run_keys=run_keys),
                inputs={
                    "metrics": f"{name}.metrics",
                    "bins": f"{name}.reliability_bins",
                    **_run_inputs(run_keys, report_needs(report)),
                },
                outputs=f"{name}.report_{report}",
                name=f"report_{report}",
                tags=["reporting"],
            )
        )
    return Pipeline(nodes, namespace=name, prefix_datasets_with_namespace=False)


def create_pipeline(
    structure: Structure, studies: list[str], dataset_name: str = "", shifted_val: bool = False
) -> Pipeline:
    return Pipeline([study_pipeline(structure, structure.studies[s], dataset_name, shifted_val) for s in studies])
