"""Reading the project's Python source as the hygiene tests do: every function a file defines, nested ones too."""

from __future__ import annotations

import ast
from collections.abc import Iterator

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def functions(tree: ast.AST) -> Iterator[FunctionNode]:
    """Every function (plain or async) in ``tree``, nested ones and methods too, in ``ast.walk``'s order."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
