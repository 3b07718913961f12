"""Source code, read with real parsers: tree-sitter and the per-language grammar packages from PyPI (each
wheel carries its compiled parser; nothing is downloaded at run time).

- `language(path)`: the language a file's extension names (None: a file Engram stores without parsing).
- `check(path, text)`: the first syntax error (line and column, 1-based) tree-sitter finds, or None.
- `imports(path, text)`: what the file imports, from the same parse (Python `import` / `from`, JavaScript /
  TypeScript `import` / `export from` / `require`, Go import specs, Rust `use` / `mod x;`, Java `import`,
  C / C++ `#include`, Zig `@import`), and `resolve` maps each to a workspace path where one matches.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

EXTENSIONS = {
    ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".go": "go", ".rs": "rust", ".java": "java",
    ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".hxx": "cpp",
    ".zig": "zig",
}  # fmt: skip


def language(path: str) -> str | None:
    return EXTENSIONS.get(posixpath.splitext(path)[1].lower())


@cache
def _parser(lang: str) -> Any:
    import tree_sitter

    if lang in ("typescript", "tsx"):
        import tree_sitter_typescript as grammar_ts

        raw = grammar_ts.language_typescript() if lang == "typescript" else grammar_ts.language_tsx()
    else:
        import importlib

        raw = importlib.import_module(f"tree_sitter_{lang}").language()
    return tree_sitter.Parser(tree_sitter.Language(raw))


def parse(lang: str, text: str) -> Any:
    return _parser(lang).parse(text.encode())


@dataclass(frozen=True)
class SyntaxProblem:
    line: int
    column: int
    message: str


def _walk(node: Any) -> Iterator[Any]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def tree(path: str, text: str) -> Any:
    """The file's parse (None for a language Engram does not parse): one parse for `check` and `imports`."""
    lang = language(path)
    return parse(lang, text) if lang is not None else None


def check(path: str, text: str, tree: Any = None) -> SyntaxProblem | None:
    """The first syntax error of a file in a language Engram parses (None: valid, or not parsed). `tree`: the
    file's parse, when the caller has it."""
    lang = language(path)
    if lang is None:
        return None
    root = (tree if tree is not None else parse(lang, text)).root_node
    if not root.has_error:
        return None
    for n in _walk(root):
        if (n.is_missing or n.type == "ERROR") and not _grammar_quirk(lang, n):
            row, col = n.start_point
            what = f"missing {n.type}" if n.is_missing else f"unexpected {_snippet(n.text)}"
            return SyntaxProblem(row + 1, col + 1, f"{lang} syntax error at line {row + 1}, column {col + 1}: {what}")
    return None  # only the grammar's known false alarms


def _grammar_quirk(lang: str, node: Any) -> bool:
    """A "missing" node a grammar reports in valid code: tree-sitter-zig (1.0–1.1.2) parses an empty
    container, `struct {}`, as a field with a missing name; the zero-width field is that, not an error."""
    if lang != "zig" or not node.is_missing:
        return False
    field = node.parent.parent if node.parent is not None else None
    return field is not None and field.type == "container_field" and field.start_byte == field.end_byte


def _snippet(raw: bytes) -> str:
    text = raw.decode(errors="replace").strip().splitlines()
    first = text[0] if text else ""
    return repr(first[:40])


def _string(node: Any) -> str:
    raw: str = node.text.decode(errors="replace")
    return raw.strip("\"'`<>")


def _python(nodes: Iterable[Any]) -> Iterable[str]:
    for n in nodes:
        if n.type == "import_statement":
            for c in n.named_children:
                name = c.child_by_field_name("name") if c.type == "aliased_import" else c
                if name is not None:
                    yield name.text.decode()
        elif n.type == "import_from_statement":  # `from m import a, b`: m.a and m.b (a module or a name in m)
            module = n.child_by_field_name("module_name")
            if module is None:
                continue
            base = module.text.decode()
            names = [c.child_by_field_name("name") if c.type == "aliased_import" else c
                     for c in n.children_by_field_name("name")]  # fmt: skip
            dotted = [x.text.decode() for x in names if x is not None]
            if not dotted:  # `from m import *`
                yield base
            for name in dotted:
                yield base + name if base.endswith(".") else f"{base}.{name}"


