"""Exporting a finished job as a merged model, in an export job of the queue: loads without peft, answers as base +
adapter, pushes as a model repo inside the job, leaves nothing behind on a full disk or a kill, says when a 4-bit job
was dequantized; one export at a time per user, one download per format; the CLI, ownership and the snippets."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
import torch

from backend.api import StudioAPI
from backend.core.paths import DataPaths
from backend.core.spec import SpecError, parse_spec
from backend.core.users import User
from backend.jobs.records import JobStatus
from backend.jobs.scheduler import Scheduler
from backend.jobs.store_errors import ExportBusy, JobNotFound
from components.jobs import views as job_views
from components.jobs.export_panel import use_markdown
from tests.helpers import ROOT, tiny_spec, wait_for, wait_status
from tests.helpers.faults import tmpfs
from tests.helpers.hub_server import FakeHub

TOKEN = "hf_test_token_0123456789"
# Questions the demo jobs never trained on (chat-demo is small talk), as chat prompts.
HELD_OUT = ["What is 12 + 9?", "Name a colour.", "Count to five.", "Why is the sky blue?"]
NEW_TOKENS = 8


def _train(root: Path, models_dir: Path, **spec) -> tuple[StudioAPI, str]:
    """A real tiny job on the demo model, run to the end by a scheduler: (facade, job id)."""
    root.mkdir(parents=True)
    (root / "models").symlink_to(models_dir, target_is_directory=True)
    paths = DataPaths(root).ensure()
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(tiny_spec(**spec), user=User("alice")).job
    scheduler = Scheduler(paths, poll_interval=0.1).start()
    try:
        done = wait_status(api.core.store, job.id, {JobStatus.succeeded, JobStatus.failed}, timeout=300)
    finally:
        scheduler.stop()
    assert done.status is JobStatus.succeeded, done.error
    return api, job.id


def _perturb(adapter: Path) -> None:
    """Push the adapter's B matrices far from their few trained steps, so the tuned model answers unlike base."""
    from safetensors.torch import load_file, save_file

    file = adapter / "adapter_model.safetensors"
    tensors = load_file(file)
    generator = torch.Generator().manual_seed(0)
    for name, tensor in tensors.items():
        if "lora_B" in name:
            tensors[name] = tensor + 0.5 * torch.randn(tensor.shape, generator=generator).to(tensor.dtype)
    save_file(tensors, file, metadata={"format": "pt"})


@pytest.fixture(scope="module")
def job(tmp_path_factory, models_dir):
    """A real tiny SFT job of alice's, its adapter perturbed, and a scheduler serving exports: (facade, job id)."""
    api, job_id = _train(tmp_path_factory.mktemp("export") / "data", models_dir)
    _perturb(Path(api.jobs.get_job(job_id).artifacts.adapter_dir))
    scheduler = Scheduler(api.core.paths, poll_interval=0.1, secret_env=api.core.secret_env).start()
    try:
        yield api, job_id
    finally:
        scheduler.stop()


def _export(api: StudioAPI, job_id: str, user: User | None = None, timeout: float = 300, **asked):
    """Queue an export of ``job_id`` and wait for its end: the export job's record."""
    export = api.export.submit(job_id, user, **asked).job
    assert export.spec.kind == "export"
    return wait_status(api.core.store, export.id, {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled}, timeout)


def _exported(api: StudioAPI, job_id: str, user: User | None = None, **asked):
    """An export that must succeed: its outcome."""
    done = _export(api, job_id, user, **asked)
    assert done.status is JobStatus.succeeded, done.error
    assert done.progress["step"] == done.progress["total_steps"], done.progress  # n of n phases, not n-1
    return done.artifacts.export


