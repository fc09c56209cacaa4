"""
The clients' counting harnesses (C{python -m tools.client_count}) run their
tasks through the real client code (their figures belong to callgrind, not
to the tests).
"""

from __future__ import annotations

import pytest

from tools import client_count


@pytest.mark.parametrize("workload", sorted(client_count.WORKLOADS))
def test_each_workload_runs_its_tasks(workload: str, capsys: pytest.CaptureFixture[str]) -> None:
    client_count.main([workload, "512"])
    assert capsys.readouterr().out.startswith(f"{workload}: ")


@pytest.mark.parametrize("tasks", ["0", "-3", "many"])
def test_a_task_count_below_one_is_one_line_and_a_non_zero_exit(tasks: str) -> None:
    with pytest.raises(SystemExit, match=r"^tools.client_count: N counts tasks, 1 or more, not "):
        client_count.main(["--count", "worker", tasks])
