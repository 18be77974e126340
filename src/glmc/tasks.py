"""Tasks: what a model is trained and evaluated on, declared by its adapter (Adapter.task) and by every data set
(`.task`). A task names the batch key of the model input and of the targets, and what one prediction is;
the loss (cross-entropy over every target that is not IGNORE_INDEX) and accuracy are the same for all of them,
so a new task is one record: `register_task` in-process, or an entry point in the group glmc.tasks naming a Task
from another package (glmc/plugins.py). Every check glmc makes on a model and its data reads the record's fields,
not the task's name, and glmc.data completes a spec and builds its data set through the record's `complete` and
`load` ("module:function" or a function).
"""

from __future__ import annotations

from dataclasses import dataclass

from glmc import plugins


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
    data_label: str = "data"  # what its data is, in messages ("text", "images")
    model_label: str = "a model"  # what a model of it is, in messages ("a language model", "a classifier")
    reads_text: bool = False  # tokenized text: a tokenizer travels with the model and bounds its vocabulary
    causal: bool = False  # predicts the next token: a context no longer than a model's learned positions
    classes: bool = False  # one prediction per example over a fixed set of classes (the head's rows)
    # what `glmc verify` compares a transformed model's loss on with random probe inputs: "next" (the next input
    # token), "same" (the input token itself, at every position) or "class" (a class index per example)
    probe_targets: str = "class"
    # the task of the models that learn it ("" : its own): a task with other data and targets for the same models
    # (repeated random tokens for a language model) names theirs, and every model of that task takes its data
    model_task: str = ""
    # complete(spec) -> the full spec (defaults filled in, unknown options refused, the source checked) and
    # load(spec, tokenizer) -> the data set (.task, .spec, .batches, .num_batches, and what its fields promise:
    # .vocab_size and .context for text, .num_classes for classes, .unigram_entropy when causal)
    complete: object = None
    load: object = None

    @property
    def models(self) -> str:
        """The task of the models that learn this one."""
        return self.model_task or self.name


BUILTIN = (
    Task("lm", "input_ids", "targets", "tokens", "causal language modelling", per_position=True, data_label="text",
         model_label="a language model", reads_text=True, causal=True, probe_targets="next",
         complete="glmc.data.spec:complete_lm", load="glmc.data.lm:load_lm"),
    Task("cls", "pixel_values", "labels", "images", "image classification", data_label="images",
         model_label="a classifier", classes=True, complete="glmc.data.spec:complete_cls",
         load="glmc.data.vision:load_images"),
    # masked language modelling (glmc/data/mlm.py): the targets are the original tokens at the masked positions
    # and IGNORE_INDEX elsewhere, so loss and accuracy count the masked positions only
    Task("mlm", "input_ids", "masked_targets", "tokens", "masked language modelling", per_position=True,
         data_label="masked-LM text", model_label="a masked language model", reads_text=True, probe_targets="same",
         complete="glmc.data.spec:complete_mlm", load="glmc.data.mlm:load_mlm"),
)
REGISTRY = plugins.Registry("task", Task, "name", BUILTIN)
register_task = REGISTRY.register


def tasks() -> dict[str, Task]:
    """Every task by name: glmc's own, then installed plugins' (entry points glmc.tasks)."""
    return REGISTRY.all()


def task(name: str) -> Task:
    known = tasks()
    if name not in known:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(known)} (a plugin's task needs its package "
                         "installed)")
    return known[name]


def task_of_batch(batch: dict) -> str:
    """The task whose input and target keys the batch holds, else the first whose input key it holds (for callers
    that pass no task)."""
    known = tasks().values()
    for t in known:
        if t.input_key in batch and t.target_key in batch:
            return t.name
    for t in known:
        if t.input_key in batch:
            return t.name
    raise ValueError(f"batch holds no task's input ({', '.join(t.input_key for t in known)}): keys "
                     f"{sorted(batch)}")
