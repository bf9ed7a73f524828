"""A verl launch script read as verl would run it, without running it (issue 34).

verl's published scripts (``examples/grpo_trainer/run_qwen2-7b.sh`` and the like) are bash: a few
variable assignments, then one ``python3 -m verl.trainer.main_ppo key=value ... $@`` command with
line continuations. :func:`read_script` finds that command and returns what it asks of verl:

- the entry module (``verl.trainer.main_ppo``, or a recipe's own, e.g. ``recipe.dapo.main_dapo``);
- ``--config-path`` / ``--config-name`` (Hydra's, e.g. ``ppo_megatron_trainer``);
- the Hydra overrides, in order, each with its shell variables resolved.

Variables are resolved as bash would for the forms these scripts use: ``$VAR``, ``${VAR}``,
``${VAR:-default}``, ``${VAR:=default}``, ``${VAR-default}``, from assignments earlier in the
script (``VAR=...``, ``export VAR=...``, ``local``/``declare`` are not read) and from the caller's
environment (which wins over a ``${VAR:-default}``, as in bash, and over nothing else). Nothing
else in the script runs: a command substitution ``$(...)`` or backquotes, arithmetic, or a variable
with no value and no default that the verl command needs is :class:`ScriptError`, one line naming
the file, its line and the variable, with the fix (set it in the environment or on the sweep
command). ``$@``, ``$*`` and ``"$@"`` are dropped: the sweep's own overrides come after the
script's, as the script's caller's arguments would.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from grpokit.config.verl_entry import MAIN_PPO, ScriptError, check_config, locate

#: The modules a verl command runs (``python -m <module>``): verl's trainers and a recipe's entry.
_PYTHON = re.compile(r"(^|/)python[0-9.]*$")
_SUBSTITUTION = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=[\"']?(?:\$\((?!\()|`)")
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
#: ``$VAR``, ``${VAR}``, ``${VAR:-default}`` (a default may hold one level of ``${...}``: verl-recipe's
#: ``${CKPTS_DIR:-"${RAY_DATA_HOME}/ckpts"}``), ``$@`` / ``$*``.
_VAR = re.compile(
    r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=])((?:[^}$]|\$\{[^}]*\}|\$(?!\{))*))?\}|([A-Za-z_][A-Za-z0-9_]*)|([@*]))"
)


@dataclasses.dataclass(frozen=True)
class VerlInvocation:
    """What a launch script asks of verl.

    module: the entry module (``python -m``). config_path, config_name: Hydra's ``--config-path`` /
    ``--config-name`` (None: the entry's own). overrides: the Hydra overrides, resolved, in order.
    source: ``<file>:<line>`` of the command. variables: the script's variables the command used,
    with their values (for the dry run's "where each setting came from"). dropped: ``key (why)`` of
    each override of ``kit_keys`` (:func:`read_script`) left out because its value needs a command.
    """

    module: str
    config_path: str | None
    config_name: str | None
    overrides: tuple[str, ...]
    source: str
    variables: Mapping[str, str]
    dropped: tuple[str, ...] = ()


_ARRAY_OPEN = re.compile(r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*\+?=\(")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """``(first line number, text)`` of each logical line: continuations joined, comments dropped, an
    array assignment over several lines (``NAME=(`` ... ``)``) joined into one."""
    out: list[tuple[int, str]] = []
    pending, start, in_array = "", 0, False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not pending:
            start = number
            if line.lstrip().startswith("#"):
                continue
        elif in_array and line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if not in_array and _ARRAY_OPEN.match(pending) and not _closes(pending):
            in_array = True
        if in_array:
            if not _closes(pending):
                pending += " "
                continue
            in_array = False
        if pending.strip():
            out.append((start, pending.strip()))
        pending = ""
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def _closes(text: str) -> bool:
    """Whether the parentheses of ``text`` (outside quotes, after a comment's ``#`` ignored) balance."""
    return _paren_depth(text) <= 0


def _plain(text: str):
    """``(index, char, quoting)`` of each character of ``text`` that bash reads as text, ``quoting``
    being None, ``"'"`` or ``'"'``; the quote characters that open or close, a backslash (outside
    single quotes) and the character it escapes are skipped. The one quote scanner of this module."""
    state, escaped = None, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\" and state != "'":
            escaped = True
        elif state is None and ch in "'\"":
            state = ch
        elif ch == state:
            state = None
        else:
            yield i, ch, state


def _paren_depth(text: str) -> int:
    depth = 0
    for i, ch, state in _plain(text):
        if state is not None:
            continue
        if ch == "#" and (i == 0 or text[i - 1] in " \t("):
            break
        if ch == "(" and not text[:i].endswith("$"):
            depth += 1
        elif ch == ")":
            depth -= 1
    return depth


def _statements(line: str) -> list[str]:
    """``line`` split at ``;`` and ``;;`` outside quotes, ``$(...)`` and ``{ ... }`` (``;;`` kept as a
    statement of its own: the end of a ``case`` branch)."""
    out, start, depth, skip = [], 0, 0, -1
    for i, ch, state in _plain(line):
        if state is not None or i == skip:
            continue
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1 if depth > 0 else 0
        elif depth == 0 and ch == ";":
            out.append(line[start:i].strip())
            if line[i : i + 2] == ";;":
                out.append(";;")
                skip = i + 1
            start = i + (2 if skip == i + 1 else 1)
    out.append(line[start:].strip())
    return [s for s in out if s]


@dataclasses.dataclass
class _Block:
    """One ``if`` / ``case`` / loop the reader is inside: whether its current branch runs (None: unknown,
    the kit cannot tell without running something), whether a branch already ran, and for ``case`` the
    word matched and whether a pattern is awaited."""

    kind: str
    runs: bool | None
    taken: bool = False
    word: str | None = None
    awaiting: bool = False
    parent: bool | None = True
    why: str = ""
    root: str | None = None


def _test(tokens: list[str]) -> bool | None:
    """``[ a = b ]``, ``[[ a != b ]]``, ``-n`` / ``-z``, joined by ``&&`` / ``||`` and ``{ ...; }``:
    True/False, or None when it is anything else (a command the kit does not run)."""
    pos = 0

    def term() -> bool | None:
        nonlocal pos
        if pos >= len(tokens):
            return None
        tok = tokens[pos]
        if tok == "!":
            pos += 1
            value = term()
            return None if value is None else not value
        if tok == "{":
            pos += 1
            value = expr()
            if pos < len(tokens) and tokens[pos] == "}":
                pos += 1
                return value
            return None
        if tok in ("[", "[["):
            close = "]" if tok == "[" else "]]"
            try:
                end = tokens.index(close, pos)
            except ValueError:
                return None
            inner = tokens[pos + 1 : end]
            pos = end + 1
            if len(inner) == 3 and inner[1] in ("=", "==", "!="):
                return (inner[0] == inner[2]) == (inner[1] != "!=")
            if len(inner) == 2 and inner[0] in ("-n", "-z"):
                return bool(inner[1]) == (inner[0] == "-n")
            if len(inner) == 1:
                return bool(inner[0])
            return None
        return None

    def expr() -> bool | None:
        nonlocal pos
        value = term()
        while pos < len(tokens) and tokens[pos] in ("&&", "||"):
            op = tokens[pos]
            pos += 1
            right = term()
            if op == "&&":
                value = False if value is False or right is False else (None if None in (value, right) else True)
            else:
                value = True if value is True or right is True else (None if None in (value, right) else False)
        return value

    value = expr()
    return value if pos == len(tokens) else None


def _expand(word: str, values: Mapping[str, str], environ: Mapping[str, str], where: str, used: dict) -> str:
    """``word`` with its variables replaced (see the module docstring); a default is read only where
    bash reads it (``${NAME:-$(cmd)}`` with NAME set runs nothing), nested ``${...}`` included."""
    if "$((" in word:
        word = _arithmetic(word, values, environ, where, used)
    out: list[str] = []
    i = 0
    while i < len(word):
        ch = word[i]
        if ch == "`" or word.startswith("$(", i):
            raise ScriptError(
                f"{where}: {word!r} runs a command ($(...) or backquotes), which the kit does not run: "
                "write the value into the script or pass the key on the sweep command"
            )
        if ch == "$" and word.startswith("${", i):
            end = _closing_brace(word, i + 1)
            if end is not None:
                out.append(_parameter(word[i + 2 : end], values, environ, where, used))
                i = end + 1
                continue
        elif ch == "$":
            simple = re.match(r"[A-Za-z_][A-Za-z0-9_]*|[@*]", word[i + 1 :])
            if simple:
                out.append(_parameter(simple.group(0), values, environ, where, used))
                i += 1 + len(simple.group(0))
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _closing_brace(word: str, start: int) -> int | None:
    """The index of the ``}`` closing the ``{`` at ``start``, or None."""
    depth = 0
    for i in range(start, len(word)):
        if word[i] == "{":
            depth += 1
        elif word[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _parameter(inner: str, values: Mapping[str, str], environ: Mapping[str, str], where: str, used: dict) -> str:
    """The value of ``${inner}`` (``NAME``, ``NAME:-default``, ``NAME-default``, ``NAME:=default``, ``@``)."""
    if inner in ("@", "*"):  # $@ / $*: the caller's arguments; the sweep's overrides come after
        return ""
    match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=])(.*))?", inner, re.DOTALL)
    if not match:
        return "${" + inner + "}"  # ${NAME[@]} and the like: read where they stand (arrays)
    name, op, default = match.groups()
    if name in values and not values[name].startswith(_UNRESOLVED):
        value = values[name]  # the script's own assignment wins, as in bash
    elif name in environ:
        value = environ[name]
    elif name in values:
        value = values[name]  # an unresolved marker: an error only where the verl command needs it
    elif op is not None:
        value = None
    else:
        raise ScriptError(
            f"{where}: ${name} has no value (not set in the script or the environment): "
            f"export {name}=... before the sweep command, or set it in the script"
        )
    if op is not None and (value is None or (op.startswith(":") and value == "")):
        value = _expand(default or "", values, environ, where, used)
    used[name] = value
    return value


def _words(line: str, where: str) -> list[str]:
    try:
        return shlex.split(line, posix=True, comments=True)
    except ValueError as exc:
        raise ScriptError(f"{where}: cannot be read as shell words ({exc}): check its quotes") from exc



_COMMAND_ENDS = frozenset({"|", "||", "&&", "&", "|&"})
_REDIRECT = re.compile(r"^[0-9&]?>>?(&[0-9])?$|^[0-9&]?>>?\S|^<")
_ARRAY_WORD = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]\}$")
_ARRAY_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=\((.*)\)$", re.DOTALL)


