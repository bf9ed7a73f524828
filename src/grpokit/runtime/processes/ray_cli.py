"""Ray's CLI without its unused command groups: ``python -m grpokit.runtime.processes.ray_cli start ...``.

Ray's CLI module (``ray/scripts/scripts.py``, Ray 2.60) imports the ``serve``, ``job`` and state
(``list``/``get``/``summary``/``logs``) command groups as it loads, each in a ``try`` block that
leaves the group out when its import fails. ``ray start`` uses none of them, and ``ray.serve``
alone (it imports pandas) is most of the CLI's CPU at every start: measured on this 2-core host,
1.6-1.9 s of CPU to load the CLI, 0.4-0.6 s without those three groups; a job pays it once per
node, every attempt. Here their imports fail (``sys.modules[name] = None`` makes ``import name``
raise ``ImportError``: Python's import system, "The module cache"), so the CLI loads without them;
every argument and behaviour of ``ray start`` stays Ray's own (``--help`` lists the other commands).
"""

from __future__ import annotations

import sys

#: Modules of the CLI's optional command groups, each imported inside a ``try`` by ``ray/scripts/scripts.py``.
UNUSED_GROUPS = ("ray.serve.scripts", "ray.dashboard.modules.job.cli", "ray.util.state.state_cli")


def argv_prefix() -> list[str]:
    """The argv that runs Ray's CLI through this module with this interpreter (append ``start ...``).

    A module of this interpreter always matches this Ray, also where a ``pip install --target``
    (the offline GPU host's bundle) puts no ``ray`` script beside the interpreter.
    """
    return [sys.executable, "-m", __name__]


def leave_out_unused_groups() -> None:
    """Make the imports of :data:`UNUSED_GROUPS` fail in this process (before Ray's CLI loads)."""
    for name in UNUSED_GROUPS:
        sys.modules.setdefault(name, None)


def main() -> int:
    leave_out_unused_groups()
    from ray.scripts.scripts import main as ray_main

    sys.argv[0] = "ray"
    return ray_main()


if __name__ == "__main__":
    sys.exit(main())
