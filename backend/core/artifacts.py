"""What a job leaves behind (its artifacts), typed: one field per thing a worker, the facade or a push records.

The store keeps the artifacts as one JSON object per job row and merges updates into it key by key. Writes go through
:func:`artifact_update`, which refuses a key that is not a field here (a misspelling is an error, never a silent new
key) and values of the wrong type. Reads go through :meth:`JobArtifacts.from_stored`, which is lenient: a row written
by an older or newer version still loads, a key this version does not know is ignored (it stays in the row, so the
version that wrote it still reads it), and a value of the wrong type is left out rather than hiding the whole job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from backend.core.forecasts import Forecast
from backend.core.wording import counted


class HubPush(BaseModel):
    """Where a push put the job's adapter on the Hub (the ``hub`` artifact)."""

    model_config = ConfigDict(extra="ignore")

    repo_id: str = Field(description="the model repository, namespace/name")
    url: str | None = Field(None, description="the repository's page on the Hub endpoint used")
    commit: str | None = Field(None, description="the commit's URL")
    private: bool = Field(False, description="whether the repository is private")
    pushed_at: float | None = Field(None, description="when the push finished (Unix time)")


class HubCheckpoint(BaseModel):
    """A checkpoint on the Hub: the last one a job pushed (``hub_checkpoint``), or the one it started from
    (``resumed_from_hub``)."""

    model_config = ConfigDict(extra="ignore")

    repo_id: str = Field(description="the model repository, namespace/name; the checkpoint is its last-checkpoint/")
    step: int | None = Field(None, description="the checkpoint's global step (None: none pushed yet)")
    url: str | None = Field(None, description="the checkpoint folder's page on the Hub endpoint used")
    private: bool | None = Field(None, description="whether the repository was asked to be private")
    at: float | None = Field(None, description="when the push finished or the download was made (Unix time)")


class MergedExport(BaseModel):
    """A merged model exported from the job: the adapter folded into its base (the ``merged`` artifact)."""

    model_config = ConfigDict(extra="ignore")

    path: str = Field(description="the folder holding the merged model (safetensors, tokenizer, card)")
    dtype: str = Field(description="the dtype the weights were merged and saved in: bfloat16, float16 or float32")
    dequantized: bool = Field(False, description="whether a 4- or 8-bit job was merged into its 16-bit base")
    repo_id: str | None = Field(None, description="the Hub model repository it was pushed to (None: not pushed)")
    url: str | None = Field(None, description="the pushed repository's page on the Hub endpoint used")
    exported_at: float | None = Field(None, description="when the export finished (Unix time)")


class ExportOutcome(BaseModel):
    """What an export job made (the export job's ``export`` artifact): of which job, in what format, where it lies,
    its download, where it was pushed or why not, and the sentence that says so."""

    model_config = ConfigDict(extra="ignore")

    job_id: str = Field(description="the job whose model was exported")
    format: str = Field(description="merged, gguf or adapter")
    path: str = Field(description="the folder (merged, adapter) or file (gguf) the export wrote")
    bytes: int | None = Field(None, description="its size on disk")
    download: str | None = Field(None, description="the file offered for download (None: none asked)")
    repo_id: str | None = Field(None, description="the Hub repository it was pushed to (None: not pushed)")
    url: str | None = Field(None, description="the pushed repository's page")
    push_error: str | None = Field(None, description="why the push failed (the export itself is kept)")
    seconds: dict[str, float] = Field(default_factory=dict, description="seconds per phase: merging, converting, ...")
    sentence: str = Field("", description="what the export did, in one or two sentences")


class QuantExample(BaseModel):
    """One held-out row whose greedy answer the GGUF gave differently from the merged model."""

    model_config = ConfigDict(extra="ignore")

    prompt: str = Field(description="the row's last user message (or its prompt text), shortened")
    merged: str = Field(description="the merged model's greedy answer")
    gguf: str = Field(description="the GGUF's greedy answer")
    reference: str | None = Field(None, description="the row's reference answer, where it has one")


