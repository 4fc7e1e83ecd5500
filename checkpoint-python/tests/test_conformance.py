"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) against every backend
class: every base capability and every extended one must pass."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate

from conftest import BACKENDS


@pytest.mark.parametrize("kind", BACKENDS)
async def test_langgraph_conformance(kind: str, make_store) -> None:
    stores = []

    async def factory():
        # A fresh store for each capability suite, as the runner asks.
        store = make_store(kind)
        stores.append(store)
        yield store.saver()

    registered = checkpointer_test(name=f"checkpoint_rs[{kind}]")(factory)
    report = await validate(registered)
    results = report.to_dict()
    passed = sum(r.tests_passed for r in report.results.values())
    failed = sum(r.tests_failed for r in report.results.values())
    print(
        f"langgraph-checkpoint-conformance[{kind}]: {report.conformance_level()} "
        f"({passed} passed, {failed} failed, capabilities "
        f"{sorted(c for c, r in report.results.items() if r.passed)})"
    )
    assert report.passed_all(), report.print_report() or results
    assert len(stores) == 8
