"""timm VisionTransformer ⇄ canonical view.

Native layout (nn.Linear, weight [out, in]):
  patch_embed.proj Conv2d(C, d, p, stride p) [d, C, p, p]; cls_token [1, 1, d]; reg_token [1, R, d];
  pos_embed [1, L, d] (L = prefix tokens + patches, or patches only with no_embed_class)
  blocks.{i}.norm1 / norm2 (LayerNorm); blocks.{i}.attn.qkv [3·H·d_head, d]: rows q | k | v, head-major in each;
  blocks.{i}.attn.q_norm / k_norm (qk_norm: LayerNorm over d_head, shared by all heads);
  blocks.{i}.attn.proj [d, H·d_head]; blocks.{i}.ls1.gamma / ls2.gamma (LayerScale, init_values);
  blocks.{i}.mlp.fc1 [n, d], fc2 [d, n]; norm (final LayerNorm before pooling) or fc_norm (after pooling,
  the default with global_pool='avg'); head [classes, d].
Pooling: 'token' reads the class token; 'avg' averages tokens, which commutes with every residual map and
keeps mean-centred streams mean-centred. Both are exact.
qk_norm: q_norm / k_norm act per head after the projection. Residual maps, head permutations (the norm is
shared by all heads), OV maps and MLP maps stay exact; per-head QK maps do not (they do not commute with the
normalisation), nor does widening (zero-padding d_head changes the norm's statistics, and timm builds q_norm
with the residual norm_layer, so the rescaled eps would reach it). Both are listed in Arch.unsupported. The
q_norm / k_norm parameters travel in the view as blocks.{i}.attn.q_norm.w/.b and k_norm.w/.b, untouched.
On disk: glmc/adapters/timm_config.py.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import torch
from torch import nn

from glmc.adapters.base import Adapter, Arch, UnsupportedModel
from glmc.adapters.checkpoints import FileCheckpoint
from glmc.adapters.common import (
    VIT_OPTIONS,
    VIT_PRESETS,
    VIT_TRAINING,
    assign_state,
    check_heads,
    check_patch,
    vit_data_spec,
)
from glmc.adapters.namemap import (
    CONV_PATCH,
    HEAD_COLUMNS,
    QKV_BIAS,
    QKV_ROWS,
    TRANSPOSE,
    UNBATCH,
    Entry,
    Layout,
    NameMap,
    layer_norm,
)
from glmc.adapters.timm_config import TIMM_CONFIG, activation_name, load_timm, save_timm, timm_from_kwargs, timm_kwargs
from glmc.tasks import task

_B = "blocks.{i}."
NAMES = NameMap([
    Entry("patch.w", "patch_embed.proj.weight", CONV_PATCH),
    Entry("patch.b", "patch_embed.proj.bias"),
    Entry("cls", "cls_token", UNBATCH, optional=True),
    Entry("registers", "reg_token", UNBATCH, optional=True),
    Entry("pos_embed", "pos_embed", UNBATCH, optional=True),
    Entry(("blocks.{i}.attn.q.w", "blocks.{i}.attn.k.w", "blocks.{i}.attn.v.w"), _B + "attn.qkv.weight", QKV_ROWS),
    Entry(("blocks.{i}.attn.q.b", "blocks.{i}.attn.k.b", "blocks.{i}.attn.v.b"), _B + "attn.qkv.bias", QKV_BIAS,
          optional=True),
    *layer_norm("blocks.{i}.attn.q_norm", _B + "attn.q_norm", optional=True),
    *layer_norm("blocks.{i}.attn.k_norm", _B + "attn.k_norm", optional=True),
    Entry("blocks.{i}.attn.o.w", _B + "attn.proj.weight", HEAD_COLUMNS),
    Entry("blocks.{i}.mlp.in.w", _B + "mlp.fc1.weight"),
    Entry("blocks.{i}.mlp.out.w", _B + "mlp.fc2.weight", TRANSPOSE),
    Entry("blocks.{i}.attn.o.b", _B + "attn.proj.bias", optional=True),
    Entry("blocks.{i}.mlp.in.b", _B + "mlp.fc1.bias", optional=True),
    Entry("blocks.{i}.mlp.out.b", _B + "mlp.fc2.bias", optional=True),
    Entry("blocks.{i}.ls1", _B + "ls1.gamma", optional=True),
    Entry("blocks.{i}.ls2", _B + "ls2.gamma", optional=True),
    *layer_norm("blocks.{i}.ln1", _B + "norm1"),
    *layer_norm("blocks.{i}.ln2", _B + "norm2"),
    *layer_norm("ln_final", "{final_norm}"),
    Entry("head.w", "head.weight"),
    Entry("head.b", "head.bias"),
])

QK_NORM_UNSUPPORTED = {
    "qk": "qk_norm normalises each head's queries and keys after the projection, so an invertible map on the "
          "query/key dimension does not commute with it",
    "rectangular": "widening zero-pads d_head, which changes qk_norm's per-head statistics, and timm builds "
                   "q_norm/k_norm with the residual norm_layer, so the rescaled LayerNorm eps would reach them",
}


def _is_ln(m: nn.Module) -> bool:
    return isinstance(m, nn.LayerNorm) and m.weight is not None and m.bias is not None and len(m.normalized_shape) == 1


def final_norm_key(model) -> str:
    """'norm' or 'fc_norm': whichever of timm's two final norms is the LayerNorm."""
    return "norm" if _is_ln(model.norm) else "fc_norm"


