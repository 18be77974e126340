"""Loss and accuracy of a model on batches from glmc.data, for every family an adapter handles.

- LM (task "lm", batches with ``input_ids`` and already-shifted ``targets``): mean token-level cross-entropy
  in nats and next-token accuracy (argmax == target), over every target token.
- Classification (task "cls", ``pixel_values`` and ``labels``): mean cross-entropy and top-1 accuracy.

Logits are cast to float32 before the loss, and sums are accumulated in float64, so a given model and batch
sequence always gives the same numbers. ``loss_and_correct`` takes optional ``params`` so callers can
evaluate substituted parameters (interpolations, aligned copies) through ``torch.func.functional_call``
without copying the model.

Under a multi-process launch (glmc/distributed.py) `summed` and `evaluate` give each process its share of every
batch and add the sums across processes: every process gets the single-process figures, up to the order of float
additions.
"""

import contextlib

import torch
import torch.nn.functional as F

from glmc import distributed, tasks
from glmc.adapters import forward, output_head
from glmc.models.head_loss import linear_cross_entropy
from glmc.tasks import task_of_batch

IGNORE_INDEX = -100


def model_device(model) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def forward_logits(model, batch: dict, params=None) -> torch.Tensor:
    """Logits for a batch; the model's adapter maps the batch to its native call (glmc.adapters.forward)."""
    return forward(model, batch, params)


def loss_and_correct(model, batch: dict, task=None, params=None, device=None):
    """(summed cross-entropy as a 0-d float32 tensor, number correct as a 0-d tensor, number of predictions).

    Grad mode is left to the caller (training differentiates through the loss)."""
    task = task or task_of_batch(batch)
    batch = _on(device or model_device(model), batch)
    logits = forward_logits(model, batch, params).float()
    target = batch[tasks.task(task).target_key]
    logits = logits.reshape(-1, logits.shape[-1])
    target = target.reshape(-1)
    loss = F.cross_entropy(logits, target, reduction="sum", ignore_index=IGNORE_INDEX)
    counted = target != IGNORE_INDEX  # padding and prompts in the caller's own batches (Hugging Face style)
    correct = ((logits.argmax(-1) == target) & counted).sum()
    return loss, correct, int(counted.sum())


def training_loss(model, batch: dict, task=None, params=None, device=None):
    """(summed cross-entropy, number of predictions) for a training step: loss_and_correct's loss without the
    accuracy; for a language model with a linear head, computed from the final hidden states in one pass over the
    logits (glmc/models/head_loss.py), which is what makes a large vocabulary's step cheaper."""
    task = task or task_of_batch(batch)
    device = device or model_device(model)
    head = output_head(model) if tasks.task(task).per_position and not torch.is_autocast_enabled(device.type) else None
    if head is None:  # low precision keeps the logits' usual path, where autocast chooses each op's dtype
        loss, _, n = loss_and_correct(model, batch, task, params, device)
        return loss, n
    name, module = head
    batch = _on(device, batch)
    with _passing_through(module):
        hidden = forward_logits(model, batch, params)
    weight, bias = (_substituted(model, params or {}, t) for t in (module.weight, module.bias))
    target = batch[tasks.task(task).target_key].reshape(-1)
    loss = linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), weight, bias, target, IGNORE_INDEX)
    return loss, int((target != IGNORE_INDEX).sum())


def _on(device, batch: dict) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _substituted(model, params: dict, tensor):
    """What `params` puts in place of one of the model's parameters, under any of its names (a tied head's weight
    is the embedding's, which is the name `params` holds), or the parameter itself."""
    if tensor is None:
        return None
    names = (n for n, p in model.named_parameters(remove_duplicate=False) if p is tensor)
    return next((params[n] for n in names if n in params), tensor)


@contextlib.contextmanager
def _passing_through(module):
    """Within the block, `module` returns its input: the model's output is then its final hidden states."""
    module.forward = lambda x, *args, **kwargs: x
    try:
        yield
    finally:
        del module.forward  # the instance attribute: the class's forward is back


def summed(model, batches, task=None, params=None, device=None, accuracy: bool = True) -> tuple[float, int, int]:
    """(summed loss, number correct, number of predictions) over an iterable of batches; under a multi-process
    launch, this process's share of each batch, added up over the processes. Grad mode is left to the caller.
    Without `accuracy` the number correct is 0 and the loss is training_loss's (cheaper for a large vocabulary)."""
    total, correct, n = 0.0, 0, 0
    for batch in batches:
        part = distributed.shard(batch)
        if not distributed.rows(part):  # a batch with fewer rows than processes
            continue
        if accuracy:
            loss, right, count = loss_and_correct(model, part, task, params, device)
        else:
            (loss, count), right = training_loss(model, part, task, params, device), 0
        total += float(loss)
        correct += int(right)
        n += count
    if distributed.launched():
        total, right, count = distributed.all_sum([total, correct, n])
        correct, n = int(right), int(count)
    return total, correct, n


@torch.no_grad()
def evaluate(model, batches, task=None, params=None) -> dict:
    """{"loss": mean loss, "acc": accuracy, "n": predictions counted} over an iterable of batches.

    The model is put in eval mode for the pass and restored to its previous mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        total, correct, n = summed(model, batches, task, params)
    finally:
        model.train(was_training)
    if n == 0:
        raise ValueError("evaluate got no batches")
    return {"loss": total / n, "acc": correct / n, "n": n}