def _javascript(nodes: Iterable[Any]) -> Iterable[str]:
    for n in nodes:
        if n.type in ("import_statement", "export_statement"):
            source = n.child_by_field_name("source")
            if source is not None:
                yield _string(source)
        elif n.type == "call_expression":
            fn, args = n.child_by_field_name("function"), n.child_by_field_name("arguments")
            if fn is not None and fn.text in (b"require", b"import") and args is not None and args.named_children:
                first = args.named_children[0]
                if first.type == "string":
                    yield _string(first)


def _go(nodes: Iterable[Any]) -> Iterable[str]:
    for n in nodes:
        path = n.child_by_field_name("path")
        if path is not None:
            yield _string(path)


def _rust(nodes: Iterable[Any]) -> Iterable[str]:
    for n in nodes:
        if n.type == "use_declaration":
            arg = n.child_by_field_name("argument")
            if arg is not None:
                yield arg.text.decode().split("{")[0].rstrip(":")
        elif n.type == "mod_item" and n.child_by_field_name("body") is None:
            name = n.child_by_field_name("name")
            if name is not None:
                yield f"mod {name.text.decode()}"


def _java(nodes: Iterable[Any]) -> Iterable[str]:
    for n in nodes:
        yield n.text.decode().removeprefix("import").removesuffix(";").replace("static ", "").strip()


def _c(nodes: Iterable[Any]) -> Iterable[str]:
    for n in nodes:
        path = n.child_by_field_name("path")
        if path is not None:
            yield _string(path)


def _zig(nodes: Iterable[Any]) -> Iterable[str]:
    for n in nodes:
        if n.children and n.children[0].text == b"@import":
            for s in _walk(n):
                if s.type == "string_content":
                    yield s.text.decode()
                    break


_IMPORTS: dict[str, Callable[[Iterable[Any]], Iterable[str]]] = {
    "python": _python, "javascript": _javascript, "typescript": _javascript, "tsx": _javascript, "go": _go,
    "rust": _rust, "java": _java, "c": _c, "cpp": _c, "zig": _zig,
}  # fmt: skip
# The nodes that may import, found by a tree-sitter query (in C, one pass) rather than a walk over every node
# in Python: linear in the file, and fast (a 1 MiB file's imports in milliseconds, not seconds).
_CALLS = "(call_expression function: [(identifier) (import)] arguments: (arguments . (string)))"
_IMPORT_NODES = {
    "python": "[(import_statement) (import_from_statement)]",
    "javascript": f"[(import_statement) (export_statement) {_CALLS}]",
    "go": "(import_spec)", "rust": "[(use_declaration) (mod_item)]", "java": "(import_declaration)",
    "c": "(preproc_include)", "zig": "(builtin_function)",
}  # fmt: skip


@cache
def _query(lang: str) -> Any:
    import tree_sitter

    kind = {"typescript": "javascript", "tsx": "javascript", "cpp": "c"}.get(lang, lang)
    return tree_sitter.Query(_parser(lang).language, f"{_IMPORT_NODES[kind]} @node")


def imports(path: str, text: str, tree: Any = None) -> list[str]:
    """The file's imports as it writes them, in order, without repeats. `tree`: the file's parse, when the
    caller has it."""
    import tree_sitter

    lang = language(path)
    if lang is None:
        return []
    root = (tree if tree is not None else parse(lang, text)).root_node
    found = tree_sitter.QueryCursor(_query(lang)).captures(root).get("node", [])
    return list(dict.fromkeys(_IMPORTS[lang](sorted(found, key=lambda n: n.start_byte))))


def _candidates(path: str, spec: str) -> list[str]:
    """Workspace paths an import may name, nearest first."""
    lang, here = language(path), posixpath.dirname(path)
    return _candidates_in(lang, here, spec)


