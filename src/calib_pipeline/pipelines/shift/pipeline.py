from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.artifacts import artifact_name, run_artifact
from calib_pipeline.pipelines.run_info import RUN_INFO
from calib_pipeline.pipelines.shift.nodes import compute_shift_logits, make_shift_sets


def create_pipeline(runs: list[tuple[str, int]]) -> Pipeline:
    """One planning node (the shifted sets, shared by every run) and one logits node per run;
    nothing when no run needs shifted sets."""
    if not runs:
        return Pipeline([])
    nodes = [
        node(
            make_shift_sets,
            [artifact_name("raw_data"), "params:splits", "params:shift"],
            artifact_name("shift_sets"),
            name="make_shift_sets",
            tags=["shift"],
        )
    ]
    nodes += [
        node(
            compute_shift_logits,
            inputs=[
                run_artifact("checkpoint", m, s),
                artifact_name("shift_sets"),
                "params:logits",
                RUN_INFO,
                artifact_name("shift_logits_store"),
            ],
            outputs=run_artifact("shift_logits", m, s),
            name=f"shift_logits_seed_{s}",
            namespace=m,
            tags=["shift"],
        )
        for m, s in runs
    ]
    return Pipeline(nodes)