def _marker(why: str) -> str:
    return f"{_UNRESOLVED}{why}{_END}"


def _why(value: str) -> str | None:
    """The reason inside an unresolved marker, or None for a plain value."""
    return value.split(_UNRESOLVED, 1)[1].split(_END, 1)[0] if _UNRESOLVED in value else None


def _running(blocks: list[_Block]) -> bool | None:
    """Whether a statement at this point runs: False if any enclosing branch does not, None if one is unknown."""
    if any(b.runs is False for b in blocks):
        return False
    return None if any(b.runs is None for b in blocks) else True


def _unknown_why(blocks: list[_Block]) -> tuple[str, str | None]:
    """(why the innermost unknown branch is unknown, the variable to export for it or None)."""
    return next(((b.why, b.root) for b in reversed(blocks) if b.runs is None and b.why), ("", None))


def _cond(words: list[str], values, environ, where) -> tuple[bool | None, str, str | None]:
    """(the condition's value or None, why it is unknown, the variable to export) of ``if``/``elif`` words."""
    words = [w.removesuffix(";") for w in words if w not in ("then", ";")]
    words = [w for w in words if w]
    try:
        tokens = [_restore(_expand(w, values, environ, where, {})) for w in words]
    except ScriptError as exc:
        return None, str(exc), None
    bad = next((_why(t) for t in tokens if _why(t)), None)
    if bad:
        return None, bad, bad.split()[0]
    value = _test(tokens)
    return value, "" if value is not None else f"the condition at {where} runs a command ({' '.join(words)})", None


