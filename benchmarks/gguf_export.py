"""GGUF export's cost and fidelity: merge, convert and check a demo job and a Qwen3-0.6B-shaped one, per type; with a
built llama-cpp-python, llama.cpp's own answers, tokens per second and tokenization of the demo texts.

    python benchmarks/gguf_export.py                        # prints the figures (about 10 minutes on 2 cores)
    python benchmarks/gguf_export.py --llama-cpp DIR        # also llama.cpp itself, from a --target install in DIR
    python benchmarks/gguf_export.py --build-llama-cpp DIR  # first build llama-cpp-python from its sdist into DIR
    python benchmarks/gguf_export.py ... --record           # also appends dated rows to docs/benchmarks.md

The jobs are made here, not trained: an SFT job of ``builtin:tiny-qwen3-arith`` on arith-sft (256 held-out rows) and
one of a Qwen3-0.6B-shaped model (its real sizes and 151,936-row tied embedding, random bf16 weights built locally,
the demo tokenizer, the embedding rows past its 1,024 ids zeroed so greedy answers stay within them; 64 held-out
rows), each with a LoRA r=16 adapter on every linear layer whose B matrices are random, so
the merge has work to do. Timed as the export job runs them: ``merge_job``, then ``export_gguf`` per type (its
converting and checking phases). The build runs ``pip install --no-deps --target DIR`` on the pinned sdist with
``nice -n 19``, CPU only, two compile jobs, stopped after 25 minutes; the main environment is left as it was.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUILD_LIMIT_S = 25 * 60
BUILD_ARGS = "-DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF"
CANDIDATE_PRE_TOKENIZERS = ("smollm", "qwen2", "gpt-2", "llama-bpe")
SPEED_PROMPTS, SPEED_TOKENS, LLAMA_ROWS = 8, 32, 64


def build_llama_cpp(target: Path) -> tuple[bool, float, str]:
    """(built, seconds, pip's last error line when it failed) for llama-cpp-python built from the sdist into
    ``target``."""
    from backend.platform.gguf_converter import CONVERTER_PACKAGE, CONVERTER_VERSION

    env = {**os.environ, "CMAKE_ARGS": BUILD_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
    command = ["nice", "-n", "19", sys.executable, "-m", "pip", "install", "--no-deps", "--no-cache-dir"]
    command += ["--no-binary", CONVERTER_PACKAGE, "--target", str(target), f"{CONVERTER_PACKAGE}=={CONVERTER_VERSION}"]
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=BUILD_LIMIT_S)
    except subprocess.TimeoutExpired:
        return False, time.monotonic() - started, f"gave up after {BUILD_LIMIT_S} s"
    seconds = time.monotonic() - started
    if done.returncode == 0:  # llama_cpp's one dependency the studio does not install
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), "diskcache"]
        )
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "error" in line.lower()]
    return done.returncode == 0, seconds, "" if done.returncode == 0 else (errors[-1:] or ["no output"])[0][:200]


def make_job(paths, base: str, holdout: int):
    """A succeeded SFT job of ``base`` on arith-sft with a LoRA adapter whose B matrices are random."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.core.spec import parse_spec
    from backend.jobs.records import JobStatus
    from backend.jobs.store import JobStore
    from backend.models.loading import resolve_model
    from tests.helpers import tiny_spec

    store = JobStore(paths.db)
    spec = tiny_spec(model={"name_or_path": base}, dataset={"source": "builtin", "name": "arith-sft"})
    job = store.add(parse_spec({**spec, "eval": {"holdout_rows": holdout}}))
    store.claim_next()
    folder = resolve_model(job.spec.model, paths.models)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(folder), LoraConfig(r=16, lora_alpha=32, target_modules="all-linear")
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.002)
    adapter = paths.job_adapter(job.id)
    model.save_pretrained(adapter)
    AutoTokenizer.from_pretrained(folder).save_pretrained(adapter)
    store.finish(job.id, JobStatus.succeeded, artifacts={"adapter_dir": str(adapter)})
    return store.get(job.id)


