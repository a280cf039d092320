"""The py-spy summary behind the miss-path profiles: packages by file path, the event loop's waits set apart."""

from __future__ import annotations

from tests.benchmarks.profile_summary import summarise

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
RUN = f"main (/work/main/gateway/__main__.py:40);Runner.run ({STDLIB}/asyncio/runners.py:118)"
LINES = [
    # The loop waiting in epoll: only Runner.run on the stack.
    f"{RUN} 40",
    # The model call: the SDK's transform called from the project's code.
    f"{RUN};answer (/work/main/pipelines/direct/graph.py:10);create ({SITE}/openai/_client.py:5) 6",
    f"{RUN};screen (/work/main/gateway/guardrails/service.py:3) 3",
    f"{RUN};sleep ({STDLIB}/asyncio/tasks.py:639) 1",
]


def test_the_loops_waits_are_counted_apart_and_left_out_of_the_shares() -> None:
    summary = summarise(LINES)
    assert (summary.total, summary.idle) == (10, 40)
    assert summary.self_counts == {"openai": 6, "gateway": 3, "asyncio": 1}
    assert summary.inclusive_counts["pipelines"] == 6
    assert summary.inclusive_counts["asyncio"] == 10  # Runner.run is below every busy sample too
    assert summary.table().splitlines()[0] == "10 busy samples (40 more of the event loop waiting, left out)"
    assert "| openai | 60.0 | 60.0 |" in summary.table()
