"""Playing whole episodes outside the trainer, with the same chat template and tool loop GRPO uses.

Used by the dry run (one episode, transcript shown before queueing) and by the success-rate evaluation (N episodes
by the base and the tuned model under the same seeds). Like TRL: the environment's ``reset`` observation is appended
to the last prompt message, tool calls are parsed with TRL's ``parse_response``, a tool that raises answers with
``{"error": ...}``, and ``max_completion_length`` bounds the whole episode (model turns plus tool results).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from backend.environments.adapter import OpenEnvEpisode, episode_reward, tool_methods
from backend.environments.connection import EnvironmentUnavailable


@dataclass
class Episode:
    """One played episode: the conversation, its reward and success, tool-call counts and why it stopped."""

    messages: list[dict[str, Any]]  # the prompt (with the reset observation) and every turn after it
    prompt_messages: int  # how many of ``messages`` are the prompt
    reward: float
    success: bool
    done: bool
    tool_calls: int
    tool_failures: int
    completion_tokens: int
    stop_reason: str
    seed: int
    # One entry per tool answer: its index in ``messages``, the reward the environment gave for that step (None when
    # it gave none) and whether the episode had ended with it.
    steps: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # the environment stopped answering: why (the episode then counts as no success)
    over: bool = True  # False for a snapshot of an episode still being played

    @property
    def turns(self) -> list[dict[str, Any]]:
        """The messages after the prompt: the model's turns and the tools' answers."""
        return self.messages[self.prompt_messages :]

    def to_dict(self) -> dict[str, Any]:
        """The episode as plain JSON-ready data."""
        return asdict(self)

    def transcript(self) -> str:
        """The episode as Markdown, for people: prompt, each model turn with its tool calls, each tool result."""
        lines = []
        for i, message in enumerate(self.messages):
            role = message["role"]
            head = f"**{role}**" + (" (prompt)" if i < self.prompt_messages else "")
            if role == "tool":
                head = f"**tool `{message.get('name', '?')}`**"
            lines.append(head)
            if message.get("reasoning_content"):  # a thinking model's reasoning: shown, it is most of the tokens
                lines.append(f"> *reasoning:* {' '.join(str(message['reasoning_content']).split())}")
            if message.get("content"):
                lines.append(f"```\n{message['content']}\n```")
            for call in message.get("tool_calls") or []:
                fn = call.get("function", {})
                lines.append(f"- calls `{fn.get('name')}` with `{fn.get('arguments')}`")
        verdict = "success" if self.success else "no success"
        lines.append(
            f"**result**: reward {self.reward:g} ({verdict}); {self.tool_calls} tool call(s), "
            f"{self.tool_failures} failed; {self.completion_tokens} tokens; stopped: {self.stop_reason}"
        )
        return "\n\n".join(lines)


@dataclass
class EpisodeSettings:
    """How an episode is sampled: token and turn budgets, temperature, top-p and chat-template options."""

    max_completion_length: int
    max_iterations: int
    temperature: float = 1.0
    top_p: float = 1.0
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def sampling(self) -> dict[str, Any]:
        """``generate``'s sampling arguments: greedy at temperature 0."""
        if self.temperature <= 0:
            return {"do_sample": False}
        return {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p}

    @classmethod
    def from_spec(cls, spec) -> EpisodeSettings:
        """The settings an online job's spec asks for (its ``rollout`` part)."""
        g = spec.rollout
        kwargs = {"enable_thinking": g.enable_thinking} if g.enable_thinking is not None else {}
        return cls(
            g.max_completion_length, spec.environment.max_tool_calling_iterations, g.temperature, g.top_p, kwargs
        )


def opening_messages(environment: OpenEnvEpisode, row: dict[str, Any]) -> list[dict[str, Any]]:
    """Start an episode on ``row`` and return its prompt as TRL builds it: the row's prompt (plain text as one user
    message) with the environment's reset observation joined to the last message."""
    prompt = row.get("prompt", [{"role": "user", "content": ""}])
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    observation = environment.reset(**row)
    if observation:
        messages[-1] = {**messages[-1], "content": messages[-1]["content"] + observation}
    return messages


def _render(tokenizer, messages, tools, settings: EpisodeSettings) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages,
        tools=tools or None,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        **settings.chat_template_kwargs,
    )["input_ids"]
    return list(ids[0]) if ids and isinstance(ids[0], list) else list(ids)


