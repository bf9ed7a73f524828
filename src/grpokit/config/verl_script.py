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

import dataclasses
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from grpokit.config.verl_entry import MAIN_PPO, ScriptError, check_config, locate

#: The modules a verl command runs (``python -m <module>``): verl's trainers and a recipe's entry.
_PYTHON = re.compile(r"(^|/)python[0-9.]*$")
_SUBSTITUTION = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=[\"']?(?:\$\(|`)")
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
    with their values (for the dry run's "where each setting came from").
    """

    module: str
    config_path: str | None
    config_name: str | None
    overrides: tuple[str, ...]
    source: str
    variables: Mapping[str, str]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """``(first line number, text)`` of each logical line: continuations joined, comments dropped."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not pending:
            start = number
            if line.lstrip().startswith("#"):
                continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            out.append((start, pending.strip()))
        pending = ""
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def _expand(word: str, values: Mapping[str, str], environ: Mapping[str, str], where: str, used: dict) -> str:
    """``word`` with its variables replaced (see the module docstring)."""
    if "$(" in word or "`" in word or "$((" in word:
        raise ScriptError(
            f"{where}: {word!r} runs a command ($(...) or backquotes), which the kit does not run: "
            "write the value into the script or pass the key on the sweep command"
        )

    def one(match: re.Match) -> str:
        name = match.group(1) or match.group(4)
        if match.group(5):  # $@ / $*: the caller's arguments; the sweep's overrides come after
            return ""
        op, default = match.group(2), match.group(3)
        if name in values and not values[name].startswith(_UNRESOLVED):
            value = values[name]  # the script's own assignment wins, as in bash
            if op and op.startswith(":") and value == "":
                value = default or ""
        elif name in environ:
            value = environ[name]
            if op and op.startswith(":") and value == "":
                value = default or ""
        elif name in values:
            value = values[name]  # an unresolved marker: an error only where the verl command needs it
        elif op is not None:
            value = default or ""
        else:
            raise ScriptError(
                f"{where}: ${name} has no value (not set in the script or the environment): "
                f"export {name}=... before the sweep command, or set it in the script"
            )
        if default and "$" in default and value == default:
            value = _expand(default, values, environ, where, used)
        used[name] = value
        return value

    return _VAR.sub(one, word)


def _words(line: str, where: str) -> list[str]:
    try:
        return shlex.split(line, posix=True, comments=True)
    except ValueError as exc:
        raise ScriptError(f"{where}: cannot be read as shell words ({exc}): check its quotes") from exc


def read_script(path: Path | str, environ: Mapping[str, str]) -> VerlInvocation:
    """The verl command of the launch script at ``path`` (see the module docstring).

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
    found: list[tuple[str, list[str]]] = []
    depth = 0  # inside if/case/for/while blocks, which the kit does not evaluate
    for number, line in _logical_lines(text):
        where = f"{path}:{number}"
        substituted = _SUBSTITUTION.match(line)
        if substituted:  # NAME=$(...) or NAME=`...`: a command the kit does not run
            values[substituted.group(1)] = (
                f"{_UNRESOLVED}{substituted.group(1)} is set by a command the kit does not run{_END}"
            )
            continue
        # single quotes keep '$' literal in bash: mark them so the expansion leaves them alone
        words = _words(_protect_single_quoted(line), where)
        if not words:
            continue
        depth += words[0] in _OPENERS
        depth -= sum(w.rstrip(";") in _CLOSERS for w in words)
        assign = _ASSIGN.match(words[1] if words[0] == "export" and len(words) > 1 else words[0])
        if assign and (len(words) == 1 or (words[0] == "export" and len(words) == 2)):
            name, raw = assign.groups()
            if depth > 0:
                values[name] = f"{_UNRESOLVED}{name} is set inside an if/case/for block at {where}{_END}"
                continue
            try:
                values[name] = _restore(_expand(raw, values, environ, where, {}))
            except ScriptError:
                values[name] = f"{_UNRESOLVED}{name} is set by a command the kit does not run{_END}"
            continue
        command = [w for w in words if not _ASSIGN.match(w)] if _ASSIGN.match(words[0]) else words
        if len(command) >= 3 and _PYTHON.search(command[0]) and command[1] == "-m":
            found.append((where, command))
    if not found:
        raise ScriptError(
            f"verl_script={path}: no `python -m <module> ...` command (verl's launch form, "
            "e.g. python3 -m verl.trainer.main_ppo key=value ...)"
        )
    if len(found) > 1:
        raise ScriptError(
            f"verl_script={path}: {len(found)} `python -m` commands ({', '.join(w for w, _ in found)}): "
            "give a script with one verl command"
        )
    where, command = found[0]
    used: dict[str, str] = {}
    module = command[2]
    config_path = config_name = None
    overrides: list[str] = []
    args = iter(command[3:])
    for word in args:
        value = _restore(_expand(word, values, environ, where, used))
        if _UNRESOLVED in value:
            why = value.split(_UNRESOLVED, 1)[1].split(_END, 1)[0]
            name = why.split()[0]
            raise ScriptError(
                f"{where}: ${why}, which the kit does not evaluate: export {name}=... before the sweep command"
            )
        for flag in ("--config-path", "--config-name"):
            if value == flag:
                value = f"{flag}={_restore(_expand(next(args, ''), values, environ, where, used))}"
        if value.startswith("--config-path="):
            config_path = value.split("=", 1)[1]
        elif value.startswith("--config-name="):
            config_name = value.split("=", 1)[1]
        elif value:
            overrides.append(value)
    return VerlInvocation(module, config_path, config_name, tuple(overrides), where, used)


_SQ = "\x00SQ\x00"
_UNRESOLVED = "\x00UNRESOLVED:"
_END = "\x00"
_OPENERS = frozenset({"if", "case", "for", "while", "until", "select"})
_CLOSERS = frozenset({"fi", "esac", "done"})


def _protect_single_quoted(line: str) -> str:
    """``line`` with each ``$`` inside single quotes hidden (bash expands nothing there); single quotes
    inside double quotes are plain characters (``"['$a', '$b']"`` expands both)."""
    out, state = [], None  # None, "'" or '"'
    escaped = False
    for ch in line:
        if escaped:
            escaped = False
        elif ch == "\\" and state != "'":
            escaped = True
        elif state is None and ch in "'\"":
            state = ch
        elif ch == state:
            state = None
        elif ch == "$" and state == "'":
            ch = _SQ
        out.append(ch)
    return "".join(out)


def _restore(word: str) -> str:
    return word.replace(_SQ, "$")


__all__ = ["MAIN_PPO", "ScriptError", "VerlInvocation", "expand_argv", "read_script"]


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
    hardware profile, and the script's ``trainer.nnodes`` / ``trainer.n_gpus_per_node`` as the job's
    shape (``cluster.nodes`` / ``cluster.gpus_per_node``) unless the command sets it; with a config
    other than verl's ``ppo_trainer`` (Megatron's ``ppo_megatron_trainer``, a recipe's entry and
    folder: :func:`grpokit.config.verl_entry.locate`, ``recipe_root=<checkout>`` on the command) the
    ``verl_entry.*`` and ``verl_base@verl`` overrides that select it, and it becomes this process's
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
    inv = read_script(path, environ)
    roots = [a.split("=", 1)[1] for a in argv if a.split("=", 1)[0].lstrip("+") == "recipe_root"]
    entry = locate(inv, path, roots[-1] if roots else None)
    check_config(entry, path)
    use(entry.ref)
    typed = {_key(a) for a in argv if "=" in a or a.startswith("~")}
    kept = [o for o in inv.overrides if f"verl.{_key(o)}" not in typed]
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
        if verl_key in values and kit_key not in typed and f"verl.{verl_key}" not in typed:
            extra.append(f"{kit_key}={values[verl_key]}")
    config = f" in {entry.config_dir}" if entry.config_dir else ""
    config = "" if entry.is_default() else f" ({entry.config_name}{config})"
    lines = [
        f"verl_script={path}: {len(kept)} setting(s) of {inv.module}{config}"
        + f" from {inv.source}"
        + (f"; the command's own win for {', '.join(won)}" if won else "")
        + (f"; {' '.join(extra)} (no preset, the script's job shape)" if extra else "")
    ]
    at = argv.index(given[-1])
    return [*argv[:at], *[_as_kit(o) for o in kept], *extra, *argv[at:]], lines
