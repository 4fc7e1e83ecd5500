//! Pending writes: values a task produced for a checkpoint before the next checkpoint exists.

use serde::{Deserialize, Serialize};

use crate::TypedValue;

/// Channel of a task's error write.
pub const ERROR: &str = "__error__";
/// Channel of a scheduled (delayed) task write.
pub const SCHEDULED: &str = "__scheduled__";
/// Channel of an interrupt write.
pub const INTERRUPT: &str = "__interrupt__";
/// Channel of a resume value write.
pub const RESUME: &str = "__resume__";
/// The channel of pending `Send`s (LangGraph's `TASKS`). Before checkpoint format 4, sends
/// were pending writes to it on the parent checkpoint, or a checkpoint's `pending_sends`.
pub const TASKS: &str = "__pregel_tasks";

/// The special channels and their fixed indexes (LangGraph's `WRITES_IDX_MAP`).
pub const SPECIAL_CHANNELS: [(&str, i64); 4] =
    [(ERROR, -1), (SCHEDULED, -2), (INTERRUPT, -3), (RESUME, -4)];

/// The fixed negative index of a special channel, or `None` for an ordinary channel.
pub fn special_index(channel: &str) -> Option<i64> {
    SPECIAL_CHANNELS
        .iter()
        .find(|(c, _)| *c == channel)
        .map(|(_, i)| *i)
}

/// The index a write gets: the special channel's fixed index, or its position in the call.
pub fn write_index(channel: &str, position: usize) -> i64 {
    special_index(channel).unwrap_or(position as i64)
}

/// Whether a `put_writes` call consists only of special-channel writes. Such a call replaces
/// existing writes with the same `(task_id, idx)`; any other call keeps the first write.
pub fn replaces_existing(writes: &[(String, TypedValue)]) -> bool {
    !writes.is_empty() && writes.iter().all(|(c, _)| special_index(c).is_some())
}

/// One pending write as returned in a [`CheckpointTuple`](crate::CheckpointTuple).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingWrite {
    /// The task that produced the write.
    pub task_id: String,
    /// The channel written.
    pub channel: String,
    /// The value written.
    pub value: TypedValue,
    /// Position in its `put_writes` call, or the special channel's fixed negative index.
    pub idx: i64,
    /// The task's path in the graph (LangGraph's `task_path`; `""` when not given).
    pub task_path: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_indexes_are_fixed() {
        assert_eq!(write_index(ERROR, 7), -1);
        assert_eq!(write_index(SCHEDULED, 0), -2);
        assert_eq!(write_index(INTERRUPT, 0), -3);
        assert_eq!(write_index(RESUME, 0), -4);
        assert_eq!(write_index("messages", 3), 3);
        let w = |c: &str| (c.to_owned(), TypedValue::null());
        assert!(replaces_existing(&[w(ERROR), w(INTERRUPT)]));
        assert!(!replaces_existing(&[w(ERROR), w("x")]));
        assert!(!replaces_existing(&[]));
    }
}