def read_script(
    path: Path | str, environ: Mapping[str, str], kit_keys: frozenset[str] = frozenset()
) -> VerlInvocation:
    """The verl command of the launch script at ``path`` (see the module docstring).

    ``if`` / ``elif`` / ``else`` on ``[ a = b ]``-style tests and ``case`` on a variable are followed
    as bash would (their assignments count in the branch that runs); a branch the kit cannot tell
    without running a command leaves what it sets unresolved (an error only where the verl command
    needs it). Arrays (``NAME=(a b)``, ``NAME+=(c)``, ``"${NAME[@]}"``) are read too. An override of
    one of ``kit_keys`` (keys the kit sets itself, e.g. ``trainer.experiment_name``) whose value needs
    a command is left out and named in ``dropped``.

    Raises:
        ScriptError: no ``python -m <module>`` command in the script, several, or a value the kit
            cannot resolve without running something (one line naming file, line and fix).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScriptError(f"verl_script={path}: cannot be read ({exc.strerror or exc})") from exc
    values: dict[str, str] = {}
    arrays: dict[str, list[str] | str] = {}
    found: list[tuple[str, list[str], list[str]]] = []
    blocks: list[_Block] = []
    for number, line in _logical_lines(text):
        where = f"{path}:{number}"
        for stmt in _statements(_protect_single_quoted(line)):
            _statement(stmt, where, values, arrays, blocks, found, environ)
    if not found:
        raise ScriptError(
            f"verl_script={path}: no `python -m <module> ...` command (verl's launch form, "
            "e.g. python3 -m verl.trainer.main_ppo key=value ...)"
        )
    if len(found) > 1:
        raise ScriptError(
            f"verl_script={path}: {len(found)} `python -m` commands ({', '.join(w for w, _, _ in found)}): "
            "give a script with one verl command"
        )
    where, head, rest = found[0]
    used: dict[str, str] = {}
    module = _restore(_expand(rest[0], values, environ, where, used))
    config_path = config_name = None
    overrides: list[str] = []
    expanded: list[str] = []
    for word in rest[1:]:
        expanded.extend(_splice(word, values, arrays, environ, where, used))
    args = iter(expanded)
    dropped: list[str] = []
    for value in args:
        why = _why(value)
        if why and value.split("=", 1)[0].lstrip("+") in kit_keys:
            dropped.append(f"{value.split('=', 1)[0].lstrip('+')} ({why.split(chr(0))[0]})")
            continue
        if why:
            name = why.split()[0]
            raise ScriptError(
                f"{where}: ${why}, which the kit does not evaluate: export {name}=... before the sweep command"
            )
        for flag in ("--config-path", "--config-name"):
            if value == flag:
                value = f"{flag}={next(args, '')}"
        if value.startswith("--config-path="):
            config_path = value.split("=", 1)[1]
        elif value.startswith("--config-name="):
            config_name = value.split("=", 1)[1]
        elif value:
            overrides.append(value)
    return VerlInvocation(module, config_path, config_name, tuple(overrides), where, used, tuple(dropped))


def _one_word_substitutions(stmt: str) -> str:
    """``stmt`` with the spaces inside each ``$(...)`` / ``$((...))`` removed (arithmetic) or hidden (a
    command, never run: only named), so that each stays one shell word as in bash."""
    out, i = [], 0
    while i < len(stmt):
        if stmt.startswith("$(", i):
            depth, j = 0, i + 1
            while j < len(stmt):
                depth += {"(": 1, ")": -1}.get(stmt[j], 0)
                if depth == 0:
                    break
                j += 1
            inner = stmt[i : j + 1]
            out.append(inner.replace(" ", "") if inner.startswith("$((") else inner.replace(" ", "\x01"))
            i = j + 1
            continue
        out.append(stmt[i])
        i += 1
    return "".join(out)


def _item(word: str, values, environ, where: str) -> str:
    """An array's item expanded; one that needs a command is an unresolved marker naming its key."""
    try:
        return _restore(_expand(word, values, environ, where, {}))
    except ScriptError:
        key = word.split("=", 1)[0]
        return f"{key}={_marker(f'{key} is set by a command the kit does not run (at {where})')}"


