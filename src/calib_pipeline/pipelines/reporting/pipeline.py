"""The reporting stage of a study: one evaluation node, then one node per report."""

from functools import partial, update_wrapper

from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.config import Structure, StudySpec, study_uses_shift
from calib_pipeline.pipelines.posthoc.nodes import SHIFTED_VAL_SUFFIX
from calib_pipeline.pipelines.reporting.nodes import evaluate_study, run_report
from calib_pipeline.pipelines.training.pipeline import run_prefix
from calib_pipeline.reports.registry import StudyOutline, check_report, report_needs

ARTIFACT_SUFFIX = {
    "logits": "logits",
    "calibrators": "calibrators",
    "shift": "shift_logits",
    "histories": "history",
}


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
    shift_kind = ("shift",) if shifted_val or study_uses_shift(study) else ()
    requested = (study.reports.get("reliability") or {}).get("n_bins", [])
    report_bins = tuple(int(b) for b in ([requested] if isinstance(requested, int) else requested))
    nodes = [
        node(
            _named(
                evaluate_study,
                study=name,
                run_keys=run_keys,
                labels=labels,
                calibrators=calibrators,
                report_bins=report_bins,
            ),
            inputs={
                "dataset": "params:dataset",
                "evaluation": "params:evaluation",
                **_run_inputs(run_keys, ("logits", "calibrators", *shift_kind)),
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
    outline = StudyOutline(name, study.methods, study_info["groups"], tuple(calibrators))
    models = {m: (structure.methods[m].model or {}).get("name") for m in study.methods}
    for report, options in study.reports.items():
        try:  # what only the study can tell (e.g. a claim naming a method it lacks)
            check_report(report, dict(options or {}), study=outline)
        except ValueError as error:
            raise ValueError(f"study {name!r}: {error}") from None
        nodes.append(
            node(
                _named(
                    run_report,
                    report=report,
                    options=dict(options or {}),
                    study=study_info,
                    run_keys=run_keys,
                    model_overrides=models,
                ),
                inputs={
                    "metrics": f"{name}.metrics",
                    "bins": f"{name}.reliability_bins",
                    "model": "params:model",
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
    return Pipeline(
        [
            study_pipeline(structure, structure.studies[s], dataset_name, shifted_val)
            for s in studies
        ]
    )
