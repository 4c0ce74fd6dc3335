import copy

import pytest
import torch

from calib_pipeline.models import build_model, model_from_checkpoint, model_names
from calib_pipeline.models.layers import GridPool


@pytest.mark.parametrize(
    ("name", "channels", "size"),
    [
        ("small_cnn", 1, 8),
        ("small_cnn", 1, 28),
        ("small_cnn", 3, 32),
        ("resnet20", 3, 32),
        ("resnet18", 3, 32),
    ],
)
def test_models_share_the_feature_head_interface(name, channels, size):
    model = build_model(name, in_channels=channels, num_classes=7, image_size=size).eval()
    x = torch.randn(3, channels, size, size)
    features = model.forward_features(x)
    assert features.shape == (3, model.feature_dim)
    assert torch.allclose(model(x), model.head(features))
    assert model(x).shape == (3, 7) and model.num_classes == 7


@pytest.mark.parametrize(("size", "grid"), [(8, 8), (8, 4), (28, 7)])
def test_small_cnn_pool_grid_widens_the_hidden_layer_only(size, grid):
    default = build_model("small_cnn", in_channels=1, num_classes=10, image_size=size)
    wider = build_model(
        "small_cnn", in_channels=1, num_classes=10, image_size=size, pool_grid=grid
    ).eval()
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    # the hidden layer reads 2*width*grid^2 pooled values instead of 2*width*2^2
    assert count(wider) - count(default) == 64 * (grid * grid - 4) * 128
    assert wider(torch.randn(2, 1, size, size)).shape == (2, 10) and wider.feature_dim == 128


@pytest.mark.parametrize("size", [8, 28])
def test_small_cnn_dense_is_small_cnn_reading_the_whole_conv_map(size):
    dense = build_model("small_cnn_dense", in_channels=1, num_classes=10, image_size=size)
    grid = size // 2 if size >= 16 else size
    same = build_model("small_cnn", in_channels=1, num_classes=10, image_size=size, pool_grid=grid)
    assert [p.shape for p in dense.parameters()] == [p.shape for p in same.parameters()]
    same.load_state_dict(dense.state_dict())
    x = torch.randn(2, 1, size, size)
    assert torch.equal(dense.eval()(x), same.eval()(x))


@pytest.mark.parametrize(
    "params", [{"pool_grid": 0}, {"pool_grid": 2.5}, {"width": 0}, {"feature_dim": -1}]
)
def test_small_cnn_refuses_bad_options_before_building(params):
    from calib_pipeline.models import MODELS

    name = next(iter(params))
    with pytest.raises(ValueError, match=rf"{name} must be an integer >= 1, got {params[name]}"):
        MODELS.check("small_cnn", **params)


def test_resnet_depths_follow_6n_plus_2():
    blocks = lambda m: sum(1 for mod in m.modules() if mod.__class__.__name__ == "BasicBlock")  # noqa: E731
    assert blocks(build_model("resnet32", in_channels=3, num_classes=10, image_size=32)) == 15
    assert blocks(build_model("resnet110", in_channels=3, num_classes=10, image_size=32)) == 54


def test_unknown_model_and_bad_arguments():
    with pytest.raises(ValueError, match=r"valid model names are: .*resnet18.*small_cnn"):
        build_model("vgg", in_channels=3, num_classes=10, image_size=32)
    with pytest.raises(ValueError, match="num_classes must be an integer >= 2"):
        build_model("small_cnn", in_channels=1, num_classes=1, image_size=8)
    with pytest.raises(ValueError, match="in_channels must be an integer >= 1, got 0"):
        build_model("small_cnn", in_channels=0, num_classes=10, image_size=8)
    with pytest.raises(ValueError, match=r"image_size must be an integer >= 1, got 8\.0"):
        build_model("small_cnn", in_channels=1, num_classes=10, image_size=8.0)
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['depth'\]"):
        build_model("small_cnn", in_channels=1, num_classes=10, image_size=8, depth=3)
    assert "resnet110" in model_names()


def test_checkpoint_round_trip():
    model = build_model("small_cnn", in_channels=1, num_classes=10, image_size=8, width=8).eval()
    checkpoint = {
        "architecture": {
            "name": "small_cnn",
            "params": {"width": 8},
            "in_channels": 1,
            "num_classes": 10,
            "image_size": 8,
        },
        "state_dict": model.state_dict(),
    }
    restored = model_from_checkpoint(checkpoint)
    x = torch.randn(4, 1, 8, 8)
    assert torch.equal(restored(x), model(x))


@pytest.mark.parametrize("channels_last", [False, True])
def test_grid_pool_passes_a_map_of_its_size_through_and_pools_any_other(channels_last):
    reference = torch.nn.AdaptiveAvgPool2d(4)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    same = torch.randn(3, 5, 4, 4, generator=torch.Generator().manual_seed(0)).to(memory_format=fmt)
    larger = torch.randn(3, 5, 9, 7, generator=torch.Generator().manual_seed(1)).to(
        memory_format=fmt
    )
    pool = GridPool(4)
    assert pool(same) is same  # skipped, not recomputed
    assert torch.equal(pool(same), reference(same))
    assert torch.equal(pool(larger), reference(larger))
    assert pool(larger).shape == (3, 5, 4, 4)


def test_small_cnn_dense_trains_exactly_as_with_a_plain_adaptive_pool():
    """Outputs and gradients are bit-identical to the network with torch's pooling module."""
    torch.manual_seed(0)
    model = build_model("small_cnn_dense", in_channels=1, num_classes=10, image_size=8)
    plain = copy.deepcopy(model)
    pools = [name for name, module in plain.named_modules() if isinstance(module, GridPool)]
    assert len(pools) == 1
    parent, _, child = pools[0].rpartition(".")
    setattr(plain.get_submodule(parent), child, torch.nn.AdaptiveAvgPool2d(8))
    assert model.state_dict().keys() == plain.state_dict().keys()
    x = torch.randn(16, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    y = torch.arange(16) % 10
    for net in (model, plain):
        torch.nn.functional.cross_entropy(net(x), y).backward()
    assert torch.equal(model(x), plain(x))
    for (name, p), q in zip(model.named_parameters(), plain.parameters()):
        assert torch.equal(p.grad, q.grad), name
