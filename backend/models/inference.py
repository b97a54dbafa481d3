"""Loading a model for generation outside training: the base model, with a finished job's adapter when asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.core.spec import ModelSpec, QuantizationSpec
from backend.models import loading as models


def load_for_inference(
    model: ModelSpec, quantization: QuantizationSpec, models_dir: Path, adapter_dir: Path | None = None
) -> tuple[Any, Any]:
    """(model in eval mode, tokenizer). With ``adapter_dir`` the model is a PeftModel whose adapter can be switched
    off (``disable_adapter``) to get the base model back without a second copy in memory."""
    from transformers import AutoModelForCausalLM

    path = models.resolve_model(model, models_dir)
    tokenizer = models.load_tokenizer(str(adapter_dir or path), model)
    loaded = AutoModelForCausalLM.from_pretrained(
        path, quantization_config=models.to_bnb_config(quantization), **models.model_init_kwargs(model, quantization)
    )
    if adapter_dir is not None:
        from peft import PeftModel

        loaded = PeftModel.from_pretrained(loaded, str(adapter_dir))
    loaded.eval()
    return loaded, tokenizer


def load_reward_model(model: ModelSpec, models_dir: Path, adapter_dir: Path | None = None) -> tuple[Any, Any]:
    """(a reward model in eval mode, its tokenizer): ``model`` loaded with one score per sequence (transformers'
    sequence classification, ``num_labels=1``), and with ``adapter_dir`` a reward job's score-head adapter (its LoRA
    and the trained head, PEFT's ``modules_to_save``) merged in. Its pad token is the tokenizer's, so the score is read
    at each row's last real token."""
    from transformers import AutoModelForSequenceClassification

    path = models.resolve_model(model, models_dir)
    tokenizer = models.load_tokenizer(str(adapter_dir or path), model)
    loaded = AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=1, **models.model_init_kwargs(model, QuantizationSpec())
    )
    if adapter_dir is not None:
        from peft import PeftModel

        loaded = PeftModel.from_pretrained(loaded, str(adapter_dir)).merge_and_unload()
    loaded.config.pad_token_id = tokenizer.pad_token_id
    loaded.eval()
    return loaded, tokenizer
