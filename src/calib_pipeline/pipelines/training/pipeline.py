from functools import partial, update_wrapper

from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.artifacts import artifact_name, run_artifact
from calib_pipeline.pipelines.config import Structure
from calib_pipeline.pipelines.run_info import RUN_INFO
from calib_pipeline.pipelines.training.nodes import train_method


def training_node(structure: Structure, method: str, seed: int):
    spec = structure.methods[method]
    func = update_wrapper(partial(train_method, method=spec, seed=seed), train_method)
    return node(
        func,
        inputs=[
            artifact_name("raw_data"),
            artifact_name("split", split=spec.split),
            f"params:splits.{spec.split}",
            artifact_name("resume"),
            "params:model",
            "params:training",
            RUN_INFO,
        ],
        outputs=[run_artifact("checkpoint", method, seed), run_artifact("history", method, seed)],
        name=f"train_seed_{seed}",
        namespace=method,
        tags=["training"],
    )


def create_pipeline(structure: Structure, runs: list[tuple[str, int]]) -> Pipeline:
    return Pipeline([training_node(structure, m, s) for m, s in runs])
