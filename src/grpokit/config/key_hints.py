"""``did you mean ...`` for a key that does not exist, only from what the config declares.

A string-similarity guess crosses meanings: ``rollout.val_temperature`` is closest, by letters, to
``rollout.temperature`` (the training temperature), and ``rollout.n_val`` to ``rollout.n`` (the
training group size), while verl's key for both is under ``rollout.val_kwargs``. So a hint comes
only from, in this order:

1. a rename the config's owner declares (``renames``: verl's legacy ``reward_model.*`` keys,
   :mod:`grpokit.config.verl_legacy`): ``reward_model.reward_manager`` -> ``reward.reward_manager.name``;
2. a misspelling: a key with the same path, word for word (``_`` and ``.`` split words), each word
   equal or one edit / an abbreviation away (``train_bach_size`` -> ``train_batch_size``,
   ``partiton`` -> ``partition``, ``max_prompt_len`` -> ``max_prompt_length``);
3. the same leaf name under another path (``actor.temperature`` -> ``rollout.temperature``,
   ``rollout.val_kwargs.temperature``), most shared words first;
4. the words the user typed: a key that holds every word of the typed key
   (``rollout.val_temperature`` -> ``rollout.val_kwargs.temperature``, ``rollout.n_val`` ->
   ``rollout.val_kwargs.n``), fewest extra words first.

None of them: no guess (the caller says where the options are listed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_WORD = re.compile(r"[._]")
#: Most hints named in one line.
LIMIT = 3


def words(key: str) -> list[str]:
    """The words of a dotted key (``actor_rollout_ref.rollout.n`` -> actor, rollout, ref, rollout, n)."""
    return [w for w in _WORD.split(key.lower()) if w]


def _one_edit(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by one insertion, deletion, substitution or swap of neighbours."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (
            len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
        )
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return any(long_[:i] + long_[i + 1 :] == short for i in range(len(long_)))


def _close_word(a: str, b: str) -> bool:
    """The same word misspelt or abbreviated (words of 3 letters or more; short words must be equal)."""
    if a == b:
        return True
    if min(len(a), len(b)) < 3:
        return False
    return a.startswith(b) or b.startswith(a) or _one_edit(a, b)


def misspelt(typed: str, known: str) -> bool:
    """``known`` is ``typed`` spelt right: the same segments and words, at most two words misspelt."""
    segments, targets = typed.split("."), known.split(".")
    if len(segments) != len(targets) or typed == known:
        return False
    changed = 0
    for seg, target in zip(segments, targets, strict=True):
        a, b = seg.lower().split("_"), target.lower().split("_")
        if len(a) != len(b) or not all(_close_word(x, y) for x, y in zip(a, b, strict=True)):
            return False
        changed += sum(x != y for x, y in zip(a, b, strict=True))
    return changed <= 2


def renamed(typed: str, renames: Mapping[str, str]) -> str | None:
    """``typed`` under its new name: the longest renamed key that is ``typed`` or a section above it."""
    parts = typed.split(".")
    for i in range(len(parts), 0, -1):
        old = ".".join(parts[:i])
        new = renames.get(old)
        if new:
            return ".".join([new, *parts[i:]])
    return None


def hints(typed: str, known: Iterable[str], renames: Mapping[str, str] | None = None) -> list[str]:
    """Keys of ``known`` the user may have meant by ``typed`` (see the module's rules); [] for no guess.

    Args:
        typed: the key as typed, without a prefix (``actor_rollout_ref.rollout.val_temperature``).
        known: every key of the config (leaves and sections), same form.
        renames: declared renames, old key (or section) -> new key.
    """
    if renames:
        new = renamed(typed, renames)
        if new:
            return [new]
    known = list(known)
    spelt = [k for k in known if misspelt(typed, k)]
    if spelt:
        return spelt[:LIMIT]
    mine = words(typed)
    wanted = set(mine)
    leaf = typed.rsplit(".", 1)[-1]
    same_leaf = [k for k in known if k != typed and k.rsplit(".", 1)[-1] == leaf]
    if same_leaf:
        same_leaf.sort(key=lambda k: (-len(wanted & set(words(k))), len(words(k)), k))
        return same_leaf[:LIMIT]
    holding = [(len(words(k)) - len(mine), k) for k in known if k != typed and wanted <= set(words(k))]
    if holding:
        fewest = min(extra for extra, _ in holding)
        return [k for extra, k in sorted(holding) if extra == fewest][:LIMIT]
    return []
