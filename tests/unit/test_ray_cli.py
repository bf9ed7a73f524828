"""``ray start`` through the kit's lean entry to Ray's CLI (grpokit.runtime.processes.ray_cli)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from grpokit.runtime.processes import ray_cli


def test_the_groups_left_out_are_what_this_rays_cli_imports_in_try_blocks():
    """A name Ray's CLI no longer imports would leave its group in (the CLI as slow as before, silently)."""
    source = Path(importlib.util.find_spec("ray.scripts.scripts").origin).read_text()
    for name in ray_cli.UNUSED_GROUPS:
        at = source.index(f"from {name} import")
        assert source[:at].rstrip().endswith("try:"), f"{name} is no longer imported inside a try block"


def test_the_cli_loads_without_serve_or_pandas_and_start_keeps_its_options():
    probe = (
        "import sys\n"
        "from grpokit.runtime.processes import ray_cli\n"
        "ray_cli.leave_out_unused_groups()\n"
        "import ray.scripts.scripts as cli\n"
        "print(sorted(m for m in ('ray.serve', 'pandas') if m in sys.modules), sorted(cli.cli.commands))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded, commands = out.stdout.strip().split("] ", 1)
    assert loaded == "[", f"loaded anyway: {loaded}]"
    assert "'start'" in commands and "'stop'" in commands and "'serve'" not in commands

    # the kit's argv (python -m ...ray_cli) runs main(): its --help lists start and none of the groups
    listed = subprocess.run([*ray_cli.argv_prefix(), "--help"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    names = {line.split()[0] for line in listed.stdout.split("Commands:", 1)[1].splitlines() if line.strip()}
    assert "start" in names and not names & {"serve", "job", "list", "summary"}, sorted(names)
    help_text = subprocess.run([*ray_cli.argv_prefix(), "start", "--help"], capture_output=True, text=True, timeout=120)
    assert help_text.returncode == 0, help_text.stderr
    assert "--head" in help_text.stdout and "--block" in help_text.stdout
