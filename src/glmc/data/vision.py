"""Image-classification data: splits, normalisation and augmentation over the raw sources of images.py.

Batches are ``{"pixel_values": float32 [B, C, H, W], "labels": int64 [B]}``.
- Validation: the source's own validation split where it has one (MNIST), otherwise carved from the end of
  the training set: the last 5,000 images for the big sets (whose order is already random), every 10th
  image for small ones and folders (whose order follows the classes). Recorded in the spec as "val".
- Normalisation: per-channel mean/std of the training split, recorded in the spec so that a later
  ``load(spec)`` uses the very same numbers.
- Augmentation ("crop-flip", default for CIFAR): zero-pad 4 pixels, random crop back, random horizontal flip,
  on training batches only; "none" for digit-like data.
"""

import numpy as np
import torch

from .sources import source_of

BIG_VAL = 5000


class ImageDataset:
    task = "cls"

    def __init__(self, spec: dict, splits: dict, class_names: list, max_value: int):
        self.spec = spec
        self.splits = {k: (torch.from_numpy(x), torch.from_numpy(y)) for k, (x, y) in splits.items()}
        self.class_names = class_names
        self.max_value = max_value
        self.mean = torch.tensor(spec["normalize"]["mean"], dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(spec["normalize"]["std"], dtype=torch.float32)[:, None, None]

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def channels(self) -> int:
        return int(self.splits["train"][0].shape[1])

    @property
    def image_size(self) -> int:
        return int(self.splits["train"][0].shape[2])

    def num_examples(self, split: str) -> int:
        return len(self._split(split)[1])

    def _split(self, split: str):
        if split not in self.splits:
            raise ValueError(f"unknown split {split!r}; expected one of {tuple(self.splits)}")
        return self.splits[split]

    def num_batches(self, split: str, batch_size: int, *, shuffle=None) -> int:
        n = self.num_examples(split)
        if shuffle if shuffle is not None else split == "train":
            return max(1, n // batch_size)
        return -(-n // batch_size)

    def batches(self, split: str, batch_size: int, *, max_batches=None, seed=None, shuffle=None, augment=None):
        """One pass over `split`: shuffled, last partial batch dropped, augmented for training (the default for
        "train"); in order with every example exactly once otherwise."""
        x, y = self._split(split)
        shuffle = split == "train" if shuffle is None else shuffle
        augment = (shuffle and self.spec["augment"] != "none") if augment is None else augment
        g = torch.Generator().manual_seed(0 if seed is None else int(seed))
        order = torch.randperm(len(y), generator=g) if shuffle else torch.arange(len(y))
        count = self.num_batches(split, batch_size, shuffle=shuffle)
        for i in range(count if max_batches is None else min(count, max_batches)):
            idx = order[i * batch_size:(i + 1) * batch_size]
            images = x[idx]
            if augment:
                images = crop_flip(images, g)
            yield {"pixel_values": self.normalize(images), "labels": y[idx]}

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        return (images.float() / self.max_value - self.mean) / self.std

    def describe(self) -> str:
        sizes = ", ".join(f"{k} {self.num_examples(k):,}" for k in ("train", "val", "test"))
        rule = f"; splits: {self.spec['split_rule']}" if "split_rule" in self.spec else ""
        return (f"{self.spec['source']}: {self.num_classes} classes, {self.channels}x{self.image_size}x"
                f"{self.image_size}, {sizes} images{rule}")


def crop_flip(images: torch.Tensor, g: torch.Generator, pad: int = 4) -> torch.Tensor:
    """Random crop after zero padding and random horizontal flip, per image (uint8 in, uint8 out)."""
    n, _, h, w = images.shape
    padded = torch.nn.functional.pad(images, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=g).tolist()
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=g).tolist()
    flip = torch.rand(n, generator=g).lt(0.5).tolist()
    out = torch.empty_like(images)
    for i in range(n):
        crop = padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w]
        out[i] = crop.flip(-1) if flip[i] else crop
    return out


def carve_val(splits: dict, rule: str) -> dict:
    """Take the validation split out of "train" by `rule`: 'given', 'last:N' or 'every:K'."""
    if rule == "given":
        if "val" not in splits:
            raise ValueError("val rule 'given' but the source has no validation split")
        return splits
    x, y = splits["train"]
    kind, _, n = rule.partition(":")
    if kind == "last":
        val = np.arange(len(y)) >= len(y) - int(n)
    elif kind == "every":
        val = np.arange(len(y)) % int(n) == int(n) - 1
    else:
        raise ValueError(f"unknown val rule {rule!r}")
    if val.all() or not val.any():
        raise ValueError(f"val rule {rule!r} leaves an empty split for {len(y)} training images")
    return dict(splits, train=(x[~val], y[~val]), val=(x[val], y[val]))


def default_val_rule(splits: dict) -> str:
    if "val" in splits:
        return "given"
    return f"last:{BIG_VAL}" if len(splits["train"][1]) >= 10 * BIG_VAL else "every:10"


def channel_stats(x: np.ndarray, max_value: int) -> dict:
    """Per-channel mean and std of uint8 images scaled to [0, 1], rounded for JSON.

    Computed from a histogram of the 256 pixel values: exact, and no float copy of the whole set."""
    means, stds = [], []
    values = np.arange(256, dtype=np.float64) / max_value
    for c in range(x.shape[1]):
        p = np.bincount(x[:, c].ravel(), minlength=256) / x[:, c].size
        mean = float((p * values).sum())
        means.append(round(mean, 6))
        stds.append(round(float(np.sqrt((p * (values - mean) ** 2).sum())), 6))
    return {"mean": means, "std": stds}


def load_images(spec: dict, tokenizer=None) -> ImageDataset:
    record = source_of(spec["source"])
    if record.read_images is None:
        raise ValueError(f"data {spec['source']!r} is not an image source")
    raw = record.read_images(spec)
    rule = spec.get("val") or default_val_rule(raw.splits)
    splits = carve_val(raw.splits, rule)
    full = dict(spec, val=rule, num_classes=len(raw.class_names), channels=int(splits["train"][0].shape[1]),
                n_images={k: int(len(v[1])) for k, v in splits.items()})
    if "image_size" in raw.notes:
        full["image_size"] = raw.notes["image_size"]
    if "split_rule" in raw.notes:
        full["split_rule"] = raw.notes["split_rule"]
    if "normalize" not in full:
        full["normalize"] = channel_stats(splits["train"][0], raw.max_value)
    return ImageDataset(full, splits, raw.class_names, raw.max_value)
