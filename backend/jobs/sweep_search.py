"""What a sweep tries: the fields it varies (``--vary PATH=V1,V2`` or ``PATH=LO..HI``), the points of its grid or a
random sample of them, each point's child spec (validated, errors naming the field), and Optuna's TPE asked for the
next point and told each child's result.

Optuna is imported only by a TPE sweep; its SQLite file is ``<data dir>/sweeps/optuna.db``, one study per sweep,
named by the sweep's id, so a TPE sweep carries on after a restart.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel

from backend.core.spec import JobSpec, SpecError, parse_spec, with_settings

Search = Literal["grid", "random", "tpe"]
SEARCHES: tuple[str, ...] = ("grid", "random", "tpe")
MAX_CHILDREN = 64  # a sweep's children at most: each is a whole training job

# The fields no sweep varies, and what each names: who a child belongs to, code the app would trust, a job, a place on
# the server, where the user's Hub token reads or writes, a server the studio connects to. The one rule every sweep
# meets (grid, random or TPE; the CLI, the form or any later door): ``parse_vary`` says it at once, and ``child_spec``,
# which builds every child, holds to it. A child's other fields still pass the door a submit passes.
NOT_VARIED: dict[str, str] = {
    "owner": "who the children belong to: whoever submits the sweep",
    "model.trust_remote_code": "whether a model repository's own code runs",
    "model.parent_job_id": "a job to continue",
    "evaluate.job_id": "a job to score",
    "export": "an export of a job (its id, a folder, where your Hub token writes)",
    "training.resume_from_hub": "a Hub repository read with your token",
    "output.hub_repo_id": "where your Hub token writes",
    "output.push_to_hub": "whether your Hub token writes",
    "output.push_checkpoints": "whether your Hub token writes",
    "output.private": "who may read what your Hub token writes",
    "dataset.source": "where the data is read from (a file on the server among them)",
    "distillation.teacher": "a model or a job to learn from",
    "rollout.rewards": "the rewards (a reward model's job, path or Hub id among them)",
    "environment.name": "a server the studio connects to",
}
# A field whose name ends so names a path, a folder, a file, an id, an address, a token or code: not varied either,
# a field added later included. The base model's name is the exception: a sweep may compare Hub models, and the door
# judges each child's as it judges a submit's.
_NAMING_ENDS = ("_path", "_dir", "_file", "_id", "_url", "token", "_code")
_VARIED_ANYWAY = frozenset({"model.name_or_path"})


@dataclass(frozen=True)
class Dimension:
    """One varied field: a list of values (as typed), or a numeric range ``low..high`` (log-scaled when ``log``)."""

    path: str
    values: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    integer: bool = False

    @property
    def is_range(self) -> bool:
        """Whether the field is varied over a range rather than listed values."""
        return self.low is not None

    @property
    def log(self) -> bool:
        """Ranges spanning two orders of magnitude or more (learning rates) are searched on a log scale."""
        return self.is_range and self.low > 0 and self.high / self.low >= 100  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        """The dimension as stored and as ``--json`` prints it."""
        if self.is_range:
            return {"path": self.path, "low": self.low, "high": self.high, "integer": self.integer, "log": self.log}
        return {"path": self.path, "values": list(self.values)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Dimension:
        """A stored dimension."""
        if "low" in data:
            return cls(data["path"], low=data["low"], high=data["high"], integer=bool(data.get("integer")))
        return cls(data["path"], values=tuple(str(v) for v in data["values"]))

    def describe(self) -> str:
        """``training.learning_rate in 1e-05..0.01`` or ``training.learning_rate = 0.0001, 0.001``."""
        if self.is_range:
            return f"{self.path} in {self.low:g}..{self.high:g}" + (" (log scale)" if self.log else "")
        return f"{self.path} = {', '.join(self.values)}"


def _number(text: str, setting: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError([f"--vary {setting}: {json.dumps(text)} is not a number (a range is LOW..HIGH)"]) from None
    if not math.isfinite(value):
        raise SpecError([f"--vary {setting}: a range's bounds must be finite numbers, not {text}"])
    return value


def parse_vary(setting: str) -> Dimension:
    """One ``--vary`` setting: ``PATH=V1,V2,...`` (values, as ``--set`` reads them) or ``PATH=LOW..HIGH`` (a range).

    >>> parse_vary("training.learning_rate=1e-4,5e-4").values
    ('1e-4', '5e-4')
    >>> parse_vary("training.learning_rate=1e-5..1e-2").log
    True
    """
    path, sep, text = setting.partition("=")
    path = path.strip()
    if not sep or not path or not all(path.split(".")) or not text.strip():
        raise SpecError([f"--vary {setting}: write it as PATH=V1,V2,... or PATH=LOW..HIGH"])
    if problem := unvaried_problem(path):
        raise SpecError([problem])
    if ".." in text:
        low_text, _, high_text = (part.strip() for part in text.partition(".."))
        low, high = _number(low_text, path), _number(high_text, path)
        if not low < high:
            raise SpecError([f"--vary {path}: the range {text} must go from a lower to a higher number"])
        integer = all(part.lstrip("-+").isdigit() for part in (low_text, high_text))
        return Dimension(path, low=low, high=high, integer=integer)
    values = tuple(value.strip() for value in text.split(","))
    if not all(values):
        raise SpecError([f"--vary {path}: an empty value in {json.dumps(text)}; separate values with commas"])
    if len(set(values)) != len(values):
        raise SpecError([f"--vary {path}: a value is listed twice in {json.dumps(text)}"])
    return Dimension(path, values=values)


def _field_paths(model: type[BaseModel] = JobSpec, prefix: str = "") -> list[str]:
    """Every field's dotted path in the spec (a part's fields, a list of parts' fields, under the part's name)."""
    paths = []
    for name, info in model.model_fields.items():
        parts = [a for a in (info.annotation, *get_args(info.annotation)) if isinstance(a, type)]
        nested = next((a for a in parts if issubclass(a, BaseModel)), None)
        paths += _field_paths(nested, f"{prefix}{name}.") if nested is not None else [f"{prefix}{name}"]
    return paths


@functools.cache
def _not_varied() -> dict[str, str]:
    named = {
        path: "a job, a file or a place on the server or the Hub"
        for path in _field_paths()
        if path.rsplit(".", 1)[-1].endswith(_NAMING_ENDS) and path not in _VARIED_ANYWAY
    }
    return {**named, **NOT_VARIED}


def unvaried_problem(path: str) -> str | None:
    """Why a sweep may not vary ``path`` (it is, holds or lies within a field of ``NOT_VARIED`` or one whose name says
    it names a path, an id or code), or None.

    >>> unvaried_problem("training.learning_rate") is None
    True
    >>> print(unvaried_problem("owner"))
    --vary owner: a sweep cannot vary owner (who the children belong to: whoever submits the sweep); set it once in the spec and vary another field
    """  # noqa: E501
    for name, what in _not_varied().items():
        if path == name or path.startswith(f"{name}."):
            return f"--vary {path}: a sweep cannot vary {name} ({what}); set it once in the spec and vary another field"
        if name.startswith(f"{path}."):
            return f"--vary {path}: a sweep cannot vary {path}, which holds {name} ({what}); vary its other fields"
    return None


def parse_dimensions(settings: list[str]) -> list[Dimension]:
    """Every ``--vary`` of a sweep; a field varied twice, or none at all, is a SpecError."""
    dimensions = [parse_vary(setting) for setting in settings]
    if not dimensions:
        raise SpecError(["--vary: name at least one field to vary, e.g. --vary training.learning_rate=1e-4,1e-3"])
    paths = [d.path for d in dimensions]
    if len(set(paths)) != len(paths):
        raise SpecError([f"--vary {next(p for p in paths if paths.count(p) > 1)}: varied twice; list its values once"])
    return dimensions


def value_at(spec: JobSpec, path: str) -> Any:
    """The value a spec holds at a dotted ``path`` (as JSON data)."""
    part: Any = spec.model_dump(mode="json")
    for name in path.split("."):
        part = part.get(name) if isinstance(part, dict) else None
    return part


def child_spec(base: dict[str, Any], point: dict[str, str], position: int) -> JobSpec:
    """The spec of one child: ``base`` (a spec mapping) with each varied field set to its value (text, as ``--set``
    reads it) and a run name of its own. SpecError naming the field when a value does not fit it, or when the field
    is one no sweep varies (a sweep stored by an older version included)."""
    if problems := [problem for path in point if (problem := unvaried_problem(path))]:
        raise SpecError(problems)
    data = with_settings(copy.deepcopy(base), [f"{path}={text}" for path, text in point.items()])
    output = data.get("output")
    if isinstance(output, dict) and output.get("run_name"):
        output["run_name"] = f"{output['run_name']}-{position + 1}"
    try:
        return parse_spec(data)
    except SpecError as exc:
        problems = []
        for problem in exc.problems:
            path = next((p for p in point if problem.startswith(f"{p}:")), None)
            if path is None:
                problems.append(f"--vary {', '.join(f'{p}={t}' for p, t in point.items())}: {problem}")
            else:
                reason = problem[len(path) + 1 :].strip()
                problems.append(f"--vary {path}: {json.dumps(point[path])} does not fit the field ({reason})")
        raise SpecError(problems) from None


def _range_ends(dimension: Dimension) -> list[str]:
    ends = [dimension.low, dimension.high]
    return [str(int(v)) if dimension.integer else repr(float(v)) for v in ends]  # type: ignore[arg-type]


def check_dimensions(
    base: dict[str, Any], dimensions: list[Dimension], admit: Callable[[JobSpec], JobSpec] | None = None
) -> None:
    """Every listed value, and both ends of every range, must fit its field (each alone over the base spec) and, with
    ``admit`` (the door a submit passes), be one the user may run: a TPE sweep may try any listed value later."""
    for dimension in dimensions:
        for text in dimension.values or _range_ends(dimension):
            child = child_spec(base, {dimension.path: text}, 0)
            if admit is None:
                continue
            try:
                admit(child)
            except SpecError as exc:
                raise SpecError([f"--vary {dimension.path}={text}: {problem}" for problem in exc.problems]) from None


def _seed(sweep_id: str, salt: int = 0) -> int:
    return int.from_bytes(hashlib.sha256(f"{sweep_id}/{salt}".encode()).digest()[:4], "big")


def planned_points(dimensions: list[Dimension], search: str, trials: int | None, sweep_id: str) -> list[dict[str, str]]:
    """The points a grid or random sweep queues at once (a TPE sweep plans none: it asks Optuna one at a time).

    A grid is every combination of the listed values; ``random`` samples ``trials`` of them without repeats (or,
    with a range, draws each value uniformly, log-uniformly for a log range)."""
    if search == "tpe":
        return []
    if search == "grid":
        if any(d.is_range for d in dimensions):
            raise SpecError(["--vary: a range LOW..HIGH needs --search random or tpe; a grid takes listed values"])
        points = [
            dict(zip([d.path for d in dimensions], combo))
            for combo in itertools.product(*[d.values for d in dimensions])
        ]
        if trials is not None:
            raise SpecError(["--trials: a grid tries every combination; use --search random to try only some"])
        return points
    if trials is None:
        raise SpecError(["--trials: a random search needs the number of children to try, e.g. --trials 4"])
    rng = random.Random(_seed(sweep_id))
    if all(not d.is_range for d in dimensions):
        grid = list(itertools.product(*[d.values for d in dimensions]))
        if trials > len(grid):
            raise SpecError([f"--trials {trials}: the values listed make only {len(grid)} combinations"])
        return [dict(zip([d.path for d in dimensions], combo)) for combo in rng.sample(grid, trials)]
    return [{d.path: _draw(d, rng) for d in dimensions} for _ in range(trials)]


def _draw(dimension: Dimension, rng: random.Random) -> str:
    if not dimension.is_range:
        return rng.choice(dimension.values)
    low, high = float(dimension.low), float(dimension.high)  # type: ignore[arg-type]
    if dimension.integer:
        return str(rng.randint(int(low), int(high)))
    value = math.exp(rng.uniform(math.log(low), math.log(high))) if dimension.log else rng.uniform(low, high)
    return repr(min(max(value, low), high))


def check_size(dimensions: list[Dimension], search: str, trials: int | None) -> int:
    """How many children the sweep will have; SpecError when none, or more than MAX_CHILDREN."""
    if search not in SEARCHES:
        raise SpecError([f"--search {search}: choose one of {', '.join(SEARCHES)}"])
    if trials is not None and trials < 1:
        raise SpecError([f"--trials {trials}: a sweep needs at least one child"])
    if search == "tpe" and trials is None:
        raise SpecError(["--trials: a TPE search needs the number of children to try, e.g. --trials 8"])
    size = trials if trials is not None else math.prod(len(d.values) for d in dimensions)
    if size > MAX_CHILDREN:
        raise SpecError([f"--vary: {size} children is more than a sweep may have ({MAX_CHILDREN}); list fewer values"])
    return size


# --- Optuna's TPE --------------------------------------------------------------------------------------------------


def optuna_url(sweeps_dir: Path) -> str:
    """Where TPE sweeps keep their studies: one SQLite file in the data dir's ``sweeps/`` folder."""
    sweeps_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(sweeps_dir / 'optuna.db').resolve()}"


