from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.config import Structure, run_prefix
from calib_pipeline.pipelines.logits.nodes import compute_logits
from calib_pipeline.pipelines.run_info import RUN_INFO


def create_pipeline(structure: Structure, runs: list[tuple[str, int]]) -> Pipeline:
    nodes = []
    for method, seed in runs:
        prefix = run_prefix(method, seed)
        nodes.append(
            node(
                compute_logits,
                inputs=["raw_data", f"split_{structure.methods[method].split}", f"{prefix}.checkpoint", "params:logits", RUN_INFO],
                outputs=f"{prefix}.logits",
                name=f"logits_seed_{seed}",
                namespace=method,
                tags=["logits"],
            )
        )
    return Pipeline(nodes)