class QuantCheck(BaseModel):
    """A GGUF checked against the merged model it was converted from: the same rows, greedy answers on both."""

    model_config = ConfigDict(extra="ignore")

    rows: int = Field(0, description="the rows answered by both (the job's held-out rows, at most 256)")
    rows_from: str = Field("held-out", description="held-out, or training when the job held no rows out")
    scored: Literal["accuracy", "agreement"] = Field(
        "accuracy", description="accuracy against reference answers, or agreement with the merged model without them"
    )
    merged_accuracy: float | None = Field(None, description="the merged model's share of right answers")
    gguf_accuracy: float | None = Field(None, description="the GGUF's share of right answers on the same rows")
    difference: float | None = Field(None, description="gguf minus merged accuracy")
    ci95: float | None = Field(None, description="half-width of the difference's paired-bootstrap 95% interval")
    tolerance: float | None = Field(None, description="the most the GGUF may lose and still pass (a share)")
    passed: bool | None = Field(None, description="whether the GGUF lost no more than the tolerance (None: no check)")
    agreement: float | None = Field(None, description="the share of rows whose greedy answers are the same text")
    differing: int = Field(0, description="rows whose greedy answers differ")
    examples: list[QuantExample] = Field(default_factory=list, description="a few of the answers that differ")
    seconds: float | None = Field(None, description="wall time of the check")
    error: str | None = Field(None, description="why the check could not run (the GGUF is still exported)")
    sentence: str = Field("", description="the check in one sentence, as the card and the CLI say it")


class GgufExport(BaseModel):
    """A GGUF file exported from the job's merged model, with its Ollama Modelfile (the ``gguf`` artifact)."""

    model_config = ConfigDict(extra="ignore")

    path: str = Field(description="the .gguf file")
    gguf_type: str = Field(description="the tensor type: f16 or q8_0")
    bytes: int = Field(0, description="the file's size")
    modelfile: str | None = Field(None, description="the Ollama Modelfile beside it")
    modelfile_note: str | None = Field(
        None, description="why the Modelfile has no TEMPLATE (a chat template it cannot translate); None when it has"
    )
    repo_id: str | None = Field(None, description="the Hub model repository it was pushed to (None: not pushed)")
    url: str | None = Field(None, description="the pushed repository's page on the Hub endpoint used")
    exported_at: float | None = Field(None, description="when the export finished (Unix time)")
    quant_check: QuantCheck | None = Field(None, description="held-out answers of the GGUF against the merged model")
    seconds: dict[str, float] = Field(
        default_factory=dict, description="wall time per phase: converting, checking (and merging, uploading)"
    )


class AutoTuneRecord(BaseModel):
    """What auto-tune decided for the job's first attempt (the ``auto_tune`` artifact; a resume replays it)."""

    model_config = ConfigDict(extra="ignore")

    choices: list[str] = Field(default_factory=list, description="one sentence per choice, as the log says them")
    settings: dict[str, Any] = Field(default_factory=dict, description="the spec values chosen, by dotted path")
    estimate_bytes: int | None = Field(None, description="the memory estimate for the tuned spec")
    estimate_tensor_bytes: int | None = Field(None, description="the part of the estimate held by tensors")
    budget_bytes: int | None = Field(None, description="the memory the device offered (None: unknown)")


class DistributedRun(BaseModel):
    """How a job of several processes ran (the ``distributed`` artifact), read by rank 0 from torch.distributed."""

    model_config = ConfigDict(extra="ignore")

    processes: int = Field(description="ranks that trained (torch.distributed's world size)")
    backend: str = Field(description="the collective backend: gloo (CPU processes) or nccl (GPUs)")
    strategy: str = Field("ddp", description="training.distributed: ddp, fsdp2, zero2 or zero3")
    launch: str = Field("", description="the command that started the ranks (accelerate launch ...)")
    per_process_batch: int | None = Field(None, description="examples per process per step")
    gradient_accumulation_steps: int | None = Field(None, description="steps summed per optimizer step")
    global_batch: int | None = Field(None, description="examples per optimizer step over every process")

    def describe(self) -> str:
        """One line for the job summary.

        >>> DistributedRun(processes=2, backend="gloo", per_process_batch=8, global_batch=16).describe()
        '2 processes, ddp over gloo, 8 examples per process, 16 per step'
        """
        line = f"{self.processes} processes, {self.strategy} over {self.backend}"
        if self.per_process_batch is not None:
            line += f", {counted(self.per_process_batch, 'example')} per process"
        if self.global_batch is not None:
            line += f", {self.global_batch} per step"
        return line


# ``regressed``: the method's metric rose or held, but a guard on what the user cares about fell (the model got worse).
Verdict = Literal["improved", "no_change", "worse", "regressed", "no_signal"]


