//! `list` pages: ordered index walks under the read lock, bounded per page.

use std::ops::Bound;

use super::store::{NsData, Store};
use crate::{CheckpointTuple, ListOptions};

/// How many index entries one page examines at most, so a selective filter never holds the
/// lock for a whole scan.
const SCAN_BUDGET: usize = 4096;

/// Where a list stream continues: the last index key it examined.
#[derive(Clone, Debug)]
pub(super) enum Cursor {
    Start,
    After(String, String, String),
    Done,
}

pub(super) fn next_page(
    store: &Store,
    opts: &ListOptions,
    cursor: &mut Cursor,
    want: usize,
) -> Vec<CheckpointTuple> {
    let mut out = Vec::new();
    let (id0, t0, n0) = match cursor {
        Cursor::Done => return out,
        Cursor::Start => (None, String::new(), String::new()),
        Cursor::After(i, t, n) => (Some(i.clone()), t.clone(), n.clone()),
    };
    // Upper bound (exclusive) of the id range, from the cursor or `before`.
    let before = opts.before.clone();
    let mut scanned = 0;
    let mut last: Option<(String, String, String)> = None;
    let mut exhausted = true;
    let mut visit =
        |id: &str, thread: &str, ns: &str, data: &NsData, out: &mut Vec<CheckpointTuple>| -> bool {
            scanned += 1;
            last = Some((id.to_owned(), thread.to_owned(), ns.to_owned()));
            if let Some(stored) = data.checkpoints.get(id)
                && opts.admits(thread, ns, id, &stored.metadata)
                && let Some(t) = data.tuple(thread, ns, id)
            {
                out.push(t);
            }
            out.len() < want && scanned < SCAN_BUDGET
        };
    match (&opts.thread_id, &opts.checkpoint_ns) {
        (Some(thread_id), Some(ns)) => {
            if let Some(data) = store
                .threads
                .get(thread_id)
                .and_then(|t| t.namespaces.get(ns))
            {
                let upper = match (&id0, &before) {
                    (Some(c), _) => Bound::Excluded(c.clone()),
                    (None, Some(b)) => Bound::Excluded(b.clone()),
                    (None, None) => Bound::Unbounded,
                };
                for id in data
                    .checkpoints
                    .range((Bound::Unbounded, upper))
                    .rev()
                    .map(|(id, _)| id)
                {
                    if !visit(id, thread_id, ns, data, &mut out) {
                        exhausted = false;
                        break;
                    }
                }
            }
        }
        (Some(thread_id), None) => {
            if let Some(thread) = store.threads.get(thread_id) {
                let upper = match (&id0, &before) {
                    (Some(c), _) => Bound::Excluded((c.clone(), n0.clone())),
                    (None, Some(b)) => Bound::Excluded((b.clone(), String::new())),
                    (None, None) => Bound::Unbounded,
                };
                for (id, ns) in thread.by_id.range((Bound::Unbounded, upper)).rev() {
                    let Some(data) = thread.namespaces.get(ns) else {
                        continue;
                    };
                    if !visit(id, thread_id, ns, data, &mut out) {
                        exhausted = false;
                        break;
                    }
                }
            }
        }
        (None, _) => {
            let upper = match (&id0, &before) {
                (Some(c), _) => Bound::Excluded((c.clone(), t0.clone(), n0.clone())),
                (None, Some(b)) => Bound::Excluded((b.clone(), String::new(), String::new())),
                (None, None) => Bound::Unbounded,
            };
            for (id, thread_id, ns) in store.global.range((Bound::Unbounded, upper)).rev() {
                let Some(data) = store
                    .threads
                    .get(thread_id)
                    .and_then(|t| t.namespaces.get(ns))
                else {
                    continue;
                };
                if !visit(id, thread_id, ns, data, &mut out) {
                    exhausted = false;
                    break;
                }
            }
        }
    }
    *cursor = match (exhausted, last) {
        (false, Some((i, t, n))) => Cursor::After(i, t, n),
        _ => Cursor::Done,
    };
    out
}
