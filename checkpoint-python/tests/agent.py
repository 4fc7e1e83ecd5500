"""A worker process: runs the review graph on a store until the graph interrupts (or until
a node hangs), announcing progress on stdout; the test kills it with SIGKILL.

Usage: python agent.py STORE_SPEC GRAPH THREAD_ID EFFECTS_FILE [HANG_IN]

GRAPH: `review` (runs until its interrupt), `tools` (a refund request to the
tool-calling agent), `case` (the case graph, emailing directly), `case-once` (emailing
through `saver.once`) or `case-locked` (the case graph under `saver.lock_thread`, its
`draft` waiting until the file EFFECTS_FILE.go exists; prints the fence and how the run
ended).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from checkpoint_rs import StaleFenceError
from conftest import open_spec
from langchain_core.messages import HumanMessage

from graphs import case_graph, record, review_graph, tool_agent_graph


def main() -> None:
    spec, which, thread_id, effects = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    hang_in = sys.argv[5] if len(sys.argv) > 5 else None
    saver = open_spec(spec)
    config = {"configurable": {"thread_id": thread_id}}
    if which in ("case", "case-once"):
        once = saver if which == "case-once" else None
        graph = case_graph(effects, once, hang_in=hang_in).compile(checkpointer=saver)
        graph.invoke({"case": thread_id, "steps": []}, config, durability="sync")
        print("DONE", flush=True)
        return
    if which == "case-locked":
        graph = case_graph(effects, saver, wait_for=Path(f"{effects}.go"))
        graph = graph.compile(checkpointer=saver)
        with saver.lock_thread(thread_id) as lock:
            print(f"LOCKED {lock.fence}", flush=True)
            try:
                graph.invoke({"case": thread_id, "steps": []}, config, durability="sync")
            except StaleFenceError as e:
                print(f"STALE lost={lock.lost} {e}", flush=True)
                return
        print("DONE", flush=True)
        return
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