def _splice(word, values, arrays, environ, where, used) -> list[str]:
    """``word`` expanded: an array (``${NAME[@]}``) as its items, else one word."""
    array = _ARRAY_WORD.match(word)
    if array:
        items = arrays.get(array.group(1), [])
        if isinstance(items, str):
            return [items]
        used[array.group(1)] = " ".join(items)
        return list(items)
    return [_restore(_expand(word, values, environ, where, used))]


def _statement(stmt, where, values, arrays, blocks, found, environ) -> None:
    """One shell statement: a block's start or end, an assignment, or a command (the verl one is kept)."""
    if stmt == ";;":
        if blocks and blocks[-1].kind == "case":
            blocks[-1].awaiting = True
        return
    top = blocks[-1] if blocks else None
    if top is not None and top.kind == "case" and top.awaiting:
        if stmt.split()[0] == "esac":
            blocks.pop()
            return
        pattern, _, stmt = stmt.partition(")")
        patterns = [p.strip().strip("\"'") for p in pattern.strip().lstrip("(").split("|")]
        top.awaiting = False
        if top.word is None:
            top.runs = None if top.parent is not False else False
        else:
            top.runs = not top.taken and any(fnmatch.fnmatchcase(top.word, p) for p in patterns)
            top.taken |= top.runs
        stmt = stmt.strip()
        if not stmt:
            return
    substituted = _SUBSTITUTION.match(stmt)
    if substituted:  # NAME=$(...) or NAME=`...`: a command the kit does not run
        if _running(blocks) is not False:
            name = substituted.group(1)
            values[name] = _marker(f"{name} is set by a command the kit does not run")
        return
    stmt = _one_word_substitutions(stmt)
    words = _words(stmt, where)
    if not words:
        return
    first = words[0]
    running = _running(blocks)
    if first in ("then", "do", "else") and len(words) > 1 and first != "else":
        return _statement(stmt.split(None, 1)[1], where, values, arrays, blocks, found, environ)
    if first in ("then", "do", "{", "}"):
        return
    if first == "if":
        cond, why, root = _cond(words[1:], values, environ, where) if running else (None, *_unknown_why(blocks))
        runs = False if running is False else (None if running is None else cond)
        blocks.append(_Block("if", runs, taken=runs is True, parent=running, why=why, root=root))
        return
    if first in ("elif", "else") and top is not None and top.kind == "if":
        if top.taken or top.parent is False:
            top.runs = False
        elif top.runs is None and first == "else":
            top.runs = None
        elif first == "else":
            top.runs = True
        else:
            cond, why, root = _cond(words[1:], values, environ, where) if top.parent else (None, top.why, top.root)
            top.runs = cond if top.runs is not None else None
            top.why, top.root = (why, root) if why else (top.why, top.root)
        top.taken |= top.runs is True
        if first == "else" and len(words) > 1:
            _statement(stmt.split(None, 1)[1], where, values, arrays, blocks, found, environ)
        return
    if first in _CLOSERS:
        if blocks:
            blocks.pop()
        return
    if first == "case":
        word, why, root = None, "", None
        if running:
            try:
                word = _restore(_expand(words[1], values, environ, where, {}))
            except ScriptError as exc:
                why = str(exc)
            if word is not None and _why(word):
                word, why = None, _why(word)
                root = why.split()[0]
        if not why and not running:
            why, root = _unknown_why(blocks)
        runs = False if running is False else None
        blocks.append(_Block("case", runs, word=word, awaiting=True, parent=running, why=why, root=root))
        return
    if first in _OPENERS:  # loops: not evaluated
        why = f"a {first} loop at {where}, which the kit does not evaluate"
        blocks.append(_Block(first, False if running is False else None, parent=running, why=why))
        return
    if running is False:
        return
    if first == "exit" and running and not found:
        raise ScriptError(f"{where}: the script exits here ({stmt}) before its verl command: check its settings")
    array = _ARRAY_ASSIGN.match(stmt)
    assign = _ASSIGN.match(words[1] if first == "export" and len(words) > 1 else first)
    if array or (assign and (len(words) == 1 or (first == "export" and len(words) == 2))):
        name = (array or assign).group(1)
        if running is None:
            why, root = _unknown_why(blocks)
            marker = _marker(
                (f"{root} decides the branch at {where} that sets {name} ({why})" if root
                 else f"{name} is set at {where} in a branch the kit cannot tell ({why})")
                if why
                else f"{name} is set inside an if/case/for block at {where}"
            )
            (arrays if array else values)[name] = marker
            return
        if array:
            items = [_item(w, values, environ, where) for w in _words(array.group(3), where)]
            old = arrays.get(name, [])
            arrays[name] = old if isinstance(old, str) else (old + items if array.group(2) else items)
            return
        raw = assign.group(2)
        folder = _script_folder(raw, where)
        if folder is not None:  # SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd): the script's folder
            values[name] = folder
            return
        try:
            values[name] = _restore(_expand(raw, values, environ, where, {}))
        except ScriptError as exc:
            cause = "has no value" if "has no value" in str(exc) else "is set by a command the kit does not run"
            values[name] = _marker(f"{name} {cause}")
        return
    command = [w for w in words if not _ASSIGN.match(w)] if _ASSIGN.match(first) else words
    cut = next((i for i, w in enumerate(command) if w in _COMMAND_ENDS or _REDIRECT.match(w)), len(command))
    command = command[:cut]  # `... 2>&1 | tee log`: the verl command ends before its redirections and pipes
    if "-m" not in command or running is not True:
        return
    at = command.index("-m")
    head: list[str] = []
    for word in command[:at]:
        head.extend(_splice(word, values, arrays, environ, where, {}))
    unresolved = next((_why(w) for w in head if _why(w)), None)
    if unresolved and at and _ARRAY_WORD.match(command[at - 1]):
        raise ScriptError(
            f"{where}: ${unresolved}, which the kit does not evaluate: "
            f"export {unresolved.split()[0]}=... before the sweep command"
        )
    if head and _PYTHON.search(head[-1]) and len(command) > at + 1:
        found.append((where, head, command[at + 1 :]))


