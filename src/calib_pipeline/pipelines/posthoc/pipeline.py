from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.posthoc.nodes import fit_calibrators
from calib_pipeline.pipelines.training.pipeline import run_prefix


def create_pipeline(runs: list[tuple[str, int]], shifted_val: bool = False) -> Pipeline:
    """One fitting node per run; with ``shifted_val`` it also reads the run's shifted
    validation logits and fits every calibrator a second time on clean + shifted val."""
    nodes = []
    for m, s in runs:
        inputs = [f"{run_prefix(m, s)}.logits", "params:calibrators"]
        if shifted_val:
            inputs.append(f"{run_prefix(m, s)}.shift_logits")
        nodes.append(
            node(
                fit_calibrators,
                inputs=inputs,
                outputs=f"{run_prefix(m, s)}.calibrators",
                name=f"posthoc_seed_{s}",
                namespace=m,
                tags=["posthoc"],
            )
        )
    return Pipeline(nodes)
