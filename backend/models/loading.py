"""Model-side translators: resolve the base model, pick the dtype, and build the PEFT and bitsandbytes configs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.spec import LoraSpec, ModelSpec, QuantizationSpec
from backend.models.demo import ARITH_MODEL_DIR, ARITH_MODEL_ID, DEMO_MODEL_ID, ensure_demo_model

if TYPE_CHECKING:
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig


@dataclass(frozen=True)
class ModelHead:
    """What a method puts on top of the base model's layers: the language-model head, which generates (SFT, DPO, the
    online methods), or a head of its own, such as a reward model's one score per sequence. It decides the class the
    base model is loaded with and what PEFT trains and saves beside the LoRA weights."""

    auto_class: str  # transformers' Auto class that loads the base model with this head
    peft_task: str  # PEFT's task type (``CAUSAL_LM``, ``SEQ_CLS``)
    num_labels: int | None = None  # a classification head's outputs; None for the language-model head
    modules_to_save: tuple[str, ...] = ()  # new layers (a fresh head) trained and saved whole, beside the LoRA

    @property
    def generates(self) -> bool:
        """Whether a model with this head writes text (chat, export, benchmarks, a next stage of another method)."""
        return self.auto_class == "AutoModelForCausalLM"


LANGUAGE_MODEL_HEAD = ModelHead("AutoModelForCausalLM", "CAUSAL_LM")


def head_init_kwargs(head: ModelHead) -> dict[str, Any]:
    """``from_pretrained`` arguments the head adds (a classification head's number of outputs).

    >>> score = ModelHead("AutoModelForSequenceClassification", "SEQ_CLS", num_labels=1)
    >>> head_init_kwargs(LANGUAGE_MODEL_HEAD), head_init_kwargs(score)
    ({}, {'num_labels': 1})
    """
    return {} if head.num_labels is None else {"num_labels": head.num_labels}


def resolve_model(model: ModelSpec, models_dir: Path) -> str:
    """The string ``from_pretrained`` takes: a built-in model's folder, a local folder, or the Hub id."""
    if model.name_or_path == DEMO_MODEL_ID:
        return str(ensure_demo_model(models_dir))
    if model.name_or_path == ARITH_MODEL_ID:
        return str(ARITH_MODEL_DIR)  # shipped, read-only: never written to
    return model.name_or_path


def compute_dtype():
    """bf16 on GPUs that support it, fp32 elsewhere (CPU training in half precision is slow and unstable)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def compute_dtype_name() -> str:
    """The compute dtype's name: ``bfloat16`` or ``float32``."""
    return str(compute_dtype()).removeprefix("torch.")


def to_bnb_config(quant: QuantizationSpec) -> BitsAndBytesConfig | None:
    """The bitsandbytes config for 4-bit NF4 (double quant) or 8-bit loading; None for full precision."""
    from transformers import BitsAndBytesConfig

    if quant.mode == "4bit":
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute_dtype(),
        )
    if quant.mode == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return None


def to_peft_config(lora: LoraSpec, head: ModelHead = LANGUAGE_MODEL_HEAD) -> LoraConfig | None:
    """The job's LoRA config for PEFT on a model with ``head``; None when it trains all weights."""
    from peft import LoraConfig

    if not lora.enabled:
        return None
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type=head.peft_task,
        modules_to_save=list(head.modules_to_save) or None,
    )


def model_init_kwargs(
    model: ModelSpec, quant: QuantizationSpec, attn_implementation: str | None = None
) -> dict[str, Any]:
    """``from_pretrained`` arguments for the base model: dtype, revision, attention, device for quantization."""
    import torch

    kwargs: dict[str, Any] = {"dtype": compute_dtype(), "trust_remote_code": model.trust_remote_code}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if model.revision:
        kwargs["revision"] = model.revision
    if quant.mode != "none" and not torch.cuda.is_available():
        # bitsandbytes quantizes on the device the weights land on; without a GPU that must be the CPU.
        kwargs["device_map"] = "cpu"
    return kwargs


def load_tokenizer(path: str, model: ModelSpec):
    """The model's tokenizer, with the EOS token as padding when it has no pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, revision=model.revision, trust_remote_code=model.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def adapter_for_head(adapter_dir: Path | str, peft_task: str, inference: bool) -> tuple[Any, bool]:
    """A saved LoRA's config for a model whose head is PEFT's ``peft_task`` (a ``ModelHead``'s), and whether the
    adapter was trained on another head (a language model's LoRA under a reward model's score head): then its LoRA is
    loaded with ``load_lora_only``."""
    from peft import PeftConfig

    config = PeftConfig.from_pretrained(str(adapter_dir))
    if config.task_type == peft_task:
        return config, False
    config.task_type, config.inference_mode = peft_task, inference
    return config, True


def load_lora_only(model, adapter_dir: Path | str, adapter_name: str = "default") -> None:
    """Load a saved adapter's LoRA weights into ``adapter_name`` of ``model`` (a PEFT model built with its config by
    ``adapter_for_head``), whose head the adapter never had: the head keeps ``model``'s own (fresh) weights."""
    from peft import get_peft_model_state_dict, load_peft_weights, set_peft_model_state_dict

    weights = get_peft_model_state_dict(model, adapter_name=adapter_name)  # the head's, in the saved layout
    weights.update(load_peft_weights(str(adapter_dir)))
    set_peft_model_state_dict(model, weights, adapter_name=adapter_name)
