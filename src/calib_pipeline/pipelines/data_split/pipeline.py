from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.artifacts import artifact_name
from calib_pipeline.pipelines.data_split.nodes import make_split


def create_pipeline(splits: list[str]) -> Pipeline:
    """One node per split definition used by the studies."""
    return Pipeline(
        [
            node(
                make_split,
                [artifact_name("raw_data"), f"params:splits.{name}"],
                artifact_name("split", split=name),
                name=f"split_{name}",
            )
            for name in splits
        ],
        tags="data_split",
    )
