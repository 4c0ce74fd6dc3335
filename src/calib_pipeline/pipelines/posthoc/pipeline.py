from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.posthoc.nodes import fit_calibrators
from calib_pipeline.pipelines.training.pipeline import run_prefix


def create_pipeline(runs: list[tuple[str, int]]) -> Pipeline:
    return Pipeline(
        [
            node(
                fit_calibrators,
                inputs=[f"{run_prefix(m, s)}.logits", "params:calibrators"],
                outputs=f"{run_prefix(m, s)}.calibrators",
                name=f"posthoc_seed_{s}",
                namespace=m,
                tags=["posthoc"],
            )
            for m, s in runs
        ]
    )
