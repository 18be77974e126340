"""What an adapter is: the only code that knows a model family.

The canonical view is a flat dict of float tensors with role names. Row-vector convention, residual axis LAST:
  embed [V, d]            token embedding (GPT-2)                    — residual writer
  pos_embed [P, d]        position embedding                         — writer
  patch.w [C·p·p, d], patch.b [d], cls [1, d], registers [R, d]      — ViT writers
  blocks.{i}.ln1.w/.b [d] LayerNorm before attention
  blocks.{i}.attn.{q,k,v}.w [H, d_head, d], .b [H, d_head]           — readers (q_h = W_q,h · x + b_q,h)
  blocks.{i}.attn.o.w [H, d_head, d], .o.b [d]                       — writer (out = Σ_h z_h · W_o,h + b)
  blocks.{i}.ls1 / ls2 [d]  LayerScale (timm), folded into the writer by canonicalisation
  blocks.{i}.ln2.w/.b [d]  LayerNorm before the MLP
  blocks.{i}.mlp.in.w [n, d], .in.b [n]                              — reader
  blocks.{i}.mlp.out.w [n, d], .out.b [d]                            — writer
  ln_final.w/.b [d]        final LayerNorm
  head.w [V or classes, d], head.b                                    — reader (LM head / classifier)
Every symmetry in glmc/symmetry/spec.py is written against these names. A bias the model does not have (e.g.
qkv_bias=False) is simply absent. An adapter may add family-specific keys outside this list (timm's
blocks.{i}.attn.q_norm.w/.b); no symmetry touches them, so the adapter must list in Arch.unsupported every
class that would have to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import torch

from glmc.adapters.namemap import Layout, NameMap
from glmc.errors import UnsupportedModel  # noqa: F401  (re-exported as glmc.adapters.UnsupportedModel)
from glmc.symmetry.declarations import check_block, residual_bound, residual_norm_actions, standard_norms
from glmc.symmetry.spec import transformer_groups
from glmc.tasks import task


@dataclass(kw_only=True)
class Arch:
    """What the symmetry machinery knows of one model, by keyword (Arch(family=..., task=..., n_layer=..., ...))."""

    family: str  # the adapter's family name
    task: str  # a glmc.tasks name: "lm", "cls", "mlm"
    n_layer: int
    d_model: int
    n_head: int
    d_head: int
    d_mlp: int
    activation: str
    ln_eps: float
    # role or "rectangular" (widening) -> why it is not exact for this model (e.g. "qk" under timm's qk_norm);
    # the role's group is left out of `groups`, and asking for it raises UnsupportedModel with this reason
    unsupported: dict[str, str] = field(default_factory=dict)
    # "layernorm": writers are mean-centred and residual maps must fix the all-ones direction;
    # "rmsnorm": no centring (glmc/view/canonical.py). The default of `norms`, which says it per norm.
    norm: str = "layernorm"
    # canonical norm prefix ("blocks.{i}.ln1") -> NormSpec (glmc/symmetry/declarations.py): kind, gain, placement.
    # Empty: the standard pre-norm stack, every norm of kind `norm` with a plain gain.
    norms: dict = field(default_factory=dict)
    # "sequential" | "parallel" (attention and MLP read the same stream; glmc/symmetry/declarations.py)
    block: str = "sequential"
    # role -> GroupSpec (glmc/symmetry/spec.py): what each symmetry group is for this model, in application
    # order. Empty: the standard pre-norm Transformer groups, less the unsupported roles. An adapter restricts a
    # group by declaring another kind or batch structure for its role.
    groups: dict = field(default_factory=dict)
    # the native weight-matching alternation `glmc align` uses by default for this family ("glmc" or "paper";
    # glmc/matching/weight.py ALGORITHMS), chosen per family on the validation split of the tuning pairs
    weight_matching: str = "glmc"
    # canonical key template -> role in the barrier decomposition, for keys of the family's own that
    # glmc/symmetry/parts.py's declarations and rules would misplace ({}: those suffice)
    part_roles: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):

        check_block(self.block)
        if not self.norms:
            self.norms = standard_norms(self.norm)
        if not self.groups:
            residual = "orthogonal-fixing-ones" if self.norm == "layernorm" else "orthogonal"
            # norms on the stream's coordinates leave (signed) permutations only (glmc/symmetry/declarations.py)
            residual = residual_bound(self.norms) or residual
            self.groups = transformer_groups(self.d_model, self.n_head, self.d_head, self.d_mlp, self.relu,
                                             residual, drop=self.unsupported)
        stream_rows = residual_norm_actions(self.norms)
        if stream_rows and "residual" in self.groups:  # their gains and biases are residual tensors
            spec = self.groups["residual"]
            extra = tuple(a for a in stream_rows if a not in spec.acts)
            self.groups = {**self.groups, "residual": replace(spec, acts=spec.acts + extra)}

    @property
    def centred_stream(self) -> bool:
        """Whether every reader sees the stream through a mean-subtracting norm (so writers may be centred): there
        are norms before the sublayers and all of them subtract the mean. A post-norm model's readers see the
        stream itself, which a LayerNorm's bias moves off mean zero."""
        inputs = [n for n in self.norms.values() if n.placement == "input"]
        return bool(inputs) and all(n.centres for n in inputs)

    @property
    def relu(self) -> bool:
        return self.activation == "relu"

    def to_dict(self):
        return asdict(self)


