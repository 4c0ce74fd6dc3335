"""Wheels for a GPU node without a package index: what the project and
``benchmarks/gpu_pipeline.py`` need beyond the node's own PyTorch.

GPU compute nodes often have no internet. On a machine that has it:

    python benchmarks/gpu_wheels.py --python-version 3.12 --dest wheels   # downloads
    python benchmarks/gpu_wheels.py --print-requirements                  # the list only

then copy ``wheels/`` and the checkout to the node and there:

    python -m pip install --no-index --find-links wheels -r wheels/requirements.txt
    PYTHONPATH=src python benchmarks/gpu_pipeline.py

The requirements are the project's own (``pyproject.toml``: its dependencies and the ``gpu``
extra, dask-cuda with it) less ``torch``/``torchvision`` -- the node's CUDA build is kept,
and the project runs from ``src`` on ``PYTHONPATH`` rather than being installed, since
installing it would ask for the pinned CPU build of torch -- and less ``kedro-viz`` (a UI).
``antlr4-python3-runtime`` (omegaconf's parser runtime) is published as a source archive
only; it is built here into a pure-Python wheel, which installs on any Python.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEPT_ON_THE_NODE = {"torch", "torchvision"}
NOT_NEEDED = {"kedro-viz"}
SOURCE_ONLY = ["antlr4-python3-runtime==4.9.3"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def project_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].strip().lower()


def node_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The project's dependencies and its ``gpu`` extra, without what the node keeps (its
    torch) or does not need; each once."""
    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["gpu"]]
    kept, seen = [], set()
    for requirement in wanted:
        name = project_name(requirement)
        if name in KEPT_ON_THE_NODE | NOT_NEEDED or name in seen:
            continue
        seen.add(name)
        kept.append(requirement)
    return kept


def download(python_version: str, dest: Path) -> None:
    """Build the source-only wheel, then download binary wheels of every requirement (and
    theirs) for ``python_version`` on x86-64 Linux; writes ``dest/requirements.txt``."""
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(dest), *SOURCE_ONLY], check=True)
    platforms = [option for p in PLATFORMS for option in ("--platform", p)]
    requirements = node_requirements()
    target = ["--python-version", python_version, "--implementation", "cp", *platforms]
    found = ["--find-links", str(dest), "-d", str(dest)]
    subprocess.run(
        [*pip, "download", "--only-binary=:all:", *target, *found, *requirements], check=True
    )
    (dest / "requirements.txt").write_text("\n".join(requirements) + "\n")
    print(f"{len(list(dest.glob('*.whl')))} wheels in {dest}; on the node:")
    print(f"  python -m pip install --no-index --find-links {dest} -r {dest}/requirements.txt")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-version", default="3.12", help="the node's Python (3.12)")
    parser.add_argument("--dest", type=Path, default=Path("wheels"))
    parser.add_argument("--print-requirements", action="store_true", help="list, download none")
    args = parser.parse_args()
    if args.print_requirements:
        print("\n".join(node_requirements()))
        return 0
    download(args.python_version, args.dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
