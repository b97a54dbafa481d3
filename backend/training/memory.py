"""A rough pre-flight memory estimate for a job, and a warning when it will not fit on this machine."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.spec import JobSpec, LoraSpec, checkpointing
from backend.methods.table import support
from backend.platform.hardware import DeviceInfo

if TYPE_CHECKING:
    from transformers import PretrainedConfig

GB = 2**30  # DeviceInfo reports GiB as "GB"; the estimate speaks the same unit
# NF4 packs two weights a byte; double quant stores one 8-bit absmax per 64-weight block and one fp32 scale per
# 256 of those blocks.
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)
INT8_BYTES_PER_PARAM = 1.0
LORA_BYTES_PER_PARAM = 4 + 4 + 8  # PEFT keeps adapters in fp32: weight, gradient and AdamW's two moments
LOGIT_BYTES = 4  # the loss upcasts logits to fp32
# Memory no tensor of the job holds, counted apart from the tensors (the calibration table in
# tests/unit/training/test_memory_calibration.py checks both: tensors against torch's peak allocated, the total against
# nvidia-smi). On a GPU: the CUDA context with cuBLAS workspaces, plus the caching allocator's reserve beyond the
# allocated peak; on a CPU: torch, transformers and TRL themselves.
CUDA_CONTEXT_BYTES = int(0.75 * GB)
ALLOCATOR_SLACK = 0.20  # reserved beyond the allocated peak, as a fraction of it
CPU_RUNTIME_BYTES = 1 * GB  # measured: the trainer process's RSS before its first tensor
# Model types whose attention projections have biases although their config does not say so.
QKV_BIAS_MODEL_TYPES = {"qwen2"}
# Model types with a per-head RMSNorm on queries and keys.
QK_NORM_MODEL_TYPES = {"qwen3"}
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ParameterCount:
    """Parameters of a dense decoder-only LLM, split by how quantized loading treats them."""

    embeddings: int
    lm_head: int  # 0 when tied to the embeddings
    linear: int  # the decoder layers' projections (with biases): what 4-/8-bit loading quantizes
    norms: int

    @property
    def total(self) -> int:
        """All parameters: embeddings, LM head, linear layers and norms."""
        return self.embeddings + self.lm_head + self.linear + self.norms

    @property
    def unquantized(self) -> int:
        """Parameters bitsandbytes leaves in the compute dtype (embeddings, LM head, norms)."""
        return self.embeddings + self.lm_head + self.norms


@dataclass(frozen=True)
class _Shape:
    """What the estimate needs from a model config, with the usual defaults filled in."""

    model_type: str
    hidden: int
    layers: int
    intermediate: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def layer_linears(self) -> dict[str, tuple[int, int, bool]]:
        """Per-layer projections: name -> (in features, out features, has bias)."""
        h, i = self.hidden, self.intermediate
        return {
            "q_proj": (h, self.q_dim, self.qkv_bias),
            "k_proj": (h, self.kv_dim, self.qkv_bias),
            "v_proj": (h, self.kv_dim, self.qkv_bias),
            "o_proj": (self.q_dim, h, self.o_bias),
            "gate_proj": (h, i, self.mlp_bias),
            "up_proj": (h, i, self.mlp_bias),
            "down_proj": (i, h, self.mlp_bias),
        }


def _shape(config: PretrainedConfig) -> _Shape:
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = config.num_attention_heads
    model_type = getattr(config, "model_type", "")
    attention_bias = getattr(config, "attention_bias", None)
    return _Shape(
        model_type=model_type,
        hidden=config.hidden_size,
        layers=config.num_hidden_layers,
        intermediate=config.intermediate_size,
        vocab=config.vocab_size,
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
        tied=bool(getattr(config, "tie_word_embeddings", False)),
        qkv_bias=bool(attention_bias) if attention_bias is not None else model_type in QKV_BIAS_MODEL_TYPES,
        o_bias=bool(attention_bias),
        mlp_bias=bool(getattr(config, "mlp_bias", False)),
    )


def parameter_breakdown(config: PretrainedConfig) -> ParameterCount:
    """Count a dense decoder-only LLM's parameters (Llama, Mistral, Qwen2, Qwen3) from its config alone."""
    s = _shape(config)
    per_layer_linear = sum(n_in * n_out + (n_out if bias else 0) for n_in, n_out, bias in s.layer_linears().values())
    per_layer_norms = 2 * s.hidden + (2 * s.head_dim if s.model_type in QK_NORM_MODEL_TYPES else 0)
    return ParameterCount(
        embeddings=s.vocab * s.hidden,
        lm_head=0 if s.tied else s.vocab * s.hidden,
        linear=s.layers * per_layer_linear,
        norms=s.layers * per_layer_norms + s.hidden,  # + the final norm
    )


