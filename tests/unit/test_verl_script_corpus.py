"""verl's and verl-recipe's published launch scripts through ``verl_script=`` (issue 34 item 7).

The corpus is ``tests/data/verl_scripts/expected.yaml`` (README there: source, commit, licence): each
published script by its path at its commit, and the verdict verl gives it (its Hydra composition,
``validate_config``, its source, the job environment: ``bench/verl_corpus.py --truth``). The kit stores
no script: here, without checkouts, each ``main_ppo`` script of :data:`verl_corpus.STORED` is the
argument list bash passes to ``python3`` for it (``tests/data/verl_corpus_arguments.txt``), run through
what a ``dry_run=true`` sweep runs (the script read, the command-line check, the point, every
validation) as a user runs it (data and model paths replaced by the user's own), and the kit's verdict
and reason must be the ones ``expected.yaml`` records. The whole corpus, from checkouts:
``python bench/verl_corpus.py --verl <checkout> --recipe <checkout>`` (docs/validation.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import verl_corpus  # noqa: E402

EXPECTED = verl_corpus.expected()
STORED = verl_corpus.stored_arguments()


@pytest.fixture(scope="module")
def verdicts(tiny_model_dir, gsm8k_dir, tmp_path_factory):
    """The kit's verdict of each stored list (fresh processes: one sweep command reads one script)."""
    tmp = tmp_path_factory.mktemp("corpus")
    env = verl_corpus.user_env(tmp / "home")
    jobs = [
        (verl_corpus.script_of([a.replace("{tmp}", str(tmp)) for a in args], tmp, name), tiny_model_dir, gsm8k_dir,
         tmp / "logs", env, None)
        for name, args in STORED.items()
    ]
    return dict(zip(STORED, verl_corpus.kit_verdicts_alone(jobs), strict=True))


@pytest.mark.parametrize("name", sorted(STORED))
def test_each_script_gets_the_verdict_verl_gives(verdicts, name):
    want = EXPECTED[name]
    verdict, reason = verdicts[name]
    cls = verl_corpus.classify((verdict, reason), want)
    assert cls == want["class"], f"{cls}: {reason}"
    if want["class"] in ("right accept", "right refuse"):
        assert (verdict, want.get("reason", "") in reason) == (want["verdict"], True), reason


def test_the_corpus_is_named_not_copied():
    names = sorted(EXPECTED)
    assert len(names) >= 30 and set(STORED) <= set(names) and set(STORED) == set(verl_corpus.STORED)
    for kind in ("grpo_trainer", "ppo_trainer", "megatron", "lora", "ascend", "profile", "dapo", "retool"):
        assert any(kind in n for n in names), kind
    assert {e["class"] for e in EXPECTED.values()} <= set(verl_corpus.CLASSES)
    assert {verl_corpus.split(n)[0] for n in names} == set(verl_corpus.SOURCES)
    folder = verl_corpus.EXPECTED.parent
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "expected.yaml"]  # no script text here
    readme = (folder / "README.md").read_text()
    for source, (repo, commit, _) in verl_corpus.SOURCES.items():
        assert source in readme and repo in readme and commit in readme
    assert "Apache-2.0" in readme
    for args in STORED.values():
        assert args[0] == "-m"
        assert all(a.split("=", 1)[1] == "{mine}" for a in args if a.split("=", 1)[0] in verl_corpus.REPLACED)
