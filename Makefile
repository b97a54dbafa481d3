# The project's tasks, each one command (run them inside the venv of the README's "Run the tests").
.PHONY: test test-fast lint format bench

test:  ## the whole suite, as CI runs it (the README's test command)
	python -m pytest

test-fast:  ## the fast lane: everything not marked slow (no worker processes, app or browser)
	python -m pytest -q -m "not slow"

lint:  ## ruff's rules and format, and mypy, as tests/unit/repo/test_lint.py checks them
	python -m ruff check . && python -m ruff format --check . && python -m mypy

format:  ## write ruff's format and its safe fixes
	python -m ruff format . && python -m ruff check --fix .

bench:  ## what each example learns, in-process (benchmarks/learning.py; minutes on a CPU)
	python benchmarks/learning.py
