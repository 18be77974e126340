"""HF BERT (BertForMaskedLM, BertForPreTraining) and RoBERTa (RobertaForMaskedLM) through the adapter conformance suite
(tests/conformance.py): post-LN encoders whose LayerNorms sit on the residual stream."""

import torch

from conformance import AdapterConformance


def perturbed(model, seed: int):
    """Every parameter moved off its initialisation (norm gains and biases included; weights ×3 for logits of a few
    units), in eval mode."""
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.mul_(3.0)
    return model.eval()


def bert(layers=2, width=32, heads=4, mlp=48, act="gelu", tied=True, pretraining=False, vocab=61):
    def make(seed):
        from transformers import BertConfig, BertForMaskedLM, BertForPreTraining

        torch.manual_seed(seed)
        cfg = BertConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                         intermediate_size=mlp, hidden_act=act, max_position_embeddings=40, type_vocab_size=2,
                         tie_word_embeddings=tied)
        return perturbed((BertForPreTraining if pretraining else BertForMaskedLM)(cfg), seed)
    return make


def roberta(layers=2, width=32, heads=4, mlp=48, act="gelu", tied=True, vocab=61):
    def make(seed):
        from transformers import RobertaConfig, RobertaForMaskedLM

        torch.manual_seed(seed)
        cfg = RobertaConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=mlp, hidden_act=act, max_position_embeddings=42, pad_token_id=1,
                            bos_token_id=0, eos_token_id=2, type_vocab_size=1, tie_word_embeddings=tied)
        return perturbed(RobertaForMaskedLM(cfg), seed)
    return make


class TestBertConformance(AdapterConformance):
    family = "bert"
    configs = {
        "mlm-L2-d32h4-gelu-tied": bert(),
        "mlm-L1-d24h3-relu-untied": bert(layers=1, width=24, heads=3, mlp=40, act="relu", tied=False),
        "pretraining-L2-d16h2-gelu-tied": bert(width=16, heads=2, mlp=24, pretraining=True),
        "pretraining-L1-d16h4-relu-untied": bert(layers=1, width=16, heads=4, mlp=20, act="relu", tied=False,
                                                 pretraining=True),
    }

    def test_configs_cover_tied_untied_and_pooler(self):
        models = [self.make(c) for c in self.configs]
        assert {m.config.tie_word_embeddings for m in models} == {True, False}
        assert {type(m).__name__ for m in models} == {"BertForMaskedLM", "BertForPreTraining"}


class TestRobertaConformance(AdapterConformance):
    family = "roberta"
    configs = {
        "L2-d32h4-gelu-tied": roberta(),
        "L1-d24h3-relu-untied": roberta(layers=1, width=24, heads=3, mlp=40, act="relu", tied=False),
        "L2-d16h2-gelu_new-untied": roberta(width=16, heads=2, mlp=24, act="gelu_new", tied=False),
    }
