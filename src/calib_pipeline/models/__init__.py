"""Architecture registry: ``build_model(name, **params)`` builds any registered network.

Every model exposes the same small interface, which the training engine and the
meta-learning code rely on:

* ``forward_features(x) -> (N, feature_dim)`` -- the penultimate representation;
* ``head`` -- the final ``nn.Linear(feature_dim, num_classes)``;
* ``forward(x) == head(forward_features(x))``;
* ``feature_dim`` and ``num_classes`` attributes.
"""

from calib_pipeline.models import densenet as _densenet  # noqa: F401  (registers)
from calib_pipeline.models import resnet as _resnet  # noqa: F401  (registers)
from calib_pipeline.models import small_cnn as _small_cnn  # noqa: F401  (registers)
from calib_pipeline.models import vgg as _vgg  # noqa: F401  (registers)
from calib_pipeline.models import wide_resnet as _wide_resnet  # noqa: F401  (registers)
from calib_pipeline.models.registry import (
    DATA_SHAPED,
    MODELS,
    ClassifierNet,
    architecture_tag,
    build_model,
    check_model_params,
    model_from_checkpoint,
    model_names,
)

__all__ = [
    "DATA_SHAPED",
    "MODELS",
    "ClassifierNet",
    "architecture_tag",
    "build_model",
    "check_model_params",
    "model_from_checkpoint",
    "model_names",
]
