"""Points a new sweep repeats from an earlier sweep of the same experiment, said before submitting.

The same ``grpokit sweep -m ...`` typed twice (an up-arrow in the shell) gets a new generated
folder and submits every point again; with 64 points that is 64 jobs' GPU hours spent twice, and
nothing said so. This module finds earlier sweep folders under the same ``logs_root`` whose
manifest (``manifest.json``, docs/run-folder.md) holds points with the same command-line overrides,
and the sweep command prints one ``note:`` line per such folder with the way to continue it
(``sweep_name=<it> resume=true``). A repeat may be wanted (another seed, a re-run after a fix),
so nothing is refused. Dry runs' folders are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grpokit.run_folder.layout import SweepFolder
from grpokit.run_folder.manifest import read_manifest

#: Overrides that name or steer the command, not the point's training: left out of the comparison.
NOT_COMPARED = ("sweep_name", "resume", "dry_run", "wait")
#: How many of the newest sweep folders are read (each read is one small JSON file).
NEWEST = 50


@dataclass(frozen=True)
class Repeat:
    """``count`` points of the new sweep appear in the earlier sweep ``name`` (created ``created``)."""

    name: str
    count: int
    created: str

    def note(self, total: int) -> str:
        """One line for the sweep command's output."""
        which = "all" if self.count == total else f"{self.count} of"
        return (
            f"{which} these {total} point(s) were submitted before, with the same overrides, as sweep "
            f"{self.name} ({self.created}); to continue those instead: sweep_name={self.name} resume=true"
        )


def _key(overrides: list[str]) -> tuple[str, ...]:
    """A point's overrides without those in :data:`NOT_COMPARED`, in a fixed order."""
    return tuple(sorted(o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in NOT_COMPARED))


def earlier_sweeps(logs_root: Path, experiment: str, points: list[list[str]]) -> list[Repeat]:
    """Earlier (not dry-run) sweeps of ``experiment`` under ``logs_root`` holding any of ``points``
    (each a point's command-line overrides), newest first. Unreadable manifests are skipped."""
    wanted = {_key(p) for p in points}
    manifests = [m for m in (SweepFolder(p).manifest for p in Path(logs_root).glob("*/")) if m.is_file()]
    manifests.sort(key=lambda m: m.stat().st_mtime, reverse=True)
    repeats = []
    for path in manifests[:NEWEST]:
        try:
            manifest = read_manifest(path.parent)
        except (OSError, ValueError):  # a damaged or foreign manifest (ManifestError): not a repeat
            continue
        if manifest.dry_run or manifest.experiment != experiment:
            continue
        same = sum(1 for p in manifest.points if _key(p.overrides) in wanted)
        if same:
            repeats.append(Repeat(path.parent.name, same, manifest.created or "?"))
    return repeats
