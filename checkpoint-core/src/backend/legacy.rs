//! Reading checkpoints of LangGraph's formats before 4, as LangGraph's own savers do.
//!
//! Until checkpoint format 4, a step's pending `Send`s were not a channel: they were pending
//! writes to [`TASKS`] recorded against the parent checkpoint (or, earlier still, a
//! checkpoint's own `pending_sends` field). LangGraph's loaders move them into the
//! [`TASKS`] channel when they read such a checkpoint, at the newest version the checkpoint
//! has, and write nothing back. A backend does the same on every read: for each tuple that
//! [`sends_parent`] names a parent for, it fetches that parent's [`TASKS`] writes and calls
//! [`apply_parent_sends`].

use crate::writes::TASKS;
use crate::{
    Bytes, ChannelVersion, Checkpoint, CheckpointConfig, CheckpointTuple, PendingWrite, TypedValue,
    ValueType,
};

/// The parent whose [`TASKS`] writes `tuple` is to be read with: a checkpoint of a format
/// before 4 that has a parent and no [`TASKS`] value of its own.
pub fn sends_parent(tuple: &CheckpointTuple) -> Option<&CheckpointConfig> {
    if tuple.checkpoint.v >= 4 || tuple.checkpoint.channel_values.contains_key(TASKS) {
        return None;
    }
    tuple.parent_config.as_ref()
}

/// Moves the parent's [`TASKS`] writes (any of `parent_writes` on that channel, taken in
/// `(task_path, task_id, idx)` order) into the tuple's [`TASKS`] channel.
pub fn apply_parent_sends(tuple: &mut CheckpointTuple, parent_writes: &[PendingWrite]) {
    let mut sends: Vec<&PendingWrite> = parent_writes
        .iter()
        .filter(|w| w.channel == TASKS)
        .collect();
    sends.sort_by(|a, b| (&a.task_path, &a.task_id, a.idx).cmp(&(&b.task_path, &b.task_id, b.idx)));
    migrate_pending_sends(&mut tuple.checkpoint, sends.into_iter().map(|w| &w.value))
}

/// Puts `sends` into the checkpoint's [`TASKS`] channel as one list (MessagePack sends as a
/// MessagePack array of them, JSON sends as a JSON array), at the newest version the
/// checkpoint names (`1` when it names none). Without sends, or with sends of mixed or
/// other serializations (which only their writer's serializer could combine), nothing
/// changes: the writes stay where they are.
pub fn migrate_pending_sends<'a>(
    checkpoint: &mut Checkpoint,
    sends: impl IntoIterator<Item = &'a TypedValue>,
) {
    let sends: Vec<&TypedValue> = sends.into_iter().collect();
    let Some(first) = sends.first() else {
        return;
    };
    let ty = first.type_tag.clone();
    if sends.iter().any(|s| s.type_tag != ty) {
        return;
    }
    let list = match ty {
        ValueType::Msgpack => {
            let Ok(n) = u32::try_from(sends.len()) else {
                return;
            };
            let mut list = Vec::new();
            if rmp::encode::write_array_len(&mut list, n).is_err() {
                return;
            }
            for send in &sends {
                list.extend_from_slice(&send.bytes);
            }
            list
        }
        ValueType::Json => {
            let mut list = b"[".to_vec();
            for (i, send) in sends.iter().enumerate() {
                if i > 0 {
                    list.push(b',');
                }
                list.extend_from_slice(&send.bytes);
            }
            list.push(b']');
            list
        }
        _ => return,
    };
    let version = checkpoint
        .channel_versions
        .values()
        .max()
        .cloned()
        .unwrap_or(ChannelVersion::Int(1));
    checkpoint
        .channel_values
        .insert(TASKS.to_owned(), TypedValue::new(ty, Bytes::from(list)));
    checkpoint
        .channel_versions
        .insert(TASKS.to_owned(), version);
}