def count_parameters(config: PretrainedConfig) -> int:
    """How many parameters a model of this config has, counted from its shape alone."""
    return parameter_breakdown(config).total


def count_lora_parameters(config: PretrainedConfig, lora: LoraSpec) -> int:
    """Adapter parameters: r x (in + out) for every targeted module; PEFT's all-linear skips the LM head."""
    if not lora.enabled:
        return 0
    s = _shape(config)
    targets = ALL_LINEAR if lora.target_modules == "all-linear" else lora.target_modules
    layer_linears = s.layer_linears()
    total = 0
    for target in {t.rsplit(".", 1)[-1] for t in targets}:  # PEFT matches "self_attn.q_proj" by its last part
        if target in layer_linears:
            n_in, n_out, _ = layer_linears[target]
            total += s.layers * lora.r * (n_in + n_out)
        elif target in {"lm_head", "embed_tokens"}:
            total += lora.r * (s.hidden + s.vocab)
    return total


@dataclass(frozen=True)
class MemoryEstimate:
    """The estimated peak memory of a job, item by item, with the settings that would shrink it."""

    total_bytes: int
    breakdown: list[tuple[str, int]]  # (what, bytes), summing to total_bytes
    parameters: int
    advice: list[str] = field(default_factory=list)  # settings that would shrink the estimate, most effective first
    runtime_bytes: int = 0  # the last breakdown items: the CUDA context and allocator reserve, or the CPU runtime
    processes: int = 1  # training.num_processes: each DDP process holds all of the above (its own copy)

    @property
    def all_processes_bytes(self) -> int:
        """The job's peak over all of its processes: each DDP process holds its own copy of the model."""
        return self.total_bytes * self.processes

    @property
    def tensor_bytes(self) -> int:
        """The job's own tensors at their peak: what torch.cuda.max_memory_allocated measures on a GPU."""
        return self.total_bytes - self.runtime_bytes

    def describe(self) -> str:
        """The breakdown and total, one ``item: size`` line each."""
        lines = [f"{label}: {format_bytes(size)}" for label, size in self.breakdown]
        if self.processes > 1:
            total = (
                f"total: {format_bytes(self.total_bytes)} per process, "
                f"{format_bytes(self.all_processes_bytes)} for the {self.processes} processes"
            )
        else:
            total = f"total: {format_bytes(self.total_bytes)}"
        return "\n".join([*lines, total])


