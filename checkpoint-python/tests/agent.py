"""A worker process: runs the review graph on a store until the graph interrupts (or until
a node hangs), announcing progress on stdout; the test kills it with SIGKILL.

Usage: python agent.py STORE_SPEC GRAPH THREAD_ID EFFECTS_FILE [HANG_IN]

GRAPH: `review` (runs until its interrupt) or `tools` (a refund request to the
tool-calling agent).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from conftest import open_spec
from langchain_core.messages import HumanMessage

from graphs import record, review_graph, tool_agent_graph


def main() -> None:
    spec, which, thread_id, effects = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    hang_in = sys.argv[5] if len(sys.argv) > 5 else None
    saver = open_spec(spec)
    config = {"configurable": {"thread_id": thread_id}}
    if which == "tools":
        graph = tool_agent_graph(effects, hang_in=hang_in).compile(checkpointer=saver)
        request = {"messages": [HumanMessage(content="Please refund order 1001")]}
        graph.invoke(request, config, durability="sync")
        print("DONE", flush=True)
        return
    graph = review_graph(effects, hang_in=hang_in).compile(checkpointer=saver)
    # durability="sync": each checkpoint is stored before the next step starts, so a crash
    # loses at most the step in progress (LangGraph's default, "async", stores in the
    # background while the next step runs, and a crash can lose a finished step too).
    result = graph.invoke(
        {"request": "rebalance my portfolio", "steps": []}, config, durability="sync"
    )
    assert "__interrupt__" in result, result
    # The checkpoint with the interrupt is stored; the side effect that shows the question
    # to the user comes next. The process dies here (seed 000's crash window).
    print("INTERRUPTED", flush=True)
    while True:
        time.sleep(1)
    record(effects, "question-shown")  # never reached


if __name__ == "__main__":
    main()