_DIRNAME = re.compile(
    r"^\$\((?:cd\s+)?\$\(dirname\s+(?:\$0|\$\{0\}|\$\{BASH_SOURCE(?:\[0\])?\})\)(?:\s*&&\s*pwd)?\)$"
)
_ARITH = re.compile(r"\$\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)")


def _script_folder(raw: str, where: str) -> str | None:
    """The script's folder for ``$(cd "$(dirname "$0")" && pwd)`` / ``$(dirname "${BASH_SOURCE[0]}")``, else None."""
    if not _DIRNAME.match(raw.replace("\x01", " ").replace('"', "").strip()):
        return None
    return str(Path(where.rsplit(":", 1)[0]).resolve().parent)


def _arithmetic(word: str, values, environ, where: str, used: dict) -> str:
    """``word`` with each ``$((...))`` of integers, variables and ``+ - * / %`` computed as bash does."""

    def one(match: re.Match) -> str:
        text = _VAR.sub(lambda m: _expand(m.group(0), values, environ, where, used), match.group(1))
        text = re.sub(
            r"[A-Za-z_][A-Za-z0-9_]*", lambda m: _expand("${" + m.group(0) + "}", values, environ, where, used), text
        )
        if not re.fullmatch(r"[0-9+\-*/% ()]*", text):
            raise ScriptError(f"{where}: $(({match.group(1)})) is not integer arithmetic the kit can compute")
        try:
            return str(_int_eval(ast.parse(text.replace("/", "//"), mode="eval").body))
        except (SyntaxError, ValueError, KeyError, ZeroDivisionError) as exc:
            raise ScriptError(f"{where}: $(({match.group(1)})) cannot be computed ({exc})") from exc

    return _ARITH.sub(one, word)