@pytest.fixture()
def online(monkeypatch):
    """The tests run offline (conftest); the fake Hub is local, so let huggingface_hub talk to it."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # and the export job's worker, which pushes


def _prompts(tokenizer) -> list[list[int]]:
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in HELD_OUT
    ]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def _greedy(model, prompts: list[list[int]]) -> list[list[int]]:
    answers = []
    with torch.no_grad():
        for ids in prompts:
            inputs = torch.tensor([list(ids)])
            out = model.generate(inputs, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
            answers.append(out[0, inputs.shape[1] :].tolist())
    return answers


NO_PEFT_SCRIPT = textwrap.dedent(
    f"""
    import json, sys
    import torch
    from transformers import AutoModelForCausalLM
    folder, prompts = sys.argv[1], json.loads(sys.argv[2])
    model = AutoModelForCausalLM.from_pretrained(folder)
    answers = []
    with torch.no_grad():
        for ids in prompts:
            inputs = torch.tensor([ids])
            out = model.generate(inputs, max_new_tokens={NEW_TOKENS}, do_sample=False, pad_token_id=0)
            answers.append(out[0, inputs.shape[1]:].tolist())
    assert "peft" not in sys.modules, "loading the merged model imported peft"
    print(json.dumps({{"answers": answers, "dtype": str(model.dtype), "class": type(model).__name__}}))
    """
)


def _load_without_peft(folder: Path, prompts: list[list[int]], tmp_path: Path) -> dict:
    """Load and run the folder in a fresh interpreter where ``import peft`` raises."""
    blocker = tmp_path / "no-peft"
    (blocker / "peft").mkdir(parents=True)
    (blocker / "peft" / "__init__.py").write_text(
        "raise ImportError('peft must not be needed to load a merged model')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(ROOT)])}
    result = subprocess.run(
        [sys.executable, "-c", NO_PEFT_SCRIPT, str(folder), json.dumps(prompts)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_merged_export_loads_without_peft_and_answers_as_base_plus_adapter(job, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    api, job_id = job
    out = tmp_path / "merged"
    result = _exported(api, job_id, out=str(out), download=False)

    assert result.path == str(out) and result.format == "merged" and result.download is None
    assert "at the base's dtype (float32)" in result.sentence and set(result.seconds) == {"merging"}
    files = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "README.md"} <= files
    assert {"chat_template.jinja", "tokenizer_config.json"} <= files
    assert not {"adapter_config.json", "adapter_model.safetensors"} & files
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".partial")], "the temporary folder stays"
    recorded = api.jobs.get_job(job_id).artifacts.merged
    assert recorded.path == str(out) and recorded.dtype == "float32" and recorded.repo_id is None

    job_record = api.jobs.get_job(job_id)
    base_dir = api.core.paths.models / "tiny-qwen3"
    tokenizer = AutoTokenizer.from_pretrained(job_record.artifacts.adapter_dir)
    prompts = _prompts(tokenizer)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    base_answers = _greedy(base, prompts)
    tuned = PeftModel.from_pretrained(base, job_record.artifacts.adapter_dir)
    tuned_answers = _greedy(tuned, prompts)
    assert tuned_answers != base_answers, "the adapter must change the answers, or this test proves nothing"

    loaded = _load_without_peft(out, prompts, tmp_path)
    assert loaded["class"] == "Qwen3ForCausalLM" and loaded["dtype"] == "torch.float32"
    assert loaded["answers"] == tuned_answers

    card = (out / "README.md").read_text()
    assert "library_name: transformers" in card and "merge_and_unload" in card
    assert f'model_id = "{out}"' in card and f"vllm serve {out}" in card


@pytest.mark.slow
def test_the_merged_transformers_snippet_runs_against_the_exported_folder(job, tmp_path):
    api, job_id = job
    out = tmp_path / "merged"
    _exported(api, job_id, out=str(out), download=False)
    snippets = {s.title: s for s in api.export.use_snippets(job_id)}
    code = snippets["Merged model with transformers"].code
    assert f'model_id = "{out}"' in code and "peft" not in code
    namespace: dict = {}
    exec(compile(code.replace("max_new_tokens=128", "max_new_tokens=4"), "merged-snippet", "exec"), namespace)  # noqa: S102
    assert type(namespace["model"]).__name__ == "Qwen3ForCausalLM"
    assert namespace["output"].shape[1] > namespace["inputs"]["input_ids"].shape[1]
    adapter = api.jobs.get_job(job_id).artifacts.adapter_dir
    assert f'adapter_id = "{adapter}"' in snippets["Adapter with transformers + peft"].code
    assert f"--lora-modules sft-{job_id}={adapter}" in snippets["Adapter with vLLM"].code
    assert snippets["Merged model with vLLM"].code == f"vllm serve {out}"


@pytest.mark.slow
def test_push_sends_a_model_repository_to_the_hub(job, online, monkeypatch):
    from huggingface_hub import ModelCard

    api, job_id = job
    with FakeHub(TOKEN, user="alice", orgs=("studio-org",)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = _exported(api, job_id, User("alice", token=TOKEN), repo_id="studio-org/tiny-merged")
        assert result.push_error is None, result.push_error
        assert list(result.seconds) == ["merging", "packing", "uploading"]
        export = api.jobs.get_job(api.core.store.latest_export(job_id).id, User("alice"))  # as her Jobs tab reads it
        assert str(api.core.paths.root) not in export.artifacts.export.sentence
        summary = job_views.summary_markdown(api, export)
        assert "Pushed to studio-org/tiny-merged." in summary and f"job {job_id} as merged" in summary
        assert result.repo_id == "studio-org/tiny-merged" and "Pushed to studio-org/tiny-merged." in result.sentence
        created = hub.requests_to("create")[-1].json
        assert created["type"] == "model" and created["visibility"] == "private"
        repo = hub.repos["studio-org/tiny-merged"]
        files = set(repo.files)
        assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "README.md"} <= files
        assert "adapter_config.json" not in files and "adapter_model.safetensors" not in files
        folder = api.export.merged_folder(job_id)  # a user's export goes into the job's own folder
        assert repo.files["model.safetensors"] == (folder / "model.safetensors").read_bytes()
        card = ModelCard(repo.files["README.md"].decode())
        assert card.data.library_name == "transformers" and "merged" in card.data.tags
        assert 'model_id = "studio-org/tiny-merged"' in card.text and "vllm serve studio-org/tiny-merged" in card.text
        recorded = api.jobs.get_job(job_id).artifacts.merged
        assert recorded.repo_id == "studio-org/tiny-merged" and recorded.path == str(folder)
        snippets = {s.title: s.code for s in api.export.use_snippets(job_id, User("alice"))}
        assert snippets["Merged model with vLLM"] == "vllm serve studio-org/tiny-merged"
        shown = use_markdown(api, job_id, User("alice"))  # what the Jobs tab's "Use this model" shows
        assert 'model_id = "studio-org/tiny-merged"' in shown and "```bash\nvllm serve studio-org/tiny-merged" in shown
        assert use_markdown(api, job_id, User("bob")) == ""
        with zipfile.ZipFile(result.download) as zipped:  # the download, made in the same job
            assert {"model.safetensors", "config.json", "README.md"} <= set(zipped.namelist())
        shown = api.export.latest(job_id, User("alice"))
        assert shown.download == Path(result.download) and str(api.core.paths.root) not in shown.sentence

        failed = _exported(api, job_id, User("alice", token=TOKEN), repo_id="someone-else/x")
        assert failed.push_error and "cannot write to" in failed.push_error and Path(failed.path).is_dir()
        assert not Path(result.download).exists(), "a new export replaces the job's last download of its format"
        assert Path(failed.download).is_file()
        assert api.export.latest(job_id, User("alice")).sentence.startswith("⚠️")


@pytest.mark.slow
def test_a_full_disk_gives_a_sentence_and_leaves_nothing(job, tmp_path):
    api, job_id = job
    before = api.jobs.get_job(job_id).artifacts.merged
    with tmpfs(tmp_path / "small", size="256k") as small:  # the merged weights are 548 KiB
        failed = _export(api, job_id, out=str(small / "merged"), download=False)
        assert failed.status is JobStatus.failed
        assert list(small.iterdir()) == [], "a half-written model was left behind"
    message = failed.error
    assert message.startswith(f"the disk at {small} is full (the merged weights alone are 0.5 MiB)"), message
    assert "nothing was left behind" in message
    assert "\n" not in message and "Traceback" not in message
    assert api.jobs.get_job(job_id).artifacts.merged == before, "a failed export is not recorded"


@pytest.mark.slow
def test_only_the_owner_exports_and_only_locally_to_a_named_folder(job, tmp_path):
    api, job_id = job
    rows = len(api.core.store.list())
    with pytest.raises(JobNotFound):
        api.export.submit(job_id, User("bob"))
    with pytest.raises(JobNotFound):  # a Space admin sees the job, but its model is the owner's to ship
        api.export.submit(job_id, User("boss", is_admin=True))
    with pytest.raises(SpecError, match="export.out: only the person at this machine"):
        api.export.submit(job_id, User("alice"), out=str(tmp_path / "elsewhere"))
    with pytest.raises(SpecError, match="export.push: no Hugging Face token"):
        api.export.submit(job_id, User("alice"), push=True)
    with pytest.raises(SpecError, match="export.repo_id: "):
        api.export.submit(job_id, User("alice", token=TOKEN), repo_id="../../etc")
    with pytest.raises(SpecError, match="export.format: "):
        api.export.submit(job_id, User("alice"), format="exe")
    with pytest.raises(SpecError, match="^export: queue an export with the Export panel"):  # not as a spec
        api.jobs.submit({"export": {"job_id": job_id, "out": "/etc"}}, user=User("alice"))
    assert not (tmp_path / "elsewhere").exists() and len(api.core.store.list()) == rows, "a refusal stored a job"
    with pytest.raises(JobNotFound):
        api.export.use_snippets(job_id, User("bob"))
    with pytest.raises(JobNotFound):
        api.export.latest(job_id, User("bob"))


@pytest.mark.slow
def test_cli_export_merged_and_gguf(job, tmp_path):
    api, job_id = job
    out = tmp_path / "cli-merged"
    env = {**os.environ, "STUDIO_DATA_DIR": str(api.core.paths.root)}
    command = [sys.executable, "-m", "backend", "export", job_id, "--merged", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().startswith(f"Merged job {job_id} into {out}")
    assert (out / "model.safetensors").is_file() and (out / "README.md").is_file()

    again = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert again.returncode == 1 and "already exists and is not an empty folder" in again.stderr
    assert "Traceback" not in again.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "backend", "show", job_id], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert ["merged", "model", str(out)] in [line.split() for line in shown.stdout.splitlines()], shown.stdout

    gguf = [sys.executable, "-m", "backend", "export", job_id, "--gguf", "q8_0", "--json"]
    result = subprocess.run(gguf, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    made = json.loads(result.stdout)
    assert made["format"] == "gguf" and made["path"].endswith("-q8_0.gguf") and "q8_0" in made["sentence"]
    assert {"merging", "converting", "checking"} <= set(made["seconds"]), made["seconds"]
    shown = subprocess.run(
        [sys.executable, "-m", "backend", "show", job_id, "--json"], capture_output=True, text=True, env=env, cwd=ROOT
    )
    check = json.loads(shown.stdout)["artifacts"]["gguf"]["quant_check"]
    assert check["rows"] > 0 and check["sentence"], check


def test_a_merged_export_a_killed_process_left_half_written_is_swept_at_start(job):
    api, job_id = job
    partial = api.core.paths.job_dir(job_id) / ".partial-merged-merged-0000"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"half")
    fresh = api.core.paths.job_dir(job_id) / ".partial-merged-merged-1111"  # another process may be writing it now
    fresh.mkdir()
    os.utime(partial, (0, 0))
    StudioAPI(api.core.paths.root, scheduler="none").close()
    assert not partial.exists() and fresh.is_dir()
    fresh.rmdir()


@pytest.mark.slow
def test_a_4bit_job_is_merged_into_the_16bit_dequantized_base(tmp_path, models_dir):
    from safetensors import safe_open

    api, job_id = _train(tmp_path / "data", models_dir, quantization={"mode": "4bit"})
    out = tmp_path / "merged-4bit"
    scheduler = Scheduler(api.core.paths, poll_interval=0.1).start()
    try:
        result = _exported(api, job_id, out=str(out), download=False)
    finally:
        scheduler.stop()
    merged = api.jobs.get_job(job_id).artifacts.merged
    assert merged.dequantized and merged.dtype == "bfloat16"
    assert "4-bit base" in result.sentence and "16-bit dequantized base" in result.sentence
    assert "16-bit dequantized base" in (out / "README.md").read_text()
    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        dtypes = {weights.get_slice(name).get_dtype() for name in weights.keys()}  # noqa: SIM118
    assert dtypes == {"BF16"}, dtypes
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config


def test_a_job_without_a_usable_adapter_is_refused_with_a_sentence(data_dir, tmp_path):
    api = StudioAPI(data_dir, scheduler="none")
    queued = api.jobs.submit(tiny_spec()).job
    with pytest.raises(SpecError, match=f"export.job_id: job {queued.id} is queued: only a job that succeeded"):
        api.export.submit(queued.id, out=str(tmp_path / "never"))
    full = api.jobs.submit(tiny_spec(lora={"enabled": False})).job
    adapter = api.core.paths.job_adapter(queued.id)
    adapter.mkdir(parents=True)  # an empty folder where the adapter should be
    for job_id in (queued.id, full.id):
        api.core.store.claim_next()
        api.core.store.finish(job_id, JobStatus.succeeded, artifacts={"adapter_dir": str(adapter)})
    with pytest.raises(SpecError, match="trained all weights"):
        api.export.submit(full.id, out=str(tmp_path / "never"))
    evaluated = api.core.store.add(parse_spec(tiny_spec(evaluate={}, benchmarks={"tasks": ["studio_arith"]})))
    api.core.store.claim_next()
    api.core.store.finish(evaluated.id, JobStatus.succeeded)
    with pytest.raises(SpecError, match="is an eval job, which has no model to export"):
        api.export.submit(evaluated.id, out=str(tmp_path / "never"))
    # An adapter that cannot be merged: the job fails with one sentence, nothing is left behind.
    broken = api.export.submit(queued.id, out=str(tmp_path / "never")).job
    with pytest.raises(ExportBusy, match=f"your export {broken.id} is still queued or running"):
        api.export.submit(queued.id, format="adapter")
    scheduler = Scheduler(api.core.paths, poll_interval=0.1).start()
    try:
        failed = wait_status(api.core.store, broken.id, {JobStatus.failed, JobStatus.succeeded}, timeout=120)
    finally:
        scheduler.stop()
    assert failed.status is JobStatus.failed and failed.error.startswith("the merge failed ("), failed.error
    assert failed.error.endswith("nothing was left behind") and "\n" not in failed.error
    assert not (tmp_path / "never").exists() and not list(tmp_path.glob(".partial*"))


def test_a_killed_export_leaves_the_last_one_in_place_and_nothing_half_written(job):
    api, job_id = job
    first = _exported(api, job_id, download=False)
    folder = Path(first.path)
    weights = (folder / "model.safetensors").read_bytes()
    export = api.export.submit(job_id, download=False).job
    store = api.core.store
    wait_for(lambda: store.get(export.id).progress.get("phase") == "merging" and store.get(export.id).pid, 120)
    partials = lambda: list(folder.parent.glob(".partial-merged-*"))  # noqa: E731
    os.killpg(store.get(export.id).pid, signal.SIGKILL)  # while it merges
    killed = wait_status(store, export.id, {JobStatus.failed, JobStatus.interrupted}, timeout=60)
    assert killed.status is JobStatus.failed
    assert (folder / "model.safetensors").read_bytes() == weights, "the previous export was touched"
    again = _exported(api, job_id, download=False)  # the next export sweeps what the killed one left
    assert Path(again.path) == folder and not partials()


def test_one_export_at_a_time_per_user_and_one_download_per_format(job):
    api, job_id = job
    alice = User("alice")
    downloads, refused, started = api.core.paths.downloads, [], time.monotonic()
    exports = lambda: [j for j in api.core.store.list() if j.spec.export and j.spec.export.format == "adapter"]  # noqa: E731
    before = len(exports())
    for _ in range(20):  # twenty quick clicks on "zip the adapter"
        asked = time.monotonic()
        try:
            api.export.submit(job_id, alice, format="adapter")
        except ExportBusy as exc:
            refused.append(time.monotonic() - asked)
            assert "is still queued or running: wait for it to end" in str(exc)
        time.sleep(0.02)
    wait_for(lambda: not api.export.latest(job_id, alice).active, 120, what="the last export to end")
    _exported(api, job_id, alice, format="adapter")  # and one more once those ended: it replaces the last zip
    assert refused and max(refused) < 1.0, refused
    made = len(exports()) - before
    assert made >= 2 and made == 21 - len(refused), (made, len(refused))
    zips = [p for p in downloads.rglob("adapter-*.zip")]
    assert len(zips) == 1, zips
    assert api.jobs.get_job(job_id).artifacts.downloads["adapter"] == str(zips[0])
    assert api.export.latest(job_id, alice).download == zips[0]
    assert api.storage_status()["download_bytes"] >= zips[0].stat().st_size  # what `backend status` says
    assert time.monotonic() - started < 120


def test_the_merged_card_carries_the_verdict_and_how_it_was_merged(job):
    from backend.core.artifacts import LearningVerdict
    from backend.hub.model_card import build_merged_card

    api, job_id = job
    record = api.jobs.get_job(job_id)
    sentence = "Held-out loss 2.31 -> 1.87 (-0.44, ±0.1) on 12 rows."
    verdict = LearningVerdict(metric="loss", label="held-out loss", verdict="improved", sentence=sentence)
    card = build_merged_card(
        dataclasses.replace(record, artifacts=record.artifacts.model_copy(update={"learning": verdict})),
        "me/tiny-merged",
        "float32",
        False,
    ).text
    assert f"**Verdict: improved.** {sentence}" in card
    assert "merged into the base at the base's dtype (float32) and saved in float32" in card
    assert "`builtin:tiny-qwen3`" in card and "| method | SFT |" in card
    assert 'model_id = "me/tiny-merged"' in card and "vllm serve me/tiny-merged" in card
