"""A worker process: runs the review graph on a store until the graph interrupts (or until
a node hangs), announcing progress on stdout; the test kills it with SIGKILL.

Usage: python agent.py STORE_SPEC THREAD_ID EFFECTS_FILE [HANG_IN_NODE]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from conftest import open_spec
from graphs import record, review_graph


def main() -> None:
    spec, thread_id, effects = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    hang_in = sys.argv[4] if len(sys.argv) > 4 else None
    saver = open_spec(spec)
    graph = review_graph(effects, hang_in=hang_in).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread_id}}
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
