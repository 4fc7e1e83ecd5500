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


def hang(where: str) -> None:
    """Announces `where` on stdout and waits forever, for a test to kill the process."""
    import time

    print(f"HANGING in {where}", flush=True)
    while True:
        time.sleep(1)


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
            hang(name)

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


# -- a tool-calling agent (seed 004) -------------------------------------------------------

from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import MessagesState  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402


class ProviderRejected(Exception):
    """What a chat provider answers (HTTP 400) to a history with unanswered tool calls."""


def check_tool_calls_answered(messages: list[BaseMessage]) -> None:
    """The provider-side rule (OpenAI, Anthropic): an assistant message with tool_calls must
    be followed by a tool message for each call id before the next non-tool message."""
    open_calls: set[str] = set()
    for m in messages:
        if isinstance(m, ToolMessage):
            open_calls.discard(m.tool_call_id)
            continue
        if open_calls:
            raise ProviderRejected(
                "400: An assistant message with 'tool_calls' must be followed by tool "
                f"messages responding to each 'tool_call_id'; missing {sorted(open_calls)}"
            )
        if isinstance(m, AIMessage):
            open_calls = {c["id"] for c in m.tool_calls}
    if open_calls:
        raise ProviderRejected(f"400: unanswered tool calls {sorted(open_calls)}")


class ScriptedChatModel(BaseChatModel):
    """A chat model without network: validates the history as a provider does, asks for
    the order lookup tool on a refund request, and answers from a tool result."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        check_tool_calls_answered(messages)
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=f"Tool said: {last.content}")
        elif "refund" in str(last.content):
            reply = AIMessage(
                content="",
                tool_calls=[{"name": "lookup_order", "args": {"order": "1001"}, "id": "call_1001"}],
            )
        else:
            reply = AIMessage(content=f"You said: {last.content}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def tool_agent_graph(effects: Path, hang_in: str | None = None):
    """agent -> tools -> agent, LangGraph's prebuilt ToolNode and tools_condition."""

    @tool
    def lookup_order(order: str) -> str:
        """Looks an order up."""
        record(effects, "lookup_order")
        if hang_in == "lookup_order":
            hang("lookup_order")
        return f"order {order}: 89.90 EUR, delivered"

    model = ScriptedChatModel()

    def agent(state: MessagesState):
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup_order]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder


# -- nested workers that interrupt (seed 001) ------------------------------------------------


class TeamState(TypedDict, total=False):
    """The state of the team and of its workers (plain last-value channels, so a worker's
    output overwrites the parent's keys with the values it was given plus its own)."""

    request: str
    intake: str
    hr: str
    it: str


def worker_graph(name: str, effects: Path):
    """A worker agent: gather -> ask (interrupts for a human answer) -> finish."""

    def gather(state: TeamState) -> TeamState:
        record(effects, f"{name}.gather")
        return {}

    def ask(state: TeamState) -> TeamState:
        answer = interrupt(f"{name}: what should I do?")
        record(effects, f"{name}.ask")
        return {name: answer}

    def finish(state: TeamState) -> TeamState:
        record(effects, f"{name}.finish")
        return {}

    builder = StateGraph(TeamState)
    builder.add_node("gather", gather)
    builder.add_node("ask", ask)
    builder.add_node("finish", finish)
    builder.add_edge(START, "gather")
    builder.add_edge("gather", "ask")
    builder.add_edge("ask", "finish")
    builder.add_edge("finish", END)
    return builder.compile()


def team_graph(effects: Path):
    """intake (interrupts) -> hr worker -> it worker, each worker a subgraph with its own
    checkpoint namespace."""

    def intake(state: TeamState) -> TeamState:
        need = interrupt("intake: what do you need?")
        record(effects, "intake")
        return {"intake": need}

    builder = StateGraph(TeamState)
    builder.add_node("intake", intake)
    builder.add_node("hr", worker_graph("hr", effects))
    builder.add_node("it", worker_graph("it", effects))
    builder.add_edge(START, "intake")
    builder.add_edge("intake", "hr")
    builder.add_edge("hr", "it")
    builder.add_edge("it", END)
    return builder


# -- side effects once, one run per case (seed 002) ------------------------------------------


class CaseState(TypedDict, total=False):
    case: str
    draft: str
    sent: str
    steps: Annotated[list[str], operator.add]


def case_graph(effects: Path, saver=None, hang_in: str | None = None, wait_for: Path | None = None):
    """draft -> send_email -> close: a case-management agent that emails the customer.

    `saver`: send the email through `saver.once` keyed by the task (else directly, as a
    plain node does). `hang_in="send_email"`: announce and hang right after the email went
    out, before the node returns (a crash there is what makes LangGraph run it again).
    `wait_for`: `draft` announces itself and waits until that file exists."""

    def draft(state: CaseState) -> CaseState:
        record(effects, "draft")
        if wait_for is not None:
            import time

            print("DRAFTING", flush=True)
            while not wait_for.exists():
                time.sleep(0.05)
        return {"draft": f"Your case {state['case']} is resolved.", "steps": ["draft"]}

    def send_email(state: CaseState, config) -> CaseState:
        def send() -> str:
            record(effects, "email")
            return f"msg-{len(effects_of(effects))}"

        if saver is None:
            sent = send()
        else:
            sent = saver.once(saver.effect_key(config, "send_email"), send)
        if hang_in == "send_email":
            hang("send_email")
        return {"sent": sent, "steps": ["send_email"]}

    def close(state: CaseState) -> CaseState:
        record(effects, "close")
        return {"steps": ["close"]}

    builder = StateGraph(CaseState)
    builder.add_node("draft", draft)
    builder.add_node("send_email", send_email)
    builder.add_node("close", close)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "send_email")
    builder.add_edge("send_email", "close")
    builder.add_edge("close", END)
    return builder
