from functools import partial, update_wrapper

from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.config import Structure, run_prefix
from calib_pipeline.pipelines.run_info import RUN_INFO
from calib_pipeline.pipelines.training.nodes import train_method


def training_node(structure: Structure, method: str, seed: int):
    spec = structure.methods[method]
    func = update_wrapper(partial(train_method, method=spec, seed=seed), train_method)
    prefix = run_prefix(method, seed)
    return node(
        func,
        inputs=[
            "raw_data",
            f"split_{spec.split}",
            f"params:splits.{spec.split}",
            f"{prefix}.resume",
            "params:model",
            "params:training",
            RUN_INFO,
        ],
        outputs=[f"{prefix}.checkpoint", f"{prefix}.history"],
        name=f"train_seed_{seed}",
        namespace=method,
        tags=["training", f"method.{method}"],
    )


def create_pipeline(structure: Structure, runs: list[tuple[str, int]]) -> Pipeline:
    return Pipeline([training_node(structure, m, s) for m, s in runs])
