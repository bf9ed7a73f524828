"""The rehearsal trainer's TensorBoard file reads as verl's (torch's ``SummaryWriter``) does."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from grpokit.rehearsal.rehearsal_trainer import ScalarEventWriter


def _scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_scalars_read_back_as_those_torchs_summary_writer_wrote(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    metrics = {1: {"actor/grad_norm": 0.75, "critic/score/mean": 0.25}, 2: {"actor/grad_norm": 1.5}}
    ours, torchs = ScalarEventWriter(str(tmp_path / "ours")), SummaryWriter(str(tmp_path / "torch"))
    for step, values in metrics.items():
        for writer in (ours, torchs):
            for key, value in values.items():
                writer.add_scalar(key, value, step)
            writer.flush()
    ours.close()
    torchs.close()

    assert [p.name.split(".")[:3] for p in (tmp_path / "ours").iterdir()] == [["events", "out", "tfevents"]]
    assert (
        _scalars(tmp_path / "ours")
        == _scalars(tmp_path / "torch")
        == {
            "actor/grad_norm": [(1, 0.75), (2, 1.5)],
            "critic/score/mean": [(1, 0.25)],
        }
    )
