"""Dataclass fields documented by the string literal right under them (the cleanrl/tyro convention), read back from
source. Standard library only: `config.py`, `options.py` and the engine adapters share it."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Map field name -> the docstring written right under it in `cls`'s source (whitespace collapsed); a field with
    no docstring falls back to its `metadata["help"]` (as `options.rpg_field` sets)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {f.name: f.metadata["help"] for f in dataclasses.fields(cls) if "help" in f.metadata}
    for node, nxt in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