def _call_tool(tools: dict[str, Any], call: dict[str, Any]) -> tuple[str, Any, bool]:
    """(name, result, failed) the way TRL runs a tool call: an exception becomes ``{"error": message}``."""
    function = call.get("function", {}) if call.get("type", "function") == "function" else {}
    name = function.get("name", call.get("name", "unknown"))
    try:
        if not function:
            raise ValueError(f"Unsupported tool call type: {call.get('type')}")
        if name not in tools:
            raise ValueError(f"Tool {name} not found.")
        return name, tools[name](**(function.get("arguments") or {})), False
    except Exception as exc:  # noqa: BLE001 - the model reads the error, as in training
        return name, {"error": str(exc)}, True


EPISODE_ENDED = "the episode ended"  # the stop reason when the environment ended the episode


@dataclass
class _Play:
    """One episode in progress: its environment, conversation, tools and token count so far."""

    environment: OpenEnvEpisode
    messages: list[dict[str, Any]]
    prompt_messages: int
    methods: list[Any]
    prompt_ids: list[int]
    start: int
    seed: int
    adapter: str | None = None  # the row's adapter in a mixed-adapter batch (None: the model as it is)
    generator: Any = None  # the episode's own random stream (per-row sampling), or None
    steps: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    failures: int = 0
    iterations: int = 0
    used: int = 0
    stop_reason: str = "the model answered without a tool call"
    over: bool = False

    def budget(self, settings: EpisodeSettings) -> int:
        """Tokens the episode may still take (model turns and tool results count alike)."""
        return settings.max_completion_length - (len(self.prompt_ids) - self.start)


def _generate(
    model,
    tokenizer,
    prompts: list[list[int]],
    max_new_tokens: int,
    settings: EpisodeSettings,
    adapters: list[str] | None = None,
    generators: list[Any] | None = None,
) -> list[list[int]]:
    """One batched ``generate`` over left-padded prompts: each row's new tokens, cut after its end-of-turn token.

    ``adapters`` names each row's adapter (PEFT's mixed-adapter batch: ``__base__`` is the adapter off), so base and
    tuned rows share one model and one call; ``generators`` samples each row from its own random stream (both sides
    of an episode then draw the same numbers, and a row's tokens do not depend on its batch)."""
    import torch

    from backend.models.mixed_batch import RowSeededSampling, row_seeded_sampling, side_kwargs

    width = max(len(ids) for ids in prompts)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts], device=model.device)
    sampling = settings.sampling()
    if generators is not None and sampling["do_sample"]:
        sampling = row_seeded_sampling(settings.temperature, settings.top_p, RowSeededSampling(generators))
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            **sampling,
            **side_kwargs(adapters or [None] * len(prompts)),
            pad_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
        )
    completions = []
    for row in out[:, width:].tolist():
        if tokenizer.eos_token_id in row:
            row = row[: row.index(tokenizer.eos_token_id) + 1]
        completions.append(row)
    return completions


def _take_turn(play: _Play, completion: list[int], tokenizer, settings: EpisodeSettings) -> None:
    """Read one model turn into the episode: parse its tool calls (TRL's ``parse_response``), run them, and decide
    whether the episode goes on."""
    from trl.chat_template_utils import parse_response

    completion = completion[: max(play.budget(settings), 0)]
    play.used = len(play.prompt_ids) - play.start + len(completion)
    parsed = parse_response(tokenizer, completion, prefix=play.prompt_ids, tools=play.methods)
    play.messages.append(parsed)
    tool_calls = parsed.get("tool_calls") or []
    if not tool_calls:
        if play.used >= settings.max_completion_length:
            _stop(play, "max_completion_length reached")
        play.over = True
        return
    if play.iterations >= settings.max_iterations:
        _stop(play, "max_tool_calling_iterations reached")
        return
    play.iterations += 1
    tools = {m.__name__: m for m in play.methods}
    for call in tool_calls:
        play.calls += 1
        before = len(play.environment.rewards)
        name, result, failed = _call_tool(tools, call)
        play.failures += failed
        content = result if isinstance(result, list) else str(result)
        play.messages.append({"role": "tool", "name": name, "content": content})
        rewards = play.environment.rewards
        play.steps.append(
            {
                "message": len(play.messages) - 1,
                "reward": rewards[-1] if len(rewards) > before else None,
                "done": bool(play.environment.done),
            }
        )
    play.prompt_ids = _render(tokenizer, play.messages, play.methods, settings)
    if getattr(play.environment, "_unreachable", None):  # the server is gone: nothing more can happen
        play.stop_reason, play.over = "the environment stopped answering", True
    elif play.environment.done:
        # The model still gets to read the last tool result; the episode itself is over.
        play.stop_reason = EPISODE_ENDED