@dataclass(frozen=True)
class TrainOption:
    """A `glmc train` option of one family, declared as data (glmc/cli/train.py turns it into a click option).
    The value lands in the run's merged settings under `name`: a build() keyword (model_options), a data spec
    field the adapter's train_data reads, or a TrainConfig field."""

    name: str  # python name; the flag is --name with "_" → "-"
    # "count" (int ≥ 1) | "int" (≥ minimum) | "fraction" (float in (0, 1]) | "choice" | "switch" (--name/--off) |
    # "text"
    type: str = "count"
    help: str = ""
    choices: tuple = ()
    default: object = None  # None: take it from the preset
    minimum: int = 1  # "int" only
    off: str = ""  # "switch" only: the negative flag's name (tied → untied)


LM_TEXT = ("shakespeare", "shakespeare, python-stdlib (a code corpus) or text:PATH.")
LM_OPTIONS = (TrainOption("tokenizer", "text", "char, gpt2 or bpe:N [preset: char]."),
              TrainOption("context", "count", "Context length in tokens."))


def _char_shakespeare(context: int) -> dict:
    return {"source": "shakespeare", "tokenizer": "char", "context": context}


def text_spec(p: dict, given: set, log) -> dict:
    """A `glmc train` run's data spec on text: the source, tokenizer and context the settings name."""
    return {"source": p["data"], "tokenizer": p["tokenizer"], "context": p["context"]}


def plain_reading(model, source: str, tokenizer_dir) -> None:
    """A model reads a text source given on the command line under the plain spec (glmc.data.parse_spec)."""
    return None


def text_shape(ds) -> dict:
    """The build() sizes a data set of language models decides: vocabulary and context."""
    if task(ds.task).models != "lm":
        raise ValueError(f"a language model needs text data, got {ds.spec['source']}")
    return {"vocab_size": ds.vocab_size, "context": ds.context}


