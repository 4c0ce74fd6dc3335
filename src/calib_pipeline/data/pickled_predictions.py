"""Convert a pickled predictions file (arrays in a tuple, list or dict) to ``.npz`` safely.

Some public prediction files are pickles -- Kumar et al.'s ``cifar_probs.dat`` holds a
``(probabilities, labels)`` tuple of NumPy arrays -- and loading a pickle can run any code
its author put in it. This reader unpickles with an allow-list: the only globals a file may
name are the ones NumPy needs to rebuild an array (``ndarray``, ``dtype`` and their
reconstructors); any other global is refused by name before it is looked up, so nothing
from the file is ever called but those. The arrays are then written as an ``.npz`` that the
``score`` pipeline reads with ``allow_pickle=False``::

    python -m calib_pipeline.data.pickled_predictions cifar_probs.dat cifar.npz \\
        --names test_probs,test_labels

(A file with one split, as that one, then needs a val part: docs/predictions.md.)
"""

from __future__ import annotations

import argparse
import io
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# (module, name) of every global a pickled NumPy array may refer to, under NumPy 1 and 2:
# rebuilding an array and its dtype, or an array from a buffer (protocol 5), and
# _codecs.encode, with which protocols <= 2 write the bytes of an array's data
SAFE_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("_codecs", "encode"),
    }
)


class _ArraysOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in SAFE_GLOBALS:
            raise ValueError(
                f"refers to {module}.{name}, which is not part of a NumPy array; it was not "
                "loaded (only arrays in tuples, lists and dicts are read)"
            )
        return super().find_class(module, name)


def read_pickled_arrays(path: str | Path) -> Any:
    """The arrays (in tuples, lists or dicts) of a pickle, unpickled with the allow-list.

    Python 2 pickles (common for older public files) are read with ``latin1`` strings, as
    NumPy's own loader does for them.

    Raises:
        ValueError: the file names any other global, or is not a pickle; the message starts
            with the file's path.
    """
    path = Path(path)
    try:
        return _ArraysOnly(io.BytesIO(path.read_bytes()), encoding="latin1").load()
    except ValueError as error:
        raise ValueError(f"pickled predictions {path}: {error}") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, TypeError) as error:
        raise ValueError(f"pickled predictions {path}: not a readable pickle ({error})") from None


def named_arrays(content: Any, names: Sequence[str] | Mapping[str, str]) -> dict[str, np.ndarray]:
    """The arrays of ``content`` under the ``.npz`` key names they get.

    Args:
        content: a tuple or list of arrays, or a dict of them.
        names: for a tuple or list, one key per element, in order; for a dict, its keys ->
            the new keys (keys left out are not written).

    Raises:
        ValueError: a count or key that does not match, or an element that is not a numeric
            array.
    """
    if isinstance(content, Mapping):
        if not isinstance(names, Mapping):
            raise ValueError(
                f"the file holds a dict with keys {sorted(content)}: map them, key=new"
            )
        missing = sorted(set(names) - set(content))
        if missing:
            raise ValueError(f"the file has no key(s) {missing}; it has {sorted(content)}")
        chosen = {new: content[old] for old, new in names.items()}
    elif isinstance(content, (tuple, list)):
        if isinstance(names, Mapping) or len(names) != len(content):
            raise ValueError(
                f"the file holds {len(content)} arrays in order: give {len(content)} names"
            )
        chosen = dict(zip(names, content, strict=True))
    else:
        raise ValueError(
            f"the file holds a {type(content).__name__}, not arrays in a tuple, list or dict"
        )
    for key, value in chosen.items():
        if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.number):
            raise ValueError(f"{key} is a {type(value).__name__}, not a numeric array")
    return chosen


def _names(text: str) -> list[str] | dict[str, str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if all("=" in item for item in items):
        return dict(item.split("=", 1) for item in items)
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m calib_pipeline.data.pickled_predictions",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("source", type=Path, help="the pickled file")
    parser.add_argument("target", type=Path, help="the .npz to write")
    parser.add_argument(
        "--names", required=True,
        help="key names: one per array for a tuple/list (test_probs,test_labels), or "
        "old=new pairs for a dict",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.target.suffix != ".npz":
        parser.error(f"{args.target}: the target must be an .npz file")
    try:
        arrays = named_arrays(read_pickled_arrays(args.source), _names(args.names))
    except ValueError as error:
        parser.error(str(error))
    np.savez(args.target, **arrays)
    shapes = ", ".join(f"{key} {value.shape}" for key, value in arrays.items())
    print(f"wrote {args.target}: {shapes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