VERDICT_WORDS = {
    "improved": "improved",
    "no_change": "no change",
    "worse": "worse",
    "regressed": "got worse",
    "no_signal": "learned nothing",
}


class GuardCheck(BaseModel):
    """One capability guard of a verdict: a score the user cares about, start -> tuned on the same held-out rows or
    benchmark items, and whether it fell beyond its interval."""

    model_config = ConfigDict(extra="ignore")

    metric: str = Field(description="the evaluation key (exact_match, reference_logprob, bench:arith, ...)")
    label: str = Field(description="the guard as people say it: held-out accuracy")
    before: float | None = Field(None, description="the start's score (the parent's adapter, else the base)")
    after: float | None = Field(None, description="the tuned model's score")
    delta: float | None = Field(None, description="after minus before")
    ci95: float | None = Field(None, description="half-width of the 95% interval of delta")
    rows: int = Field(0, description="the rows or items it was scored on")
    higher_is_better: bool = Field(True, description="whether a rise is better")
    rate: bool = Field(False, description="whether it is a share (shown in percent and points)")
    fell: bool = Field(False, description="whether it got worse beyond its interval (and its tolerance)")
    sentence: str = Field("", description="the guard in words: held-out accuracy 41% -> 3% (-38 points, ±6)")


class DriftCheck(BaseModel):
    """How far training moved the model from where it started: the mean per-token KL(tuned || start) on the tuned
    model's own greedy answers to held-out prompts (backend/training/drift.py). A caution beside the verdict, never a
    guard of it."""

    model_config = ConfigDict(extra="ignore")

    mean: float | None = Field(None, description="KL per answer token (nats), averaged per answer, then over answers")
    ci95: float | None = Field(None, description="half-width of the mean's bootstrap 95% interval over the answers")
    rows: int = Field(0, description="held-out prompts answered")
    tokens: int = Field(0, description="answer tokens scored in all")
    reference: Literal["base", "parent"] = Field("base", description="what the KL is from: the base or the parent")
    threshold: float | None = Field(None, description="the most a healthy example run drifted, with a margin")
    exceeds: bool = Field(False, description="whether the drift is beyond the threshold (the verdict then says so)")
    seconds: float | None = Field(None, description="wall time of the measurement")
    skipped: str | None = Field(None, description="why there is no figure (a reward model writes no answers)")


class LearningVerdict(BaseModel):
    """Did training make the model better? The job's own metric before and after, on held-out rows (``learning``)."""

    model_config = ConfigDict(extra="ignore")

    metric: str = Field(description="the evaluation key the verdict reads (exact_match, preference_accuracy, ...)")
    label: str = Field(description="the metric as people say it: held-out accuracy")
    before: float | None = Field(None, description="the score where the job started: the parent's adapter, else base")
    after: float | None = Field(None, description="the tuned model's score")
    delta: float | None = Field(None, description="after minus before")
    ci95: float | None = Field(None, description="half-width of the 95% interval of delta, from the rows themselves")
    rows: int = Field(0, description="held-out rows (or episodes) the scores come from")
    verdict: Verdict = Field(description="improved, no_change, worse, regressed (a guard fell) or no_signal")
    sentence: str = Field(description="the verdict in one sentence, as the Jobs tab, model card and CLI show it")
    method_sentence: str = Field("", description="what the method's own metric did, before the guards had their say")
    base: float | None = Field(None, description="the base model's score, when the job started from a parent")
    start: Literal["base", "parent"] = Field("base", description="what 'before' is")
    higher_is_better: bool = Field(True, description="whether a rise is an improvement (a loss: False)")
    rate: bool = Field(False, description="whether the metric is a share of rows (shown in percent and points)")
    guards: list[GuardCheck] = Field(
        default_factory=list, description="the capability guards scored with it; one that fell makes it 'regressed'"
    )
    drift: DriftCheck | None = Field(None, description="KL from the start on its own answers: a caution, not a guard")

    @property
    def word(self) -> str:
        """The verdict as people say it: improved, no change, worse, learned nothing."""
        return VERDICT_WORDS.get(self.verdict, self.verdict)