@dataclass(frozen=True, kw_only=True)
class Training:
    """What `glmc train` and `glmc demo` need of a family, declared apart from the symmetry machinery (an adapter
    holds one as `training`; a subclass changes a few fields with `replace(Parent.training, ...)`).

    command: `glmc train <command>` (glmc/cli/train.py makes one sub-command per name; default: the family);
        adapters sharing a command are told apart by `--family <variant>` (the first one is the default).
    help: the sub-command's help. data: (default --data, its help). options: flags beyond the shared ones.
    presets: preset -> build() options and TrainConfig fields (--preset). model_options: the build() keywords a
        user chooses (data_shape() gives the rest).
    demo_shape, demo_label: `glmc demo --family <family>`'s build() options of the two models it trains and what
        to call them (empty: no demo); demo_data(context): the data spec it trains on.
    data_spec(p, given, log): the glmc.data spec a `glmc train` run reads, from the merged settings `p` (preset +
        options), which it may complete or refuse (raise BadOption); `given`: the names the user set; `log(msg)`
        tells the user. data_shape(ds): the build() sizes a data set decides (vocabulary, context, image size,
        classes). reading(model, source, tokenizer_dir): the data spec under which a model reads a text source given
        on the command line (--data) when that is not the plain one (an encoder's masked-LM blocks, with the
        tokenizer saved in `tokenizer_dir`); None: the plain spec.
    head_loss: the logits are exactly the output embedding's linear map of the final hidden states (no scaling or
        soft-capping after it), so a training or evaluation loss may be taken from the hidden states in chunks
        (glmc/models/head_loss.py; glmc.adapters.output_head finds the module).
    """

    command: str = ""
    variant: str | None = None
    help: str = ""
    data: tuple[str, str] = LM_TEXT
    options: tuple[TrainOption, ...] = ()
    presets: dict = field(default_factory=dict)
    model_options: tuple[str, ...] = ()
    demo_shape: dict = field(default_factory=dict)
    demo_label: str = ""
    demo_data: object = _char_shakespeare
    head_loss: bool = False
    data_spec: Callable[[dict, set, Callable], dict] = text_spec
    data_shape: Callable[[object], dict] = text_shape
    reading: Callable[..., dict | None] = plain_reading


