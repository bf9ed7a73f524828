"""grpokit.slurm.times: Slurm's time format (sbatch --time, MaxTime, squeue %L/%M, scontrol RunTime)."""

from __future__ import annotations

import pytest

from grpokit.slurm.times import parse_time_min, parse_time_s


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),  # minutes (--time=30, MaxTime=30)
        ("0:05", 5),  # minutes:seconds (squeue %M of a job 5 s old)
        ("5:03", 303),
        ("01:02:03", 3723),  # hours:minutes:seconds (scontrol RunTime)
        ("2-3", 2 * 86400 + 3 * 3600),  # days-hours
        ("2-03:04", 2 * 86400 + 3 * 3600 + 4 * 60),  # days-hours:minutes
        ("1-02:03:04", 93784),  # days-hours:minutes:seconds (squeue %L, TimeLimit)
        ("365-00:00:00", 365 * 86400),
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("INVALID", None),
        ("NOT_SET", None),
        ("N/A", None),
        ("", None),
        (None, None),
        ("soon", None),
    ],
)
def test_parse_time_s(text, seconds):
    assert parse_time_s(text) == seconds


def test_parse_time_min_rounds_up():
    assert parse_time_min("1-00:00:00") == 1440 and parse_time_min("30") == 30
    assert parse_time_min("12:00:00") == 720 and parse_time_min("0:01") == 1
    assert parse_time_min("INFINITE") is None