def _candidates_in(lang: str | None, here: str, spec: str) -> list[str]:
    out: list[str] = []
    if lang == "python":
        dots = len(spec) - len(spec.lstrip("."))
        base = here
        for _ in range(max(0, dots - 1)):
            base = posixpath.dirname(base)
        parts = spec.lstrip(".").split(".") if spec.lstrip(".") else []
        # `m.a` is module m/a.py or the name a in m.py: the full path first, then its parent module
        roots = (base,) if dots else _ancestors(here)
        for mod in ("/".join(parts), "/".join(parts[:-1])) if parts else ("",):
            for r in roots:
                stem = (f"{r}/{mod}" if r else mod) if mod else r
                if stem:
                    out += (f"{stem}.py", f"{stem}/__init__.py")
    elif lang in ("javascript", "typescript", "tsx"):
        if spec.startswith("."):
            stem = posixpath.normpath(posixpath.join(here, spec))
            out += [stem] + [f"{stem}{e}" for e in (".ts", ".tsx", ".js", ".jsx", ".mjs")]
            out += [f"{stem}/index{e}" for e in (".ts", ".tsx", ".js")]
    elif lang in ("c", "cpp", "zig"):
        out += [posixpath.normpath(posixpath.join(here, spec)), spec.lstrip("/")]
    elif lang == "rust" and spec.startswith("mod "):
        name = spec[4:]
        out += [posixpath.join(here, f"{name}.rs"), posixpath.join(here, name, "mod.rs")]
    elif lang == "rust" and spec.startswith("crate::"):
        parts = spec[7:].split("::")
        for n in range(len(parts), 0, -1):
            out += [posixpath.join("src", *parts[:n]) + ".rs", posixpath.join("src", *parts[:n], "mod.rs")]
    elif lang == "java":
        out += [spec.replace(".", "/") + ".java", "src/main/java/" + spec.replace(".", "/") + ".java"]
    elif lang == "go":
        out += [spec]  # a package folder; resolved against the folders that hold .go files
    return [p for p in out if p and not p.startswith("..")]


@cache
def _ancestors(folder: str) -> tuple[str, ...]:
    """`folder` and every folder above it, nearest first, each also with a `src/` below it: where an absolute
    import's package may start (a tree imported under a prefix keeps its imports)."""
    out: list[str] = []
    while True:
        out += [folder, posixpath.join(folder, "src") if folder else "src"]
        if not folder:
            return tuple(out)
        folder = posixpath.dirname(folder)


def _python_heads(here: str, known: Iterable[str]) -> set[str]:
    """The first names an absolute Python import from `here` may start with to name a workspace file: the
    first path segment below each of its roots (`_ancestors`) of every known path."""
    roots = _ancestors(here)
    heads: set[str] = set()
    for p in known:
        for r in roots:
            if not r or p.startswith(r + "/"):
                rest = p[len(r) + 1 :] if r else p
                heads.add(rest.split("/", 1)[0].removesuffix(".py"))
    return heads


def resolve(
    path: str, specs: Iterable[str], exists: Callable[[str], bool], known: Iterable[str] | None = None
) -> tuple[list[str], list[str]]:
    """(workspace paths the imports name, imports that name no workspace file). `known` (the workspace's
    paths, when the caller has them) lets an import that can name none of them be told at once."""
    found: dict[str, None] = {}
    external: list[str] = []
    lang, here = language(path), posixpath.dirname(path)
    heads = _python_heads(here, known) if lang == "python" and known is not None else None
    for spec in specs:
        if heads is not None and not spec.startswith(".") and spec.split(".", 1)[0] not in heads:
            external.append(spec)  # no workspace path under any root starts with its first name
            continue
        hit = next((c for c in _candidates_in(lang, here, spec) if c != path and exists(c)), None)
        if hit is None:
            external.append(spec)
        else:
            found.setdefault(hit)
    return list(found), external