def estimate_memory(
    spec: JobSpec,
    config: PretrainedConfig,
    device: DeviceInfo | None = None,
    prompt_tokens: int | None = None,
    sequence_tokens: int | None = None,
) -> MemoryEstimate:
    """Peak memory of one training process (one of ``training.num_processes``, each with ``spec``'s batch: pass
    the spec one process trains, ``distributed.per_process_spec``): within +-25% of the measured peaks in the
    calibration table (tests/unit/training/test_memory_calibration.py) when the sequence lengths are known, an upper
    bound when they are not.

    ``device`` decides the precision (bf16 on a bf16 GPU, else fp32, as the trainer chooses); by default this
    machine's. ``prompt_tokens`` is the GRPO prompt length (e.g. the dataset preview's longest);
    ``sequence_tokens`` the longest SFT/DPO example a batch holds (the collator pads to it; packing fills
    training.max_length). Both default to training.max_length, an upper bound.
    """
    if device is None:
        from backend.platform.hardware import detect_device

        device = detect_device()
    s = _shape(config)
    params = parameter_breakdown(config)
    dtype_bytes = 2 if device.kind == "cuda" and device.bf16 else 4
    t = spec.training
    # An auto batch not decided yet is estimated at its smallest: one example, or one generation group for GRPO.
    method = support(spec.method)
    batch, seq_len = t.batch_or(method.smallest_batch(spec)), t.max_length
    if sequence_tokens and not method.packs(spec):
        seq_len = min(sequence_tokens, t.max_length)
    batch *= method.sequences_per_example  # DPO's chosen and rejected go through the model in one batch
    if method.generation is not None:
        seq_len = (prompt_tokens or t.max_length) + method.generation(spec)[1]

    items: list[tuple[str, int]] = [_weights(spec, params, dtype_bytes)]
    items += _trainable_state(spec, config, params, dtype_bytes)
    if _needs_reference_copy(spec):
        items.append(("reference model (a frozen copy of the weights)", items[0][1]))
    items.append((_activations_label(spec), _activation_bytes(spec, s, batch * seq_len, dtype_bytes)))
    if t.use_liger_kernel:
        # Liger's fused linear + cross-entropy works through the tokens in chunks of about hidden/vocab of them.
        items.append(("logits (Liger fused, chunked)", batch * seq_len * s.hidden * LOGIT_BYTES))
    else:
        items.append(("logits (fp32)", batch * seq_len * s.vocab * LOGIT_BYTES))
    if method.generation is not None:
        items += _generation(method.generation(spec)[0], s, seq_len, dtype_bytes)
    tensors = sum(size for _, size in items)
    if device.kind == "cuda":
        runtime = [
            ("CUDA context and cuBLAS workspaces", CUDA_CONTEXT_BYTES),
            (f"allocator reserve (~{ALLOCATOR_SLACK:.0%} of the tensors)", tensors * ALLOCATOR_SLACK),
        ]
    else:
        runtime = [("runtime (torch, transformers, TRL)", CPU_RUNTIME_BYTES)]
    items = [(label, int(size)) for label, size in items + runtime]
    return MemoryEstimate(
        total_bytes=sum(size for _, size in items),
        breakdown=items,
        parameters=params.total,
        advice=_advice(spec, device),
        runtime_bytes=sum(size for _, size in items[-len(runtime) :]),
        processes=t.num_processes,
    )


def _weights(spec: JobSpec, params: ParameterCount, dtype_bytes: int) -> tuple[str, float]:
    dtype = "bf16" if dtype_bytes == 2 else "fp32"
    mode = spec.quantization.mode
    if mode == "4bit":
        size = params.linear * NF4_BYTES_PER_PARAM + params.unquantized * dtype_bytes
        return (f"weights (4-bit NF4, double quant; embeddings and head in {dtype})", size)
    if mode == "8bit":
        size = params.linear * INT8_BYTES_PER_PARAM + params.unquantized * dtype_bytes
        return (f"weights (8-bit; embeddings and head in {dtype})", size)
    return (f"weights ({dtype})", params.total * dtype_bytes)


def _trainable_state(
    spec: JobSpec, config: PretrainedConfig, params: ParameterCount, dtype_bytes: int
) -> list[tuple[str, float]]:
    if spec.lora.enabled:
        lora = count_lora_parameters(config, spec.lora)
        return [(f"LoRA adapter, gradients and AdamW state ({lora:,} params, fp32)", lora * LORA_BYTES_PER_PARAM)]
    # Full fine-tuning: gradients and AdamW's two moments live in the weights' dtype (no fp32 master copy).
    return [
        ("gradients (full fine-tuning)", params.total * dtype_bytes),
        ("AdamW state (full fine-tuning)", params.total * dtype_bytes * 2),
    ]


