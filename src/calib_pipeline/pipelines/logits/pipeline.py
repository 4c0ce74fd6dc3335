from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.artifacts import artifact_name, run_artifact
from calib_pipeline.pipelines.config import Structure
from calib_pipeline.pipelines.logits.nodes import compute_logits
from calib_pipeline.pipelines.run_info import RUN_INFO


def create_pipeline(structure: Structure, runs: list[tuple[str, int]]) -> Pipeline:
    nodes = []
    for method, seed in runs:
        nodes.append(
            node(
                compute_logits,
                inputs=[
                    artifact_name("raw_data"),
                    artifact_name("split", split=structure.methods[method].split),
                    run_artifact("checkpoint", method, seed),
                    "params:logits",
                    RUN_INFO,
                ],
                outputs=run_artifact("logits", method, seed),
                name=f"logits_seed_{seed}",
                namespace=method,
                tags=["logits"],
            )
        )
    return Pipeline(nodes)