def _stop(play: _Play, limit: str) -> None:
    """End the episode at a limit of the rollout's (``limit`` says which), unless the environment had ended it
    already: then its own end is why it stopped, whatever limit the model's last turn ran into."""
    play.stop_reason = EPISODE_ENDED if play.environment.done else limit
    play.over = True


def _finish(play: _Play) -> Episode:
    """The episode as played so far (``over`` says whether it ended). An environment that stopped answering makes it
    no success, with ``error`` saying why, rather than an exception: the other episodes of the batch stand."""
    environment = play.environment
    error = None
    try:
        reward = environment.get_reward()
    except EnvironmentUnavailable as exc:
        reward, error = 0.0, str(exc)
    success = error is None and episode_reward(environment.rewards, environment.done, environment.failed, "success") > 0
    return Episode(
        messages=list(play.messages),
        prompt_messages=play.prompt_messages,
        reward=reward,
        success=success,
        done=environment.done,
        tool_calls=play.calls,
        tool_failures=play.failures,
        completion_tokens=play.used,
        stop_reason=f"the environment stopped answering: {error}" if error else play.stop_reason,
        seed=play.seed,
        steps=list(play.steps),
        error=error,
        over=play.over or error is not None,
    )


def iter_episodes(
    model,
    tokenizer,
    environments: list[OpenEnvEpisode],
    rows: list[dict[str, Any]],
    settings: EpisodeSettings,
    seeds: list[int],
    adapters: list[str] | None = None,
    row_seeded: bool = False,
) -> Iterator[list[Episode]]:
    """Episodes of ``model``, one per (environment session, dataset row), played side by side, yielded as they stand
    after the opening and after every round of model turns (the last yield has every episode over).

    Each round of model turns is one batched ``generate`` over every episode still going (left-padded), so N episodes
    cost about as many ``generate`` calls as one. ``adapters`` gives each episode's adapter in a mixed-adapter batch
    (base and tuned episodes in the same calls, on one model). Sampling is seeded once, with the first seed; with
    ``row_seeded`` every episode samples from its own stream seeded by its seed instead, so two episodes with the same
    seed (one per side) draw the same random numbers."""
    import torch
    from trl.chat_template_utils import add_response_schema

    tokenizer = add_response_schema(tokenizer)
    adapters = adapters or [None] * len(environments)  # type: ignore[list-item]
    plays = []
    for environment, row, seed, adapter in zip(environments, rows, seeds, adapters, strict=True):
        messages = opening_messages(environment, row)
        methods = tool_methods(environment)
        prompt_ids = _render(tokenizer, messages, methods, settings)
        generator = torch.Generator(device=model.device).manual_seed(int(seed)) if row_seeded else None
        plays.append(
            _Play(environment, messages, len(messages), methods, prompt_ids, len(prompt_ids), seed, adapter, generator)
        )
    yield [_finish(play) for play in plays]
    torch.manual_seed(seeds[0])
    while True:
        for play in plays:
            if not play.over and play.budget(settings) <= 0:
                _stop(play, "max_completion_length reached")
        going = [play for play in plays if not play.over]
        if not going:
            break
        completions = _generate(
            model,
            tokenizer,
            [play.prompt_ids for play in going],
            max(play.budget(settings) for play in going),
            settings,
            [play.adapter for play in going] if any(play.adapter for play in going) else None,  # type: ignore[misc]
            [play.generator for play in going] if row_seeded else None,
        )
        for play, completion in zip(going, completions):
            _take_turn(play, completion, tokenizer, settings)
        if all(play.over for play in plays):
            break
        yield [_finish(play) for play in plays]
    yield [_finish(play) for play in plays]


