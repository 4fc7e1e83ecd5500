//! The integration tests of `checkpoint-sqlite`, in one binary: the conformance suite on a
//! file and in memory, through the `checkpoint-sanitize` stack, the field reports'
//! scenarios, a writer killed with SIGKILL many times, TTLs, concurrency, and files written
//! by Python's LangGraph, and connections kept warm between operations.

mod common;
mod conformance;
mod crash;
mod features;
mod langgraph;
mod stack;
mod warm;
