"""A small evaluator of Go's text/template, for the subset the Ollama Modelfile's TEMPLATE uses, so a test can render a
conversation the way Ollama would and compare it with the chat template's rendering.

The subset: text; actions ``{{ }}`` with trim markers (``{{-`` removes the whitespace before, ``-}}`` after); string
literals (raw ``\u0060...\u0060`` and quoted); fields of the dot and of ``$`` (``.System``, ``.Content``,
``$.Messages``); variables (``$i``, ``$last := ...``); the functions ``eq``, ``ne``, ``not``, ``and``, ``or``, ``len``,
``slice``; ``if``/``else if``/``else``/``end`` and ``range $i, $_ := PIPELINE``. Anything else raises, so a template
that leaves the subset fails the test rather than rendering wrong.
"""

from __future__ import annotations

import re
from typing import Any

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
_TOKEN = re.compile(r'\s*(`[^`]*`|"(?:[^"\\]|\\.)*"|\(|\)|:=|,|\$?[A-Za-z_.][\w.$]*|\$|\d+)')


def _parse_actions(template: str) -> list[tuple[str, str]]:
    """("text", text) and ("action", body) items, trim markers applied to the text beside them."""
    items: list[tuple[str, str]] = []
    position = 0
    for match in _ACTION.finditer(template):
        text = template[position : match.start()]
        if match.group(1):
            text = text.rstrip(" \t\r\n")
        items.append(("text", text))
        items.append(("action", match.group(2).strip()))
        position = match.end()
        if match.group(3):
            rest = template[position:]
            position += len(rest) - len(rest.lstrip(" \t\r\n"))
    items.append(("text", template[position:]))
    return items


def _tokens(body: str) -> list[str]:
    tokens, position = [], 0
    while position < len(body):
        match = _TOKEN.match(body, position)
        if not match or match.end() == position:
            if body[position:].strip() == "":
                break
            raise ValueError(f"unsupported template syntax: {body[position:]!r}")
        tokens.append(match.group(1))
        position = match.end()
    return tokens


def _unquote(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1]
    return bytes(token[1:-1], "utf-8").decode("unicode_escape")


class _Scope:
    def __init__(self, root: Any, dot: Any, variables: dict[str, Any]) -> None:
        self.root, self.dot, self.variables = root, dot, variables

    def field(self, value: Any, path: list[str]) -> Any:
        for name in path:
            if not name:
                continue
            value = value[name] if isinstance(value, dict) else getattr(value, name)
        return value


FUNCTIONS = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "not": lambda a: not a,
    "len": len,
    "slice": lambda seq, start, end=None: seq[start:end],
}


def _value(tokens: list[str], scope: _Scope) -> Any:
    """One argument off the front of ``tokens``."""
    token = tokens.pop(0)
    if token == "(":
        value = _pipeline(tokens, scope)
        if not tokens or tokens.pop(0) != ")":
            raise ValueError("unbalanced parentheses")
        return value
    if token[0] in '`"':
        return _unquote(token)
    if token.isdigit():
        return int(token)
    if token.startswith("$"):
        name, _, path = token.partition(".")
        base = scope.root if name == "$" else scope.variables[name]
        return scope.field(base, path.split(".")) if path else base
    if token.startswith("."):
        return scope.field(scope.dot, token[1:].split("."))
    raise ValueError(f"unsupported template word: {token!r}")


def _pipeline(tokens: list[str], scope: _Scope) -> Any:
    """A command: a function and its arguments, or one value."""
    head = tokens[0]
    if head in FUNCTIONS or head in ("and", "or"):
        tokens.pop(0)
        args = []
        while tokens and tokens[0] != ")":
            args.append(_value(tokens, scope))
        if head == "and":
            return next((a for a in args if not a), args[-1])
        if head == "or":
            return next((a for a in args if a), args[-1])
        return FUNCTIONS[head](*args)
    return _value(tokens, scope)


def _evaluate(body: str, scope: _Scope) -> Any:
    tokens = _tokens(body)
    value = _pipeline(tokens, scope)
    if tokens:
        raise ValueError(f"unsupported template syntax: {body!r}")
    return value


def _block(items: list[tuple[str, str]], start: int, scope: _Scope, out: list[str]) -> tuple[int, str]:
    """Render items from ``start`` until an ``else``/``else if``/``end`` at this level; (its index, its keyword)."""
    index = start
    while index < len(items):
        kind, body = items[index]
        if kind == "text":
            out.append(body)
            index += 1
            continue
        if body == "end" or body == "else" or body.startswith("else if "):
            return index, body
        if body.startswith("if "):
            index = _if(items, index, body[3:], scope, out)
        elif body.startswith("range "):
            index = _range(items, index, body[6:], scope, out)
        elif ":=" in body and body.startswith("$"):
            name, _, expression = body.partition(":=")
            scope.variables[name.strip()] = _evaluate(expression, scope)
            index += 1
        else:
            value = _evaluate(body, scope)
            out.append("" if value is None else str(value))
            index += 1
    return index, ""


def _find_close(items: list[tuple[str, str]], start: int) -> tuple[int, str]:
    depth, index = 0, start
    while index < len(items):
        kind, body = items[index]
        if kind == "action":
            if body.startswith(("if ", "range ")):
                depth += 1
            elif body == "end":
                if depth == 0:
                    return index, body
                depth -= 1
            elif (body == "else" or body.startswith("else if ")) and depth == 0:
                return index, body
        index += 1
    raise ValueError("a block is not closed with {{ end }}")


def _if(items: list[tuple[str, str]], index: int, condition: str | None, scope: _Scope, out: list[str]) -> int:
    """Render the branch of the ``if`` at ``index`` whose condition holds; the index after its ``end``."""
    taken = False
    while True:
        if not taken and (condition is None or _evaluate(condition, scope)):
            taken = True
            index, keyword = _block(items, index + 1, scope, out)
        else:
            index, keyword = _find_close(items, index + 1)
        if keyword == "end":
            return index + 1
        condition = keyword[len("else if ") :] if keyword.startswith("else if ") else None


def _range(items: list[tuple[str, str]], index: int, clause: str, scope: _Scope, out: list[str]) -> int:
    names, _, expression = clause.partition(":=")
    index_name, element_name = (name.strip() for name in names.split(","))
    end, _ = _find_close(items, index + 1)
    for position, element in enumerate(_evaluate(expression, scope)):
        inner = _Scope(scope.root, element, {**scope.variables, index_name: position, element_name: element})
        _block(items, index + 1, inner, out)
    return end + 1


def render(template: str, values: dict[str, Any]) -> str:
    """``template`` rendered with ``values`` as the dot (and ``$``), as Go's text/template would for this subset."""
    items = _parse_actions(template)
    out: list[str] = []
    scope = _Scope(values, values, {})
    index, keyword = _block(items, 0, scope, out)
    if keyword:
        raise ValueError(f"an unexpected {{{{ {keyword} }}}}")
    return "".join(out)
