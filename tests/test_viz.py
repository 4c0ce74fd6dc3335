"""kedro-viz reads at a glance: the JSON that `kedro viz build` writes for conf/test lists
the pipelines and namespaces, has the datasets in layers, every method's box holds its
own per-run artifacts (none leaves the box to come back in), the top level has no dataset
per run, and the tags are the stages'."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
KEDRO = str(Path(sys.executable).parent / "kedro")
LAYERS = ["raw", "intermediate", "models", "model_output", "reporting"]
PER_RUN = re.compile(r"^(?P<method>\w+)\.seed_\d+\.(?P<kind>\w+)$")
# put into the catalog by hooks.RunInfoHook when a run starts, not declared in catalog.yml
UNDECLARED = {"run_info"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def viz(tmp_path_factory) -> Path:
    """The ``build/api`` folder of ``kedro viz build`` on a copy of the project (conf/test):
    kedro needs the source folder inside the project, and a copy keeps build/ out of the repo."""
    project = tmp_path_factory.mktemp("project")
    shutil.copy(PROJECT / "pyproject.toml", project / "pyproject.toml")
    shutil.copytree(PROJECT / "conf", project / "conf")
    shutil.copytree(PROJECT / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__"))
    env = {
        **os.environ,
        "DO_NOT_TRACK": "1",
        "KEDRO_DISABLE_TELEMETRY": "true",
        "KEDRO_ENV": "test",
    }
    result = subprocess.run(
        [KEDRO, "viz", "build"],
        check=False,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return project / "build" / "api"


def test_the_build_lists_pipelines_and_namespaces(viz):
    main = graph(viz, "__default__")
    pipelines = {p["id"] for p in main["pipelines"]}
    assert {"__default__", "baseline", "training", "posthoc", "reporting", "shift"} <= pipelines
    assert {"ce", "focal_gamma_3", "baseline"} <= set(main["modular_pipelines"])
    assert any("train_seed_0" in node["name"] for node in main["nodes"])


def graph(viz: Path, pipeline: str) -> dict:
    return json.loads(
        (viz / ("main" if pipeline == "__default__" else f"pipelines/{pipeline}")).read_text()
    )


def consumers_and_producers(graph_: dict) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Dataset id -> ids of the task nodes that read it, and of those that write it."""
    kinds = {n["id"]: n["type"] for n in graph_["nodes"]}
    readers: dict[str, set[str]] = {}
    writers: dict[str, set[str]] = {}
    for edge in graph_["edges"]:
        source, target = edge["source"], edge["target"]
        if kinds[source] == "task" and kinds[target] != "task":
            writers.setdefault(target, set()).add(source)
        elif kinds[target] == "task" and kinds[source] != "task":
            readers.setdefault(source, set()).add(target)
    return readers, writers


@pytest.mark.parametrize("pipeline", ["__default__", "focal_meta", "baseline"])
def test_every_dataset_is_in_a_layer_and_the_layers_follow_the_data_flow(viz, pipeline):
    graph_ = graph(viz, pipeline)
    assert graph_["layers"] == LAYERS
    data = {n["name"]: n.get("layer") for n in graph_["nodes"] if n["type"] == "data"}
    assert {name for name, layer in data.items() if layer is None} <= UNDECLARED
    for name, layer in data.items():
        assert layer == expected_layer(name), name


def expected_layer(name: str) -> str | None:
    if name == "raw_data":
        return "raw"
    if name.startswith("split_") or name == "shift_sets":
        return "intermediate"
    if name == "stored_shift_logits":
        return "model_output"
    kind = name.rsplit(".", 1)[-1]
    if kind in ("resume_states", "checkpoint"):
        return "models"
    if kind in ("history", "logits", "shift_logits", "calibrators") or kind.startswith("runs_for_"):
        return "model_output"
    if kind in ("metrics", "reliability_bins", "report") or kind.startswith("report_"):
        return "reporting"
    return None