class SignalWatch(BaseModel):
    """GRPO's live check that the run has something to learn from (the ``signal`` artifact)."""

    model_config = ConfigDict(extra="ignore")

    warning: str | None = Field(None, description="what is wrong and what to try, while it holds (None: signal)")
    conditions: list[str] = Field(default_factory=list, description="the conditions that held on the last steps")
    since_step: int | None = Field(None, description="the first step of the current run of steps without signal")
    consecutive: int = Field(0, description="logged steps in a row without signal")
    steps_logged: int = Field(0, description="training steps logged so far")
    steps_with_signal: int = Field(0, description="logged steps on which some group's completions scored differently")
    stopped_early: bool = Field(False, description="whether training.stop_when_no_signal ended the run")

    @property
    def shown(self) -> bool:
        """Whether there is anything to say: a warning that holds, or a run it stopped."""
        return bool(self.warning or self.stopped_early)

    @property
    def held(self) -> str | None:
        """How long the warning has held, as the surfaces say it (None when unknown).

        >>> SignalWatch(warning="w", since_step=2, consecutive=3).held
        'since step 2, 3 logged steps in a row'
        """
        if self.since_step is None or not self.consecutive:
            return None
        return f"since step {self.since_step}, {self.consecutive} logged steps in a row"


class BenchmarkScore(BaseModel):
    """One lm-evaluation-harness task on every side, on the same items: values, standard errors, the paired delta."""

    model_config = ConfigDict(extra="ignore")

    metric: str = Field(description="the lm-eval metric read (acc, exact_match, ...), a share of items")
    skill: str = Field("", description="what the task measures, as a short phrase (general knowledge)")
    n: int = Field(0, description="items scored on each side (the same items)")
    higher_is_better: bool = Field(True, description="whether a rise is an improvement")
    base: float | None = Field(None, description="the base model's score (adapters off)")
    start: float | None = Field(None, description="a staged job's parent adapter's score (None: not staged)")
    tuned: float | None = Field(None, description="the job's adapter's score (None: a base model was scored)")
    base_stderr: float | None = Field(None, description="lm-eval's standard error of base")
    start_stderr: float | None = Field(None, description="lm-eval's standard error of start")
    tuned_stderr: float | None = Field(None, description="lm-eval's standard error of tuned")
    delta: float | None = Field(None, description="tuned minus where the job started (start, else base)")
    ci95: float | None = Field(None, description="half-width of delta's paired-bootstrap 95% interval over the items")
    dropped: bool = Field(False, description="whether tuned fell and the interval excludes zero: a skill lost")
    sentence: str = Field("", description="the task's outcome in one sentence")


class BenchmarkReport(BaseModel):
    """The ``benchmarks`` artifact: lm-eval tasks scored on base, start and tuned, and the skills that were lost."""

    model_config = ConfigDict(extra="ignore")

    tasks: dict[str, BenchmarkScore] = Field(default_factory=dict, description="per task name, its scores")
    limit: int | None = Field(None, description="items asked per task (None: each task's default)")
    drops: list[str] = Field(default_factory=list, description="one sentence per task whose score fell for sure")
    scored: str = Field("", description="what was scored: a job's adapter or a model")
    seconds: float | None = Field(None, description="wall time of the whole benchmark run")
    error: str | None = Field(None, description="why the benchmarks could not run (the job still succeeded)")


