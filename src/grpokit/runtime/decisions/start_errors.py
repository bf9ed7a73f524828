"""The errors of a start that did not come up, raised by the processes and read by the outcome."""

from __future__ import annotations


class RayStartError(RuntimeError):
    """Ray did not come up: names the component and carries the tail of its log."""


class RayStartInterrupted(RayStartError):
    """The start was given up because the job is stopping (a stop signal arrived meanwhile)."""


class SidecarError(RuntimeError):
    """A sidecar failed to start or died: the message names it and quotes its log."""