def _needs_reference_copy(spec: JobSpec) -> bool:
    """With LoRA the reference is the base model with the adapter switched off; full fine-tuning needs a copy."""
    if spec.lora.enabled:
        return False
    return support(spec.method).reference_model(spec)


def _activations_label(spec: JobSpec) -> str:
    return "activations" + (" (gradient checkpointing)" if checkpointing(spec) else "")


def _activation_bytes(spec: JobSpec, s: _Shape, tokens: int, dtype_bytes: int) -> int:
    """Tensors saved for the backward pass, per token.

    One decoder layer keeps about 6 hidden-sized tensors (norm inputs and outputs, residuals), q and the attention
    output (2 x q_dim), k and v (2 x kv_dim) and four MLP intermediates (gate, up, activation, product); LoRA
    dropout adds a dropped-out copy of each adapted module's input. Attention scores are not counted: SDPA and
    flash attention do not keep them. With gradient checkpointing only each layer's input survives, plus one
    layer's full set while it is recomputed.
    """
    per_layer = 6 * s.hidden + 2 * s.q_dim + 2 * s.kv_dim + 4 * s.intermediate
    if spec.lora.enabled and spec.lora.dropout > 0:
        targets = ALL_LINEAR if spec.lora.target_modules == "all-linear" else spec.lora.target_modules
        linears = s.layer_linears()
        per_layer += sum(linears[t][0] for t in {t.rsplit(".", 1)[-1] for t in targets} if t in linears)
    if checkpointing(spec):
        per_token = s.layers * s.hidden + per_layer
    else:
        per_token = s.layers * per_layer
    return tokens * per_token * dtype_bytes


def _generation(n: int, s: _Shape, seq_len: int, dtype_bytes: int) -> list[tuple[str, float]]:
    """A generating method (GRPO) samples a whole group of ``n`` at once: its KV cache, and the logits it scores the
    completions with."""
    kv_cache = n * seq_len * s.layers * 2 * s.kv_dim * dtype_bytes
    return [
        (f"generation KV cache ({n} completions)", kv_cache),
        (f"generation logits ({n} completions, fp32)", n * seq_len * s.vocab * LOGIT_BYTES),
    ]


def _advice(spec: JobSpec, device: DeviceInfo) -> list[str]:
    advice = []
    # bitsandbytes' 4-bit loading is for CUDA: on a CPU it does not lower the need (the trainer cannot use it there).
    if spec.quantization.mode != "4bit" and device.kind == "cuda":
        advice.append("enable 4-bit loading")
    if not spec.lora.enabled:
        advice.append("enable LoRA")
    if not checkpointing(spec):
        advice.append("turn on gradient checkpointing")
    if support(spec.method).generation is not None:
        advice.append("use fewer generations or a shorter max completion length")
    advice.append("lower batch size or max length")
    return advice


def check_memory(estimate: MemoryEstimate, device: DeviceInfo, available_ram_bytes: int | None = None) -> str | None:
    """A warning sentence when the estimate exceeds the free GPU memory (or available RAM on a CPU), else None."""
    if device.kind == "cuda":
        free = device.free_memory_gb * GB if device.free_memory_gb is not None else None
        where = device.name
    else:
        free = available_ram_bytes if available_ram_bytes is not None else read_available_ram()
        where = "this machine (system RAM)"
    # Each GPU process has a GPU of its own; CPU processes share the machine's RAM.
    needed = estimate.total_bytes if device.kind == "cuda" else estimate.all_processes_bytes
    if free is None or needed <= free:
        return None
    remedies = [*estimate.advice, "pick a smaller model"]
    remedy = ", ".join(remedies[:-1]) + ", or " + remedies[-1]
    return f"Estimated {format_bytes(needed)} needed but {format_bytes(free)} free on {where}: {remedy}."