class JobArtifacts(BaseModel):
    """A job's artifacts; every field is None until something records it."""

    model_config = ConfigDict(extra="ignore")

    # Where the job's files are (recorded when the worker starts).
    job_dir: str | None = Field(None, description="the job's folder under the data dir")
    log_file: str | None = Field(None, description="the worker's log file")
    output_dir: str | None = Field(None, description="the trainer's output folder (its checkpoints)")
    # How the worker set the job up.
    parent_job_id: str | None = Field(None, description="the job this one continues (staged training)")
    parent_adapter: str | None = Field(None, description="the parent's adapter folder training started from")
    environment: str | None = Field(None, description="the environment's one-line summary: name, kind, URL, tools")
    environment_server_pid: int | None = Field(None, description="the built-in environment server's process id")
    auto_tune: AutoTuneRecord | None = Field(None, description="auto-tune's choices for this machine")
    distributed: DistributedRun | None = Field(None, description="a job of several processes: ranks, backend, batch")
    resumed_from: str | None = Field(None, description="the checkpoint a resumed attempt continued from (None: start)")
    interruptions: list[dict[str, Any]] | None = Field(
        None,
        description="each time the app stopped under the running job: the step it had logged (at_step), when (at), "
        "and whether it was queued again by itself (resumed)",
    )
    preflight_warnings: list[str] | None = Field(None, description="pre-flight's warnings at submission")
    # What training produced.
    adapter_dir: str | None = Field(None, description="the saved adapter and tokenizer (a succeeded job has it)")
    final_metrics: dict[str, Any] | None = Field(None, description="the numbers of the trainer's last log row")
    global_step: int | None = Field(None, description="optimizer steps done")
    reporting_overhead_s: float | None = Field(None, description="seconds spent reporting to the store")
    performance: dict[str, Any] | None = Field(None, description="the run's speed figures (PerformanceMeter.summary)")
    evaluation: dict[str, Any] | None = Field(None, description="before/after scores on held-out rows, or an error")
    environment_evaluation: dict[str, Any] | None = Field(
        None, description="base and tuned success rate and reward over the same episodes, or an error"
    )
    learning: LearningVerdict | None = Field(
        None,
        description="did training help: the method's metric, before -> "
        "after on held-out rows, with its interval and verdict",
    )
    signal: SignalWatch | None = Field(None, description="GRPO: whether the run had anything to learn from")
    forecast: Forecast | None = Field(
        None, description="rollout jobs: the learnability forecast made before training (backend/core/forecasts.py)"
    )
    benchmarks: BenchmarkReport | None = Field(None, description="lm-eval benchmarks on base, start and tuned")
    # How the attempt ended (a resume clears these: ATTEMPT_END_ARTIFACTS).
    cancelled_at_step: int | None = Field(None, description="the step a cancelled attempt stopped at")
    cancel_note: str | None = Field(None, description="how the cancel went (e.g. killed after the grace period)")
    # The Hub.
    hub: HubPush | None = Field(None, description="where the adapter was pushed")
    hub_error: str | None = Field(None, description="why the last push failed (None again once one succeeds)")
    hub_checkpoint: HubCheckpoint | None = Field(
        None, description="where checkpoints are pushed as they are saved, and the last step pushed"
    )
    hub_checkpoint_error: str | None = Field(
        None, description="why the last checkpoint push failed (None again once one succeeds); the job went on"
    )
    resumed_from_hub: HubCheckpoint | None = Field(
        None, description="the pushed checkpoint (repo and step) the job downloaded and continued from"
    )
    # Exports.
    merged: MergedExport | None = Field(None, description="the last merged-model export: folder, dtype, Hub repo")
    downloads: dict[str, str] | None = Field(
        None, description="the one download of each export format (merged, gguf, adapter): a new export replaces it"
    )
    export: ExportOutcome | None = Field(None, description="an export job's result (the job it exported, its files)")

    gguf: GgufExport | None = Field(None, description="the last GGUF export: file, type, Modelfile, quant check")

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> JobArtifacts:
        """The artifacts of a stored row: unknown keys ignored, a value of the wrong type left out."""
        known = {key: value for key, value in stored.items() if key in cls.model_fields}
        try:
            return cls.model_validate(known)
        except ValidationError as exc:
            bad = {error["loc"][0] for error in exc.errors() if error["loc"]}
            return cls.model_validate({key: value for key, value in known.items() if key not in bad})

    def stored(self) -> dict[str, Any]:
        """The artifacts as JSON, with only the keys that were recorded (as the row holds them)."""
        return self.model_dump(mode="json", exclude_unset=True)


class UnknownArtifact(ValueError):
    """An artifact update naming a key that is not a JobArtifacts field."""


def artifact_update(update: Mapping[str, Any]) -> dict[str, Any]:
    """A partial update checked against JobArtifacts, as JSON ready to merge into the row.

    UnknownArtifact for a key that is not a field; pydantic's ValidationError for a value of the wrong type.

    >>> artifact_update({"global_step": 3, "resumed_from": None})
    {'global_step': 3, 'resumed_from': None}
    >>> artifact_update({"adapter_path": "x"})  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    UnknownArtifact: 'adapter_path' is not a job artifact; the artifacts are adapter_dir, auto_tune, ...
    """
    unknown = sorted(set(update) - set(JobArtifacts.model_fields))
    if unknown:
        raise UnknownArtifact(
            f"{', '.join(map(repr, unknown))} is not a job artifact; the artifacts are "
            f"{', '.join(sorted(JobArtifacts.model_fields))}"
        )
    checked = JobArtifacts.model_validate(dict(update)).model_dump(mode="json", include=set(update))
    return {key: checked[key] for key in update}