class Adapter:
    """Everything glmc knows about one model family, in 21 members (tests/meta/test_adapter_contract.py keeps it
    narrow): which models it serves and refuses (`matches`, `check_supported`), the symmetry machinery's view of
    them (`arch`, and the canonical view and back through one declarative name map, `names`), building one, its
    native call on a glmc.data batch and probe inputs, activation hook points, the circuit form's I/O; and two
    declared parts for the rest: `checkpoint` (its directories: glmc/adapters/checkpoints.py) and `training` (what
    `glmc train` and `glmc demo` need: Training above). Shared behaviour comes from parts mixed in beside this base
    (TokenLM, RotaryLM) and at most two levels of subclasses (RoPEDecoderAdapter and its families); what every
    family does alike is a function of the adapter (logits, batch_of, untied, canonical_shapes below)."""

    family: str = ""
    task: str = ""  # a glmc.tasks name ("lm", "cls", "mlm"): the record names the batch keys the model reads
    names: NameMap | None = None  # native ⇄ canonical, read both ways by to_canonical and native_state
    label: str = ""  # the family's name for people ("GPT-2"), for error messages
    # its checkpoint directories: which it claims, what they hold, how they are read and written
    # (glmc/adapters/checkpoints.py: HFCheckpoint, FileCheckpoint)
    checkpoint = None
    training: Training = Training()  # what glmc train and glmc demo need (not the symmetry machinery)

    @staticmethod
    def matches(model) -> bool:
        raise NotImplementedError

    def check_supported(self, model) -> None:
        """Raise UnsupportedModel naming the feature glmc cannot transform exactly."""

    def arch(self, model) -> Arch:
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------ canonical view

    def layout(self, model) -> Layout:
        """The model-specific part of `names`: block count, names that vary by class, converter sizes."""
        raise NotImplementedError

    def to_canonical(self, model, copy=None, after=None) -> dict[str, torch.Tensor]:
        """The model's canonical view, sharing no memory with it (`copy`, `after`: NameMap.to_canonical)."""
        self.check_supported(model)
        return self.names.to_canonical(model.state_dict(), self.layout(model), copy, after)

    def native_state(self, view: dict[str, torch.Tensor], model, consume: bool = False) -> dict[str, torch.Tensor]:
        """The native parameters (name → tensor) that hold `view` in a model shaped like `model`; built from
        differentiable tensor ops only, so learned matching can back-propagate through it. `consume`: pop the
        view's tensors as they are used (NameMap.to_native)."""
        return self.names.to_native(view, self.layout(model), consume)

    def from_canonical(self, view: dict[str, torch.Tensor], model, ln_eps: float | None = None,
                       consume: bool = False):
        """A new native model of the same family holding `view` (shapes may differ from `model`'s: wider
        layers, an untied head, a rescaled LayerNorm eps). `model` itself is not modified. With `consume` the
        caller gives the view up: its tensors are popped as the model is built, and may become its parameters."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------ models and files

    def build(self, **shape):
        """A freshly initialised model of this family (uses the global torch RNG: seed it first)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------ running

    def native_inputs(self, model, batch: dict) -> tuple[tuple, dict]:
        """(positional args, keyword args) of the native forward call for a glmc.data batch."""
        raise NotImplementedError

    def output_logits(self, model, out) -> torch.Tensor:
        """The invariant output (logits) of a native forward result."""
        return out.logits if hasattr(out, "logits") else out

    def side_outputs(self, model, batch: dict) -> dict[str, torch.Tensor]:
        """Outputs besides the logits that a symmetry must also keep (BertForPreTraining's next-sentence logits):
        `glmc verify` compares them too. Empty for most models."""
        return {}

    def probe_inputs(self, model, n: int = 2, seq: int = 32, gen: torch.Generator | None = None) -> torch.Tensor:
        """Random CPU inputs the model accepts (token ids or pixels), for function-preservation checks."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------ alignment

    def hook_modules(self, model) -> dict:
        """Modules whose activations activation matching reads: "blocks.{i}" (output: the residual stream after
        block i), "blocks.{i}.attn.o" and "blocks.{i}.mlp.out" (inputs: per-head outputs concatenated, MLP hidden
        units)."""
        raise NotImplementedError(f"{self.family} adapter exposes no activation hooks")

    def io_spec(self, model) -> dict:
        """What glmc's circuit-form model (glmc/view/circuit.py) needs to know about inputs and outputs: "input"
        ("tokens" | "patches", with "channels" and "patch"), "causal", "pool" ("none" | "cls" | "avg") and an
        "activation" name from transformers' ACT2FN. Raise UnsupportedModel for variants it cannot express."""
        raise UnsupportedModel(f"the {self.family} adapter has no circuit form")

    def is_tied(self, model) -> bool:
        """Whether the output head shares its weights with the token embedding."""
        return False


def canonical_shapes(adapter: Adapter, model) -> dict[str, tuple]:
    """The shape of every tensor of the model's canonical view, without reading a weight (meta tensors)."""
    adapter.check_supported(model)
    state = {k: v.to("meta") for k, v in model.state_dict().items()}
    return {k: tuple(v.shape) for k, v in adapter.names.to_canonical(state, adapter.layout(model), lambda t: t).items()}


def untied(adapter: Adapter, model):
    """The same function with an untied head (needed to interpolate a tied with an untied model): rebuilt from the
    canonical view when the adapter says the head is tied (Adapter.is_tied), else the model itself."""
    return adapter.from_canonical(adapter.to_canonical(model), model, tie=False) if adapter.is_tied(model) else model


def batch_of(adapter: Adapter, inputs: torch.Tensor) -> dict:
    """A batch holding only the model input (what Adapter.probe_inputs returns), under its task's input key."""
    return {task(adapter.task).input_key: inputs}


def logits(adapter: Adapter, model, batch: dict, params: dict | None = None) -> torch.Tensor:
    """The model's logits for a glmc.data batch (Adapter.native_inputs, Adapter.output_logits); with `params`, those
    tensors replace the model's own (through torch.func.functional_call, so the model is not modified and gradients
    reach `params`)."""
    args, kwargs = adapter.native_inputs(model, batch)
    out = model(*args, **kwargs) if params is None else torch.func.functional_call(model, params, args, kwargs)
    return adapter.output_logits(model, out)