def _int_eval(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_int_eval(node.operand)
    if isinstance(node, ast.BinOp):
        ops = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__,
               ast.Mod: int.__mod__}
        return ops[type(node.op)](_int_eval(node.left), _int_eval(node.right))
    raise ValueError(ast.dump(node))


_SQ = "\x00SQ\x00"
_UNRESOLVED = "\x00UNRESOLVED:"
_END = "\x00"
_OPENERS = frozenset({"if", "case", "for", "while", "until", "select"})
_CLOSERS = frozenset({"fi", "esac", "done"})


def _protect_single_quoted(line: str) -> str:
    """``line`` with each ``$`` inside single quotes hidden (bash expands nothing there); single quotes
    inside double quotes are plain characters (``"['$a', '$b']"`` expands both)."""
    hidden = {i for i, ch, state in _plain(line) if ch == "$" and state == "'"}
    return "".join(_SQ if i in hidden else ch for i, ch in enumerate(line))


def _restore(word: str) -> str:
    return word.replace(_SQ, "$")


#: Keys the kit sets for every point (the run folder's checkpoints, verl's names for the point): a
#: script's value that needs a command (``$(date ...)`` in a name) is left out rather than refused.
KIT_SET = frozenset({"trainer.default_local_dir", "trainer.project_name", "trainer.experiment_name"})


__all__ = ["KIT_SET", "MAIN_PPO", "ScriptError", "VerlInvocation", "expand_argv", "read_script"]


def _verl_default(key: str) -> str:
    """verl's own default for ``key`` (the active config's, ``ppo_trainer`` unless the script names another), as an
    override value."""
    from grpokit.config.overrides import flat_base

    return str(flat_base()[key])