@pytest.mark.parametrize("pipeline", ["__default__", "focal_meta", "baseline"])
def test_each_method_box_holds_its_per_run_artifacts(viz, pipeline):
    graph_ = graph(viz, pipeline)
    boxes = graph_["modular_pipelines"]
    nodes = {n["id"]: n for n in graph_["nodes"]}
    readers, writers = consumers_and_producers(graph_)
    checked = 0
    for id_, node in nodes.items():
        match = PER_RUN.match(node["name"]) if node["type"] == "data" else None
        if match is None:
            continue
        box = boxes[match["method"]]
        tasks = readers.get(id_, set()) | writers.get(id_, set())
        # every node that writes or reads a run's artifact is in the run's method box
        assert all(nodes[t]["modular_pipelines"] == [match["method"]] for t in tasks), node["name"]
        if id_ in readers:  # drawn inside the box
            assert {"id": id_, "type": "data"} in box["children"], node["name"]
        else:  # a run's final artifact no study of this pipeline reads (a history)
            assert match["kind"] == "history" and id_ in box["outputs"], node["name"]
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("pipeline", ["__default__", "focal_meta", "baseline"])
def test_no_dataset_leaves_a_box_and_comes_back_in(viz, pipeline):
    graph_ = graph(viz, pipeline)
    nodes = {n["id"]: n for n in graph_["nodes"]}
    readers, _ = consumers_and_producers(graph_)
    for name, box in graph_["modular_pipelines"].items():
        if name == "__root__":
            continue
        for output in box["outputs"]:
            back_in = [
                nodes[t]["full_name"]
                for t in readers.get(output, ())
                if name in (nodes[t]["modular_pipelines"] or [])
            ]
            assert not back_in, f"{nodes[output]['name']} leaves {name} and is read by {back_in}"


def test_a_study_reads_one_value_per_method(viz):
    graph_ = graph(viz, "focal_meta")
    nodes = {n["id"]: n for n in graph_["nodes"]}
    root = [
        nodes[c["id"]]["name"]
        for c in graph_["modular_pipelines"]["__root__"]["children"]
        if c["type"] == "data"
    ]
    methods = [
        name
        for name, box in graph_["modular_pipelines"].items()
        if name not in ("__root__", "focal_meta")
    ]
    # per method: its runs collected for the study
    assert sorted(name for name in root if ".runs_for_" in name) == sorted(
        f"{m}.runs_for_focal_meta" for m in methods
    )
    others = {name for name in root if ".runs_for_" not in name}
    # and the study's reports, its final outputs
    assert {name for name in others if not name.startswith("focal_meta.report_")} <= {
        "raw_data",
        "split_standard",
        "split_meta",
        "run_info",
        "resume_states",
    }


@pytest.mark.parametrize("pipeline", ["__default__", "focal_meta"])
def test_the_top_level_has_no_dataset_per_run_one_resume_store_feeds_every_training(viz, pipeline):
    """A dataset per (method, seed) at the top level made a row wider than the screen (one
    resume store per run): every run's state is in one store, read by each training node."""
    graph_ = graph(viz, pipeline)
    nodes = {n["id"]: n for n in graph_["nodes"]}
    root = [nodes[c["id"]]["name"] for c in graph_["modular_pipelines"]["__root__"]["children"]]
    assert not [name for name in root if PER_RUN.match(name)]
    readers, _ = consumers_and_producers(graph_)
    store = next(id_ for id_, node in nodes.items() if node["name"] == "resume_states")
    trainings = {id_ for id_, node in nodes.items() if re.search(r"train_seed_\d+$", node["name"])}
    assert trainings and readers[store] == trainings
    # and one store of the stored shift logits, read by each shift node (where there are some)
    shift_store = next(
        (id_ for id_, node in nodes.items() if node["name"] == "stored_shift_logits"), None
    )
    shifts = {
        id_ for id_, node in nodes.items() if re.search(r"shift_logits_seed_\d+$", node["name"])
    }
    assert readers[shift_store] == shifts if shifts else shift_store is None


def test_the_tags_are_the_stages(viz):
    """kedro-viz shows a tag's name title-cased ("Method.fm Fl Gamma Dece" for a per-method
    tag): the tags are the stages' (and evaluation's), one word or two each; a method is
    picked by its namespace (--namespaces, the box)."""
    from calib_pipeline.pipelines.artifacts import STAGE_ORDER

    tags = {tag["id"] for tag in graph(viz, "__default__")["tags"]}
    assert {"training", "posthoc", "reporting"} <= tags <= {*STAGE_ORDER, "evaluation"}