def qwen3_06b_base(models: Path) -> Path:
    """benchmarks/merge.py's Qwen3-0.6B-shaped model with the demo tokenizer, saved under ``models``."""
    import torch
    from transformers import AutoTokenizer

    from backend.models.demo import ensure_demo_model
    from benchmarks.merge import qwen3_06b_shape

    folder = models / "qwen3-0.6b-shape"
    model = qwen3_06b_shape()
    tokenizer = AutoTokenizer.from_pretrained(ensure_demo_model(models))
    with torch.no_grad():  # rows past the demo tokenizer's ids: zero, so greedy answers stay within its vocabulary
        model.get_input_embeddings().weight[len(tokenizer) :] = 0
    model.config.eos_token_id, model.config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def llama_answers(llama_cpp: Any, gguf: Path, texts: list[str], tokens: int) -> tuple[list[str], float]:
    """llama.cpp's greedy answers to the rendered prompts ``texts``; and its generated tokens per second."""
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=1024, n_threads=os.cpu_count() or 2, verbose=False)
    answers, generated, seconds = [], 0, 0.0
    for text in texts:
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        started = time.monotonic()
        out = llm.create_completion(prompt=ids, max_tokens=tokens, temperature=0.0, top_k=1)
        seconds += time.monotonic() - started
        answers.append(out["choices"][0]["text"])
        generated += out["usage"]["completion_tokens"]
    return answers, generated / seconds if seconds else 0.0


def transformers_speed(folder: Path, texts: list[str], tokens: int) -> float:
    """The merged model's generated tokens per second with transformers, greedy, one prompt at a time."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    generated, seconds = 0, 0.0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)
            started = time.monotonic()
            out = model.generate(**ids, max_new_tokens=tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            seconds += time.monotonic() - started
            generated += out.shape[1] - ids["input_ids"].shape[1]
    return generated / seconds if seconds else 0.0


def demo_texts() -> list[str]:
    """Every distinct string of the shipped datasets, and each conversation rendered with the chat template."""
    from transformers import AutoTokenizer

    from backend.core.paths import BUILTIN_DATASETS_DIR
    from backend.models.demo import ARITH_MODEL_DIR

    tokenizer = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    texts: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, (list, dict)):
            for item in value.values() if isinstance(value, dict) else value:
                walk(item)

    for file in sorted(BUILTIN_DATASETS_DIR.glob("*.jsonl")):
        for line in file.read_text().splitlines():
            row = json.loads(line)
            walk(row)
            messages = row.get("messages") or (row.get("prompt") if isinstance(row.get("prompt"), list) else None)
            if messages:
                texts.append(tokenizer.apply_chat_template(messages, tokenize=False))
    return list(dict.fromkeys(texts))


def pre_tokenizer_rows(llama_cpp: Any, scratch: Path) -> list[tuple[str, str]]:
    """The shipped texts tokenized by llama.cpp under each candidate ``tokenizer.ggml.pre`` against the demo
    tokenizer: how many come out the same."""
    from transformers import AutoTokenizer

    from backend.models.demo import ARITH_MODEL_DIR
    from backend.platform.gguf_converter import converter_dir
    from backend.platform.interpreters import backend_env

    tokenizer = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    texts = demo_texts()
    expected = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    figures = []
    for pre in CANDIDATE_PRE_TOKENIZERS:
        vocab = scratch / f"vocab-{pre}.gguf"
        command = [sys.executable, "-m", "backend.workflows.gguf_child", "--converter", str(converter_dir())]
        command += ["--pre", pre, "--", str(ARITH_MODEL_DIR), "--vocab-only", "--outfile", str(vocab)]
        subprocess.run(command, check=True, capture_output=True, env=backend_env())
        llm = llama_cpp.Llama(model_path=str(vocab), vocab_only=True, verbose=False)
        same = sum(llm.tokenize(t.encode(), add_bos=False, special=True) == e for t, e in zip(texts, expected))
        figures.append(f"{pre} {same}/{len(texts)}")
    what = "the shipped datasets' distinct texts and rendered chats, tokenized by llama.cpp per tokenizer.ggml.pre"
    return [(what, "identical to the demo tokenizer's ids: " + ", ".join(figures))]


def quantize_q4_k_m(llama_cpp: Any, f16: Path, out: Path) -> None:
    """llama.cpp's own Q4_K_M quantization of an f16 GGUF (what llama-quantize does), through llama-cpp-python."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    if llama_cpp.llama_model_quantize(str(f16).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError("llama_model_quantize failed")


