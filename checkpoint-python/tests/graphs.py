"""Real LangGraph graphs the tests run (shared by the test process and its child processes).

Side effects are appended to an effects file, one line per execution, so a test can tell
which nodes ran, and how many times, across processes.
"""

from __future__ import annotations

import asyncio
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


def record(effects: Path, what: str) -> None:
    with open(effects, "a") as f:
        f.write(what + "\n")
        f.flush()


def effects_of(effects: Path) -> list[str]:
    return effects.read_text().split() if effects.exists() else []


class ReviewState(TypedDict, total=False):
    request: str
    classification: dict[str, Any]
    decision: str
    steps: Annotated[list[str], operator.add]


def review_graph(effects: Path, hang_in: str | None = None):
    """classify -> present (interrupts for a human choice) -> act.

    `hang_in`: the node that announces itself on stdout and then hangs, so a test can kill
    the process in the middle of that step.
    """

    def step(name: str) -> None:
        record(effects, name)
        if hang_in == name:
            print(f"HANGING in {name}", flush=True)
            while True:
                import time

                time.sleep(1)

    def classify(state: ReviewState) -> ReviewState:
        step("classify")
        return {
            "classification": {"kind": "rebalance", "options": ["hold", "rebalance"]},
            "steps": ["classify"],
        }

    def present(state: ReviewState) -> ReviewState:
        choice = interrupt(
            {"question": "Rebalance the portfolio?", "options": state["classification"]["options"]}
        )
        step("present")
        return {"decision": choice, "steps": ["present"]}

    def act(state: ReviewState) -> ReviewState:
        step("act")
        return {"steps": ["act"]}

    builder = StateGraph(ReviewState)
    builder.add_node("classify", classify)
    builder.add_node("present", present)
    builder.add_node("act", act)
    builder.add_edge(START, "classify")
    builder.add_edge("classify", "present")
    builder.add_edge("present", "act")
    builder.add_edge("act", END)
    return builder


class CounterState(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def slow_graph(delay: float = 0.3):
    """One async node that takes `delay` seconds: two invocations of one thread overlap."""

    async def work(state: CounterState) -> CounterState:
        await asyncio.sleep(delay)
        return {"log": ["work"]}

    builder = StateGraph(CounterState)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    return builder
