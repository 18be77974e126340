"""Tasks: what a model is trained and evaluated on, declared by its adapter (Adapter.task) and by every data set
(`.task`). A task names the batch key of the model input and of the targets, and what one prediction is;
the loss (cross-entropy over every target that is not IGNORE_INDEX) and accuracy are the same for all of them,
so a new task is one `register_task` call here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    name: str  # "lm" | "cls" | …, as data sets and adapters name it
    input_key: str  # the glmc.data batch key the model reads
    target_key: str  # the batch key of the targets (IGNORE_INDEX where nothing is predicted)
    unit: str  # what one training sample counts as, for throughput figures ("tokens", "images")
    label: str  # for people, in error messages
    # one target per input position: a training loss may be taken from the final hidden states through the
    # output head in one pass (glmc/models/head_loss.py)
    per_position: bool = False


TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    TASKS[task.name] = task
    return task


register_task(Task("lm", "input_ids", "targets", "tokens", "causal language modelling", per_position=True))
register_task(Task("cls", "pixel_values", "labels", "images", "image classification"))
# masked language modelling (glmc/data/mlm.py): the targets are the original tokens at the masked positions and
# IGNORE_INDEX elsewhere, so loss and accuracy count the masked positions only
register_task(Task("mlm", "input_ids", "masked_targets", "tokens", "masked language modelling", per_position=True))


def task(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    return TASKS[name]


def task_of_batch(batch: dict) -> str:
    """The task whose input and target keys the batch holds, else the first whose input key it holds (for callers
    that pass no task)."""
    for t in TASKS.values():
        if t.input_key in batch and t.target_key in batch:
            return t.name
    for t in TASKS.values():
        if t.input_key in batch:
            return t.name
    raise ValueError(f"batch holds no task's input ({', '.join(t.input_key for t in TASKS.values())}): keys "
                     f"{sorted(batch)}")
