"""Text on the report's figures that must be seen whole: titles fitted inside the figure, the
rehearsal mark, the note of an empty panel."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text

REHEARSAL_MARK = "REHEARSAL (made-up metrics)"
NO_DATA = "no data yet"
MIN_FONT_SIZE = 6.0


def rehearsal_prefix(rehearsal: bool) -> str:
    """``"REHEARSAL (made-up metrics): "`` for a rehearsal's figure titles, else ``""``."""
    return f"{REHEARSAL_MARK}: " if rehearsal else ""


def inside_figure(fig: Figure, artist: Text, slack_px: float = 0.5) -> bool:
    """Whether the artist's rendered extent (the figure's own renderer, display pixels) lies
    within the figure's bounding box."""
    box = artist.get_window_extent(fig.canvas.get_renderer())
    whole = fig.bbox
    return (
        box.x0 >= whole.x0 - slack_px
        and box.x1 <= whole.x1 + slack_px
        and box.y0 >= whole.y0 - slack_px
        and box.y1 <= whole.y1 + slack_px
    )


def wrap_lines(text: str, width: int, break_words: bool = False) -> str:
    """Each line of text wrapped at width characters (at spaces; break_words: inside words too)."""
    out = []
    for line in text.split("\n"):
        out.extend(textwrap.wrap(line, width=max(1, width), break_long_words=break_words) or [""])
    return "\n".join(out)


def fit_title(fig: Figure, title: Text, relayout: Callable[[], None], tries: int = 10) -> bool:
    """Wrap (then shrink) a centred title until its rendered extent lies inside the figure.

    relayout: what places the axes again after the text changed (``fig.tight_layout``); it is
    called before each measurement. First the lines are wrapped at spaces to the width the title's
    centre leaves on its nearer side, then inside words, then the font shrinks down to
    :data:`MIN_FONT_SIZE` points. Returns whether the title fits (False: it still does not after
    ``tries`` rounds)."""
    full = title.get_text()
    break_words = False
    for _ in range(tries):
        relayout()
        if inside_figure(fig, title):
            return True
        renderer = fig.canvas.get_renderer()
        box = title.get_window_extent(renderer)
        centre = (box.x0 + box.x1) / 2
        room = 2 * min(centre - fig.bbox.x0, fig.bbox.x1 - centre) - 4  # px, a small margin
        current = title.get_text()
        longest = max(len(line) for line in current.split("\n")) or 1
        width = max(8, math.floor(longest * room / max(box.width, 1.0) * 0.95)) if box.width > room else longest
        wrapped = wrap_lines(full, width, break_words)
        if wrapped == current and box.width > room:
            if not break_words:
                break_words = True
                wrapped = wrap_lines(full, width, True)
            if wrapped == current:
                size = title.get_fontsize()
                if size <= MIN_FONT_SIZE:
                    return False
                title.set_fontsize(max(MIN_FONT_SIZE, size - 1))
        title.set_text(wrapped)
    relayout()
    return inside_figure(fig, title)


def note_empty(ax: Axes, detail: str = "") -> Text:
    """Write ``no data yet`` (and the detail on a second line) in the middle of an empty panel."""
    text = NO_DATA + (f"\n{detail}" if detail else "")
    return ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.35", fontsize=10)
