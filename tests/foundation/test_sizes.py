"""The installed package stays readable: no module above 600 lines, no function above 80 lines
unless it says why at its top (a docstring or first comment starting "Long because")."""

from __future__ import annotations

import ast

from tests.source_tree import package_sources

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
REASON = "Long because"


def _says_why(fn: ast.FunctionDef | ast.AsyncFunctionDef, source_lines: list) -> bool:
    doc = ast.get_docstring(fn) or ""
    first = source_lines[fn.body[0].lineno - 1].strip()
    return doc.startswith(REASON) or first.startswith(f"# {REASON}")


def test_no_module_above_the_line_limit():
    long = {
        rel: n
        for rel, path in package_sources()
        if (n := len(open(path, encoding="utf-8").readlines())) > MAX_FILE_LINES
    }
    assert not long, f"modules above {MAX_FILE_LINES} lines: {long}"


def test_no_function_above_the_line_limit_without_a_reason():
    long = []
    for rel, path in package_sources():
        text = open(path, encoding="utf-8").read()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES and not _says_why(node, lines):
                    long.append(f"{rel}:{node.lineno} {node.name} ({n} lines)")
    assert not long, f"functions above {MAX_FUNCTION_LINES} lines without a '{REASON}' at their top: {long}"
