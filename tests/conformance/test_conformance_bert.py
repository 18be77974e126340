"""HF BERT (BertForMaskedLM, BertForPreTraining) and RoBERTa (RobertaForMaskedLM) through the adapter conformance suite
(adapter_suite.py): post-LN encoders whose LayerNorms sit on the residual stream."""

from adapter_suite import AdapterConformance
from factories import bert, roberta


class TestBertConformance(AdapterConformance):
    family = "bert"
    declared_checks = {"canonical", "residual", "residual:permutation", "heads", "qk", "ov", "mlp", "mlp:zero-pad",
                       "composed", "composed∘inverse"}
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
    declared_checks = TestBertConformance.declared_checks  # the same encoder groups
    configs = {
        "L2-d32h4-gelu-tied": roberta(),
        "L1-d24h3-relu-untied": roberta(layers=1, width=24, heads=3, mlp=40, act="relu", tied=False),
        "L2-d16h2-gelu_new-untied": roberta(width=16, heads=2, mlp=24, act="gelu_new", tied=False),
    }