def _key(override: str) -> str:
    """The key of a Hydra override (``+a.b=1`` -> ``a.b``, ``~a.b`` -> ``a.b``)."""
    return override.lstrip("+~").split("=", 1)[0]


def _as_kit(override: str) -> str:
    """A verl override as the kit's command line spells it (``+a=1`` -> ``+verl.a=1``)."""
    prefix = override[: len(override) - len(override.lstrip("+~"))]
    return f"{prefix}verl.{override[len(prefix) :]}"


def expand_argv(argv: list[str], environ: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The sweep command's ``argv`` with ``verl_script=<file>`` turned into the script's settings.

    Returns ``(argv, lines)``: the script's overrides as ``verl.<key>`` (first, so that the command's
    own keys and axes come after them; a key the command sets itself is left out of the script's),
    ``experiment=verl_script`` and ``hardware=none`` unless the command names an experiment or a
    hardware profile, and the script's ``trainer.nnodes`` / ``trainer.n_gpus_per_node`` (verl's own
    defaults, 1 node of 8 GPUs, where the script sets none) as the job's shape (``cluster.nodes`` /
    ``cluster.gpus_per_node``) unless the command sets it; with a config
    other than verl's ``ppo_trainer`` (Megatron's ``ppo_megatron_trainer``, a recipe's entry and
    folder: :func:`grpokit.config.verl_entry.locate`, ``recipe_root=<checkout>`` on the command) the
    ``verl_entry.*`` and ``verl_base@verl`` overrides that select it (a config-group choice such as
    ``model_engine=megatron`` among them, not a ``verl.*`` key), and it becomes this process's
    composed config (:func:`grpokit.config.verl_schema.use`); ``lines``: what was taken from where,
    for the terminal. ``argv`` unchanged when it names no script.

    Raises:
        ScriptError: the script cannot be read (:func:`read_script`), or its entry or config cannot
            be found or is not one the kit composes (:func:`~grpokit.config.verl_entry.locate`), one line each.
    """
    from grpokit.config.verl_schema import use

    given = [a for a in argv if a.split("=", 1)[0].lstrip("+") == "verl_script"]
    if not given:
        return argv, []
    path = Path(given[-1].split("=", 1)[1]).expanduser()
    inv = read_script(path, environ, KIT_SET)
    roots = [a.split("=", 1)[1] for a in argv if a.split("=", 1)[0].lstrip("+") == "recipe_root"]
    entry = locate(inv, path, roots[-1] if roots else None)
    check_config(entry, path)
    use(entry.ref)
    typed = {_key(a) for a in argv if "=" in a or a.startswith("~")}
    kept = [o for o in inv.overrides if f"verl.{_key(o)}" not in typed and o not in entry.groups]
    won = [_key(o) for o in inv.overrides if f"verl.{_key(o)}" in typed]
    extra = entry.kit_overrides()
    if not any(a.startswith("experiment=") for a in argv):
        extra.append("experiment=verl_script")
    if not any(a.startswith("hardware=") for a in argv):
        extra.append("hardware=none")
    values = {_key(o): o.split("=", 1)[1] for o in inv.overrides if "=" in o}
    for verl_key, kit_key in (
        ("trainer.nnodes", "cluster.nodes"),
        ("trainer.n_gpus_per_node", "cluster.gpus_per_node"),
    ):
        if kit_key not in typed and f"verl.{verl_key}" not in typed:  # the script's, else verl's default
            extra.append(f"{kit_key}={values[verl_key] if verl_key in values else _verl_default(verl_key)}")
    config = f" in {entry.config_dir}" if entry.config_dir else ""
    config = "" if entry.is_default() else f" ({' '.join([entry.config_name, *entry.groups])}{config})"
    lines = [
        f"verl_script={path}: {len(kept)} setting(s) of {inv.module}{config}"
        + f" from {inv.source}"
        + (f"; the command's own win for {', '.join(won)}" if won else "")
        + (f"; {' '.join(extra)} (no preset, the script's job shape)" if extra else "")
        + (f"; left out, the kit sets them: {', '.join(inv.dropped)}" if inv.dropped else "")
    ]
    at = argv.index(given[-1])
    return [*argv[:at], *[_as_kit(o) for o in kept], *extra, *argv[at:]], lines
