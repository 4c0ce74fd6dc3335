"""Datasets, splits, corruptions and natural-shift sets (pure PyTorch/NumPy, no Kedro)."""

from calib_pipeline.data.datasets import (
    DATASETS,
    DatasetMissing,
    ImageData,
    dataset_available,
    dataset_names,
    load_dataset,
    to_float,
)
from calib_pipeline.data.splits import SPLIT_NAMES, check_fractions, stratified_split

__all__ = [
    "DATASETS",
    "SPLIT_NAMES",
    "DatasetMissing",
    "ImageData",
    "check_fractions",
    "dataset_available",
    "dataset_names",
    "load_dataset",
    "stratified_split",
    "to_float",
]
