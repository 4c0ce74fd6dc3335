from functools import partial, update_wrapper

from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.artifacts import run_artifact
from calib_pipeline.pipelines.config import Structure
from calib_pipeline.pipelines.posthoc.nodes import fit_calibrators
from calib_pipeline.pipelines.run_info import SESSION_INPUTS


def create_pipeline(
    structure: Structure, runs: list[tuple[str, int]], shifted_val: bool = False
) -> Pipeline:
    """One fitting node per run, fitting the calibrators the run's studies evaluate
    (``Structure.run_calibrators``: those their reports read and those they list); with
    ``shifted_val`` it also reads the run's shifted validation logits and fits each of
    them a second time on clean + shifted val."""
    nodes = []
    for m, s in runs:
        # in the order of fit_calibrators' arguments: Kedro's parameter validation maps
        # node inputs to arguments by position
        inputs = {
            "logits": run_artifact("logits", m, s),
            "calibrators": "params:calibrators",
            **SESSION_INPUTS,
        }
        if shifted_val:
            inputs["shift_logits"] = run_artifact("shift_logits", m, s)
            inputs["shift"] = "params:shift"
        func = partial(
            fit_calibrators,
            method=structure.methods[m],
            seed=s,
            keys=structure.run_calibrators(m, s),
        )
        nodes.append(
            node(
                update_wrapper(func, fit_calibrators),
                inputs=inputs,
                outputs=run_artifact("calibrators", m, s),
                name=f"posthoc_seed_{s}",
                namespace=m,
                tags=["posthoc"],
            )
        )
    return Pipeline(nodes)
