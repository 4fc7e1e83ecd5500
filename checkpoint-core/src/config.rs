//! Addressing: which thread, namespace and checkpoint an operation is about.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Separator between nesting levels of a checkpoint namespace (`"outer:<task>|inner:<task>"`).
pub const NS_SEP: char = '|';
/// Separator between a node name and its task id inside one namespace level.
pub const NS_END: char = ':';

/// The address of a checkpoint, LangGraph's `config["configurable"]`.
///
/// * `thread_id`: required and non-empty for every operation that takes a config.
/// * `checkpoint_ns`: `""` is the root graph; a subgraph's namespace is `"<node>:<task_id>"`,
///   nested levels are joined with `|` (see [`child_namespace`]).
/// * `checkpoint_id`: `None` means "the latest checkpoint of this thread and namespace" when
///   reading, and "no parent" when putting.
/// * `extra`: any other configurable keys a runtime carries along. Savers never persist them
///   and never return them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointConfig {
    /// The conversation / run thread.
    pub thread_id: String,
    /// The namespace inside the thread (`""` = root graph).
    #[serde(default)]
    pub checkpoint_ns: String,
    /// A specific checkpoint, or `None` for the latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<String>,
    /// Caller-defined configurable keys, never persisted by a saver.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl CheckpointConfig {
    /// A config for the root namespace of `thread_id`, addressing its latest checkpoint.
    pub fn new(thread_id: impl Into<String>) -> Self {
        Self {
            thread_id: thread_id.into(),
            ..Self::default()
        }
    }

    /// Sets the namespace.
    pub fn with_ns(mut self, checkpoint_ns: impl Into<String>) -> Self {
        self.checkpoint_ns = checkpoint_ns.into();
        self
    }

    /// Sets the checkpoint id.
    pub fn with_checkpoint_id(mut self, checkpoint_id: impl Into<String>) -> Self {
        self.checkpoint_id = Some(checkpoint_id.into());
        self
    }

    /// The same address without a checkpoint id (the latest of the namespace).
    pub fn latest(&self) -> Self {
        Self {
            thread_id: self.thread_id.clone(),
            checkpoint_ns: self.checkpoint_ns.clone(),
            checkpoint_id: None,
            extra: BTreeMap::new(),
        }
    }

    /// Rejects a config whose thread id is empty.
    pub fn require_thread(&self) -> Result<&str> {
        if self.thread_id.is_empty() {
            return Err(Error::invalid("config has no thread_id"));
        }
        Ok(&self.thread_id)
    }

    /// Rejects a config without thread id or checkpoint id, returning the checkpoint id.
    pub fn require_checkpoint_id(&self) -> Result<&str> {
        self.require_thread()?;
        match self.checkpoint_id.as_deref() {
            Some(id) if !id.is_empty() => Ok(id),
            _ => Err(Error::invalid("config has no checkpoint_id")),
        }
    }
}

/// The namespace of a subgraph started by `node` as task `task_id` inside `parent_ns`.
///
/// ```
/// use checkpoint_core::child_namespace;
/// assert_eq!(child_namespace("", "worker", "t1"), "worker:t1");
/// assert_eq!(child_namespace("worker:t1", "agent", "t2"), "worker:t1|agent:t2");
/// ```
pub fn child_namespace(parent_ns: &str, node: &str, task_id: &str) -> String {
    if parent_ns.is_empty() {
        format!("{node}{NS_END}{task_id}")
    } else {
        format!("{parent_ns}{NS_SEP}{node}{NS_END}{task_id}")
    }
}

/// The `(node, task_id)` levels of a namespace, outermost first; empty for the root.
///
/// ```
/// use checkpoint_core::namespace_levels;
/// assert_eq!(namespace_levels("a:1|b:2"), vec![("a", "1"), ("b", "2")]);
/// assert!(namespace_levels("").is_empty());
/// ```
pub fn namespace_levels(ns: &str) -> Vec<(&str, &str)> {
    if ns.is_empty() {
        return Vec::new();
    }
    ns.split(NS_SEP)
        .map(|level| level.split_once(NS_END).unwrap_or((level, "")))
        .collect()
}