class TimmViTAdapter(Adapter):
    family = "timm-vit"
    task = "cls"
    names = NAMES
    label = "timm ViT"
    checkpoint = FileCheckpoint(config_file=TIMM_CONFIG, config_format="timm", reader=load_timm, writer=save_timm,
                                native_classes=("VisionTransformer",),
                                format=f"{TIMM_CONFIG} + model.safetensors (glmc's timm format)")
    training = replace(VIT_TRAINING,
        presets=VIT_PRESETS,
        model_options=VIT_OPTIONS + ("pool",),
        variant="timm",
        data_spec=partial(vit_data_spec, variant="timm", pools={"cls": "token", "avg": "avg"}))

    @staticmethod
    def matches(model) -> bool:
        return type(model).__name__ == "VisionTransformer" and type(model).__module__.startswith("timm.")

    def check_supported(self, model) -> None:
        from timm.layers import Attention, LayerScale, Mlp, PatchEmbed
        from timm.models.vision_transformer import Block

        def refuse(msg):
            raise UnsupportedModel(f"timm VisionTransformer with {msg}")

        if model.global_pool not in ("token", "avg") or model.attn_pool is not None:
            refuse(f"global_pool={model.global_pool!r}: only 'token' and 'avg' pooling commute with residual maps "
                   "('max'/'avgmax' do not; 'map'/'prr' attention pooling and '' per-token output are not handled)")
        if not isinstance(model.head, nn.Linear):
            refuse("num_classes=0 (no head): its output is the residual stream itself, which residual maps rotate")
        pe = model.patch_embed
        if type(pe) is not PatchEmbed or not isinstance(pe.norm, nn.Identity):
            refuse(f"patch embedding {type(pe).__name__} / embed_norm_layer: only a plain PatchEmbed conv is handled")
        conv = pe.proj
        if (not isinstance(conv, nn.Conv2d) or conv.bias is None or tuple(conv.stride) != tuple(conv.kernel_size)
                or any(conv.padding) or conv.groups != 1 or any(x != 1 for x in conv.dilation)):
            refuse("a patch conv that is not kernel=stride, unpadded, with bias (pre_norm=True drops the bias)")
        if not isinstance(model.norm_pre, nn.Identity):
            refuse("pre_norm=True: a LayerNorm on the residual stream itself, whose gain does not commute with "
                   "residual maps")
        norms = [_is_ln(model.norm), _is_ln(model.fc_norm)]
        other = [not _is_ln(m) and not isinstance(m, nn.Identity) for m in (model.norm, model.fc_norm)]
        if any(other):
            refuse("a final norm that is not a LayerNorm with weight and bias (e.g. RmsNorm)")
        if all(norms):
            refuse("both norm and fc_norm LayerNorms: glmc has one final-norm role")
        if not any(norms):
            refuse("final_norm=False: the head reads the raw residual stream, so mean-centring would change it")
        eps = {getattr(model, final_norm_key(model)).eps}
        d = model.embed_dim
        for i, blk in enumerate(model.blocks):
            where = f"block {i}: "
            if type(blk) is not Block:
                refuse(where + f"block_fn {type(blk).__name__} (only the pre-norm Block is handled)")
            a = blk.attn
            if type(a) is not Attention:
                refuse(where + f"attention {type(a).__name__} (only timm.layers.Attention is handled)")
            if not isinstance(a.norm, nn.Identity):
                refuse(where + "scale_attn_norm=True: a norm across heads' outputs breaks head and OV maps")
            if getattr(a, "gate", None) is not None:
                refuse(where + "gated attention")
            if a.num_heads * a.head_dim != d or a.proj.in_features != d:
                refuse(where + "num_heads·head_dim != embed_dim")
            qn = [isinstance(a.q_norm, nn.Identity), isinstance(a.k_norm, nn.Identity)]
            if qn[0] != qn[1] or (not qn[0] and not (_is_ln(a.q_norm) and _is_ln(a.k_norm))):
                refuse(where + "a q_norm/k_norm that is not a pair of LayerNorms")
            if type(blk.mlp) is not Mlp or not isinstance(blk.mlp.norm, nn.Identity):
                refuse(where + f"MLP {type(blk.mlp).__name__} with norm {type(blk.mlp.norm).__name__} "
                       "(only the plain two-layer Mlp is handled; gated MLPs and scale_mlp_norm are not)")
            if (blk.mlp.fc1.bias is None) != (blk.mlp.fc2.bias is None) or (a.proj.bias is None) != (
                    blk.mlp.fc2.bias is None):
                refuse(where + "a mix of present and missing projection biases")
            if activation_name(blk.mlp.act) is None:
                refuse(where + f"activation {blk.mlp.act!r}: not an elementwise function glmc knows")
            for ls in (blk.ls1, blk.ls2):
                if not isinstance(ls, (nn.Identity, LayerScale)):
                    refuse(where + f"layer scale {type(ls).__name__}")
            for n in (blk.norm1, blk.norm2):
                if not _is_ln(n):
                    refuse(where + f"norm layer {type(n).__name__}: only LayerNorm with weight and bias is handled")
                eps.add(n.eps)
        if len(eps) > 1:
            refuse(f"different LayerNorm eps across the residual norms ({sorted(eps)})")
        if len({activation_name(b.mlp.act) for b in model.blocks}) > 1:
            refuse("different activations across blocks")

    def arch(self, model) -> Arch:
        b = model.blocks[0]
        qk_norm = not isinstance(b.attn.q_norm, nn.Identity)
        return Arch(family="timm-vit", task="cls", n_layer=len(model.blocks), d_model=model.embed_dim,
                    n_head=b.attn.num_heads, d_head=b.attn.head_dim, d_mlp=b.mlp.fc1.out_features,
                    activation=activation_name(b.mlp.act), ln_eps=b.norm1.eps,
                    unsupported=dict(QK_NORM_UNSUPPORTED) if qk_norm else {})

    def layout(self, model) -> Layout:
        conv = model.patch_embed.proj
        return Layout(len(model.blocks), {"final_norm": final_norm_key(model)},
                      {"n_head": model.blocks[0].attn.num_heads, "conv": (conv.in_channels, tuple(conv.kernel_size))})

    def build(self, image_size, patch, channels, num_classes, layers, width, heads, mlp, dropout=0.0,
              activation="gelu", pool="token"):
        """`pool`: "token" (the class token) or "avg" (mean of the patch tokens, then timm's fc_norm)."""
        check_heads(width, heads)
        check_patch(image_size, patch)
        kwargs = dict(img_size=image_size, patch_size=patch, in_chans=channels, num_classes=num_classes,
                      embed_dim=width, depth=layers, num_heads=heads, mlp_ratio=mlp / width, act_layer=activation,
                      proj_drop_rate=dropout, attn_drop_rate=dropout, global_pool=pool)
        model = timm_from_kwargs(kwargs)
        if model.blocks[0].mlp.fc1.out_features != mlp:
            raise ValueError(f"timm cannot express MLP width {mlp} with embed_dim {width} (mlp_ratio rounding)")
        return model

    def native_inputs(self, model, batch):
        return (batch[task(self.task).input_key],), {}

    def probe_inputs(self, model, n=2, seq=32, gen=None):
        gen = gen or torch.Generator().manual_seed(0)
        return torch.randn(n, model.patch_embed.proj.in_channels, *model.patch_embed.img_size, generator=gen)

    def io_spec(self, model) -> dict:
        acts = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "quick_gelu": "quick_gelu", "relu": "relu",
                "silu": "silu"}
        act = activation_name(model.blocks[0].mlp.act)
        why = None
        if model.cls_token is None or model.num_reg_tokens or model.no_embed_class or model.pos_embed is None:
            why = "circuit form needs a class token, no register tokens and a position embedding covering it"
        elif model.global_pool not in ("token", "avg") or (model.global_pool == "avg" and model.pool_include_prefix):
            why = f"circuit form supports token or patch-average pooling, not {model.global_pool!r}"
        elif not isinstance(model.blocks[0].attn.q_norm, nn.Identity):
            why = "circuit form cannot express qk_norm (it normalises q and k, not their product)"
        elif act not in acts:
            why = f"activation {act!r}"
        if why:
            raise UnsupportedModel(why)
        conv = model.patch_embed.proj
        return {"input": "patches", "channels": conv.in_channels, "patch": list(conv.kernel_size), "causal": False,
                "pool": "cls" if model.global_pool == "token" else "avg", "activation": acts[act]}

    def hook_modules(self, model) -> dict:
        out = {}
        for i, block in enumerate(model.blocks):
            out.update({f"blocks.{i}": block, f"blocks.{i}.attn.o": block.attn.proj,
                        f"blocks.{i}.mlp.out": block.mlp.fc2})
        return out

    def from_canonical(self, view, model, ln_eps=None, consume=False):
        self.check_supported(model)
        arch = self.arch(model)
        h, dh, d = view["blocks.0.attn.q.w"].shape
        n = view["blocks.0.mlp.in.w"].shape[0]
        if dh * h != d:
            raise UnsupportedModel(f"timm ViT derives head_dim = embed_dim // num_heads; got {h}·{dh} != {d}")
        qk_norm = "blocks.0.attn.q_norm.w" in view
        if qk_norm and (dh != arch.d_head or (ln_eps is not None and ln_eps != arch.ln_eps)):
            raise UnsupportedModel("timm qk_norm: " + QK_NORM_UNSUPPORTED["rectangular"])
        kwargs = dict(timm_kwargs(model))
        kwargs.update(embed_dim=d, num_heads=h, num_classes=view["head.w"].shape[0],
                      qkv_bias="blocks.0.attn.q.b" in view)
        kwargs["mlp_ratio"] = n / d if int(d * (n / d)) == n else (n + 0.5) / d  # timm: hidden = int(d·ratio)
        eps = arch.ln_eps if ln_eps is None else ln_eps
        kwargs.pop("norm_eps", None)
        if eps != 1e-6:  # timm's LayerNorm default
            kwargs["norm_eps"] = eps
        with torch.device("meta"):
            new = timm_from_kwargs(kwargs)
        assign_state(new, self.native_state(view, model, consume), view, model, "timm ViT")
        return new.eval()