def play_episodes(
    model,
    tokenizer,
    environments: list[OpenEnvEpisode],
    rows: list[dict[str, Any]],
    settings: EpisodeSettings,
    seeds: list[int],
) -> list[Episode]:
    """Episodes of ``model``, one per (environment session, dataset row), played side by side (``iter_episodes``);
    the finished episodes. An environment that stopped answering raises ``EnvironmentUnavailable``."""
    *_, played = iter_episodes(model, tokenizer, environments, rows, settings, seeds)
    for episode in played:
        if episode.error:
            raise EnvironmentUnavailable(episode.error)
    return played


def play_episode(
    model, tokenizer, environment: OpenEnvEpisode, row: dict[str, Any], settings: EpisodeSettings, seed: int
) -> Episode:
    """One episode of ``model`` in ``environment`` starting from dataset ``row``."""
    return play_episodes(model, tokenizer, [environment], [row], settings, [seed])[0]


def episode_start(rows: int, seed: int, i: int) -> tuple[int, int]:
    """Episode ``i`` of a numbered series over ``rows`` dataset rows: (its row, its seed). The success-rate
    evaluation numbers its episodes so, and the arena repeats them by the same rule.

    >>> episode_start(3, 42, 0), episode_start(3, 42, 4)
    ((0, 42), (1, 46))
    """
    return i % rows, seed + i


def success_rates(
    model,
    tokenizer,
    factory: type[OpenEnvEpisode],
    rows: list[dict[str, Any]],
    settings: EpisodeSettings,
    episodes: int,
    seed: int,
    compare_base: bool = True,
    start_adapter: str | None = None,
    sessions: int = 1,
    on_episodes: Callable[[int, int, str], None] | None = None,
) -> dict[str, Any]:
    """Success rate and mean reward of the tuned model, of where a staged job started (``start_adapter``, the parent's
    adapter loaded beside the tuned one) and of the base (adapter switched off), over the same episodes.

    Episode ``i`` plays row ``i % len(rows)`` with seed ``seed + i`` (``episode_start``) for every model, greedily
    (as every method's held-out evaluation is: one sample per episode would measure the sampling's luck as much as
    the model); ``per_row`` keeps each episode's success per side, for the learning verdict's interval. The sessions
    TRL kept open for its rollouts are closed first (a server with exactly the sessions training needed has none
    left otherwise); then up to ``sessions`` episodes are played side by side, one batched model turn at a time.
    ``on_episodes(k, n, sides)`` is told, as each batch ends, that k of the n episodes of every side were played.
    """
    sides = ["tuned", *(["start"] if start_adapter is not None else [])]
    sides += ["base"] if compare_base and hasattr(model, "disable_adapter") else []
    total, played_so_far = episodes * len(sides), [0]
    sides_text = ", then ".join(sides)
    if on_episodes is not None:
        on_episodes(0, total, sides_text)
    factory._close_all()
    environments: list[OpenEnvEpisode] = []
    settings = replace(settings, temperature=0.0)
    try:
        environments += [factory() for _ in range(max(1, min(sessions, episodes)))]
        successes: dict[str, list[float]] = {}

        def play_all(side: str) -> dict[str, Any]:
            played: list[Episode] = []
            for first in range(0, episodes, len(environments)):
                numbers = range(first, min(first + len(environments), episodes))
                starts = [episode_start(len(rows), seed, i) for i in numbers]
                played += play_episodes(
                    model,
                    tokenizer,
                    environments[: len(starts)],
                    [rows[row] for row, _ in starts],
                    settings,
                    [episode_seed for _, episode_seed in starts],
                )
                played_so_far[0] += len(starts)
                if on_episodes is not None:
                    on_episodes(played_so_far[0], total, sides_text)
            successes[side] = [float(e.success) for e in played]
            return {
                "success_rate": sum(e.success for e in played) / len(played),
                "mean_reward": sum(e.reward for e in played) / len(played),
                "tool_calls_per_episode": sum(e.tool_calls for e in played) / len(played),
            }

        was_training = model.training
        model.eval()
        result: dict[str, Any] = {"episodes": episodes, "tuned": play_all("tuned")}
        if start_adapter is not None:
            tuned = model.active_adapter
            model.set_adapter(start_adapter)
            try:
                result["start"] = play_all("start")
            finally:
                model.set_adapter(tuned)
        if compare_base and hasattr(model, "disable_adapter"):
            with model.disable_adapter():
                result["base"] = play_all("base")
        model.train(was_training)
        result["per_row"] = {side: {"success": values} for side, values in successes.items()}
        return result
    finally:
        for environment in environments:
            environment._close()