_STORAGES: dict[str, Any] = {}


def _study(sweeps_dir: Path, sweep_id: str, trials: int, asked: int) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = optuna_url(sweeps_dir)
    storage = _STORAGES.get(url)
    if storage is None:
        storage = _STORAGES[url] = optuna.storages.RDBStorage(url)
    # The sampler keeps no state between asks (the trials are in the storage); a seed per ask keeps its random
    # start-up draws apart while the sweep stays reproducible.
    sampler = optuna.samplers.TPESampler(seed=_seed(sweep_id, asked), n_startup_trials=max(1, min(10, trials // 2)))
    # Always maximised: a child's result is told with its sign turned when lower is better (a loss).
    return optuna.create_study(
        study_name=sweep_id, storage=storage, sampler=sampler, direction="maximize", load_if_exists=True
    )


def tpe_ask(
    sweeps_dir: Path, sweep_id: str, dimensions: list[Dimension], trials: int, asked: int
) -> tuple[int, dict[str, str]]:
    """Ask Optuna for the next point: (its trial number, the value text of each field)."""
    study = _study(sweeps_dir, sweep_id, trials, asked)
    trial = study.ask()
    point: dict[str, str] = {}
    for d in dimensions:
        if not d.is_range:
            point[d.path] = str(trial.suggest_categorical(d.path, list(d.values)))
        elif d.integer:
            point[d.path] = str(trial.suggest_int(d.path, int(d.low), int(d.high)))  # type: ignore[arg-type]
        else:
            point[d.path] = repr(trial.suggest_float(d.path, d.low, d.high, log=d.log))
    return trial.number, point


def tpe_tell(sweeps_dir: Path, sweep_id: str, trial: int, value: float | None, trials: int) -> None:
    """Tell Optuna a child's result (already signed so that higher is better); None: the child failed."""
    import optuna

    study = _study(sweeps_dir, sweep_id, trials, -1)
    # skip_if_finished: told already (a restart between telling and recording it), nothing more to say.
    if value is None:
        study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    else:
        study.tell(trial, value, skip_if_finished=True)