# A job plans to fill at most this much of its device's memory: fragmentation, the app itself (its chat models) and
# other processes need the rest.
HEADROOM = 0.85


def memory_budget(device: DeviceInfo, total_ram_bytes: int | None = None, processes: int = 1) -> int | None:
    """The memory a job may plan to use on ``device`` (bytes): :data:`HEADROOM` of the GPU's memory, or on a CPU of
    the machine's RAM (``total_ram_bytes``, :func:`read_total_ram`); None when that is not known.

    The one figure Check and the job (auto-tune, in its worker) both read: a property of the device rather than of
    the moment, so the same spec on the same device gets the same budget, though the worker's own process already
    holds memory when it plans. What other processes hold right now is :func:`check_memory`'s warning ("... free").

    >>> format_bytes(memory_budget(DeviceInfo("cuda", "NVIDIA L4", 1, 22.0, 8.0, True)))
    '18.7 GB'
    >>> cpu = DeviceInfo("cpu", "CPU", 0, None, None, False)
    >>> format_bytes(memory_budget(cpu, 16 * GB)), memory_budget(cpu)
    ('13.6 GB', None)

    ``processes`` CPU processes share the RAM (each GPU process has a GPU of its own):

    >>> format_bytes(memory_budget(cpu, 16 * GB, processes=2))
    '6.8 GB'
    """
    if device.kind == "cuda":
        return int(device.total_memory_gb * GB * HEADROOM) if device.total_memory_gb else None
    return int(total_ram_bytes * HEADROOM / processes) if total_ram_bytes else None


def budget_sentence(device: DeviceInfo, budget: int | None) -> str | None:
    """How Check and the Jobs tab say the budget (one of auto-tune's choices); None when it is not known."""
    if budget is None:
        return None
    where = f"{device.name}'s memory" if device.kind == "cuda" else "this machine's RAM"
    return f"memory: the job may use {format_bytes(budget)} ({HEADROOM:.0%} of {where})"


def process_budget_sentence(device: DeviceInfo, budget: int | None, processes: int) -> str | None:
    """:func:`budget_sentence` for one of ``processes`` processes (CPU processes share the RAM).

    >>> process_budget_sentence(DeviceInfo("cpu", "CPU", 0, None, None, False), 4 * GB, 2)
    "memory: each of the 2 processes may use 4.0 GB (85% of this machine's RAM, shared)"
    """
    if processes <= 1 or budget is None:
        return budget_sentence(device, budget)
    where = f"{device.name}'s memory, one GPU each" if device.kind == "cuda" else "this machine's RAM, shared"
    return f"memory: each of the {processes} processes may use {format_bytes(budget)} ({HEADROOM:.0%} of {where})"


def _meminfo(field: str, meminfo: Path, fallback: str) -> int | None:
    """The kernel's ``field`` line of /proc/meminfo in bytes, or psutil's ``virtual_memory().<fallback>`` elsewhere."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return int(getattr(psutil.virtual_memory(), fallback))


def read_total_ram(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The machine's RAM (the kernel's MemTotal), or psutil's view elsewhere."""
    return _meminfo("MemTotal", meminfo, "total")


def read_available_ram(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The kernel's MemAvailable (what can be allocated without swapping), or psutil's view elsewhere."""
    return _meminfo("MemAvailable", meminfo, "available")


def format_bytes(size: float) -> str:
    """A size for people: ``1.5 GB`` from a gibibyte up, else whole ``MB``."""
    if size >= GB:
        return f"{size / GB:.1f} GB"
    return f"{size / 2**20:.0f} MB"


def load_model_config(spec: JobSpec, models_dir: Path) -> PretrainedConfig:
    """The base model's config (the demo model is built if needed), without loading any weights."""
    from transformers import AutoConfig

    from backend.models.loading import resolve_model

    model = spec.model
    path = resolve_model(model, models_dir)
    return AutoConfig.from_pretrained(path, revision=model.revision, trust_remote_code=model.trust_remote_code)