def bench_model(label: str, paths, base: str, holdout: int, llama_cpp: Any | None) -> list[tuple[str, str]]:
    """Merge, convert and check one job per type; with llama.cpp, its answers, speed and a Q4_K_M."""
    from transformers import AutoTokenizer

    from backend.workflows.export import merge_job
    from backend.workflows.gguf import GGUF_TYPES, export_gguf
    from backend.workflows.gguf_check import answer_tokens, check_rows, compare, greedy_answers, loaders, quant_check

    job = make_job(paths, base, holdout)
    started = time.monotonic()
    merged = merge_job(job, paths, paths.job_dir(job.id) / "merged").path
    rows = [(f"GGUF export, {label}: merge (`benchmarks/gguf_export.py`)", f"{time.monotonic() - started:.1f} s")]
    exports = {}
    for gguf_type in GGUF_TYPES:
        record = export_gguf(job, paths, merged, paths.job_dir(job.id) / f"gguf-{gguf_type}", gguf_type, print)
        exports[gguf_type] = Path(record.path)
        check = record.quant_check
        rows.append(
            (
                f"GGUF export, {label}: {gguf_type}",
                f"convert {record.seconds['converting']:.1f} s, check {record.seconds['checking']:.1f} s, "
                f"{record.bytes / 2**20:.1f} MiB; {(check.sentence or check.error) if check else 'no check'}",
            )
        )
        print(rows[-1], flush=True)
    if llama_cpp is None:
        return rows
    checked = check_rows(job, paths, max_rows=LLAMA_ROWS)
    tokenizer = AutoTokenizer.from_pretrained(merged)
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in checked.prompts]
    q4 = exports["f16"].with_name(exports["f16"].name.replace("-f16", "-q4_k_m"))
    quantize_q4_k_m(llama_cpp, exports["f16"], q4)
    q4_check = quant_check(job, paths, merged, q4, "q4_k_m", checked)
    rows.append(
        (
            f"GGUF export, {label}: q4_k_m by llama.cpp's llama_model_quantize (not offered: needs compiled llama.cpp)",
            f"{q4.stat().st_size / 2**20:.1f} MiB; {q4_check.sentence or q4_check.error}",
        )
    )
    merged_answers = greedy_answers(loaders(merged, exports["f16"])[0], checked, None, job.spec.training.seed)
    answers, _ = llama_answers(llama_cpp, exports["q8_0"], texts, answer_tokens(tokenizer, checked))
    versus = compare(checked, merged_answers, answers, "q8_0")
    for example in versus.examples:
        print("llama.cpp differs:", example.model_dump(), flush=True)
    rows.append(
        (
            f"GGUF export, {label}: q8_0 answered by llama.cpp itself (llama-cpp-python) against the merged model "
            "in transformers",
            versus.sentence,
        )
    )
    _, llama_speed = llama_answers(llama_cpp, exports["q8_0"], texts[:SPEED_PROMPTS], SPEED_TOKENS)
    hf_speed = transformers_speed(merged, texts[:SPEED_PROMPTS], SPEED_TOKENS)
    rows.append(
        (
            f"GGUF export, {label}: generation speed, {SPEED_PROMPTS} prompts one at a time, up to {SPEED_TOKENS} "
            "tokens, greedy",
            f"llama.cpp q8_0 {llama_speed:.0f} tokens/s; transformers (merged, {_dtype(merged)}) {hf_speed:.0f} "
            "tokens/s",
        )
    )
    print(rows[-3:], flush=True)
    return rows


def _dtype(folder: Path) -> str:
    return json.loads((folder / "config.json").read_text()).get("dtype", "float32")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    parser.add_argument("--llama-cpp", type=Path, help="a folder llama-cpp-python was installed into (--target)")
    parser.add_argument("--build-llama-cpp", type=Path, help="build llama-cpp-python from its sdist into this folder")
    parser.add_argument("--skip-0.6b", dest="skip_large", action="store_true", help="the demo job only")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from backend.core.paths import DataPaths
    from backend.platform.gguf_converter import converter_problem

    if converter_problem():
        print(converter_problem())
        return 1
    rows: list[tuple[str, str]] = []
    target = args.build_llama_cpp or args.llama_cpp
    if args.build_llama_cpp:
        built, seconds, last = build_llama_cpp(args.build_llama_cpp)
        rows.append(
            (
                "llama-cpp-python 0.3.36 built from its sdist (CPU, GGML_NATIVE, 2 compile jobs, nice 19)",
                f"built in {seconds:.0f} s" if built else f"FAILED after {seconds:.0f} s ({last})",
            )
        )
        print(rows[-1], flush=True)
    llama_cpp = None
    if target is not None and (target / "llama_cpp").is_dir():
        sys.path.insert(0, str(target))
        import llama_cpp  # type: ignore[import-not-found, no-redef]
    with tempfile.TemporaryDirectory(prefix="gguf-bench-") as scratch:
        paths = DataPaths(Path(scratch) / "data").ensure()
        if llama_cpp is not None:
            rows += pre_tokenizer_rows(llama_cpp, Path(scratch))
        rows += bench_model(
            "builtin:tiny-qwen3-arith, 256 held-out rows", paths, "builtin:tiny-qwen3-arith", 256, llama_cpp
        )
        if not args.skip_large:
            base = str(qwen3_06b_base(paths.models))
            rows += bench_model("Qwen3-0.6B shape (random bf16), 64 held-out rows", paths, base, 64, llama_cpp)
    from benchmarks.record import report

    report(rows, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
