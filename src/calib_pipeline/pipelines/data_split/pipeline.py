from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.data_split.nodes import make_split


def create_pipeline(splits: list[str]) -> Pipeline:
    """One node per split definition used by the studies."""
    return Pipeline(
        [
            node(make_split, ["raw_data", f"params:splits.{name}"], f"split_{name}", name=f"split_{name}")
            for name in splits
        ],
        tags="data_split",
    )
