//! Comparing the saver under test with the model: results, lists, and the contract's own
//! rules for what both return.

use std::fmt::{self, Debug};
use std::panic::AssertUnwindSafe;

use checkpoint_core::{CheckpointTuple, Error, ListOptions};
use futures::FutureExt;

/// The first difference between the saver under test and the model.
pub(super) struct Mismatch {
    pub(super) what: String,
    pub(super) saver: String,
    pub(super) model: String,
}

impl Mismatch {
    pub(super) fn new(what: impl Into<String>, saver: &dyn Debug, model: &dyn Debug) -> Self {
        Self {
            what: what.into(),
            saver: format!("{saver:#?}"),
            model: format!("{model:#?}"),
        }
    }

    /// Both savers returned `agreed`, which breaks the contract: the model is wrong too.
    pub(super) fn contract(what: &str, violation: &str, agreed: &dyn Debug) -> Self {
        let shown = format!("{agreed:#?}");
        Self {
            what: format!(
                "{what}: both savers agree, but the result breaks the Saver contract, so the \
                 reference model (InMemorySaver) is wrong as well: {violation}"
            ),
            saver: shown.clone(),
            model: shown,
        }
    }
}

/// A short rendering of a result for mismatch reports.
pub(super) struct Outcome<'a, T>(pub(super) &'a checkpoint_core::Result<T>);

impl<T: Debug> Debug for Outcome<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Ok(v) => write!(f, "Ok({v:#?})"),
            Err(e) => write!(f, "Err({e:?}) = \"{e}\""),
        }
    }
}

/// Which saver a call went to.
#[derive(Clone, Copy)]
pub(super) enum Side {
    Saver,
    Model,
}

pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}

/// Awaits one call, turning a panic into a mismatch that names the side and the call.
pub(super) async fn guard<F: Future>(
    side: Side,
    call: &str,
    fut: F,
) -> Result<F::Output, Mismatch> {
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(output) => Ok(output),
        Err(panic) => {
            let message = format!("panicked: {}", panic_message(&*panic));
            let (who, saver, model) = match side {
                Side::Saver => ("the saver under test", message, "-".to_owned()),
                Side::Model => (
                    "the reference model (InMemorySaver)",
                    "-".to_owned(),
                    message,
                ),
            };
            Err(Mismatch {
                what: format!("{who} panicked in `{call}` (no operation may panic)"),
                saver,
                model,
            })
        }
    }
}

pub(super) fn same_kind(a: &Error, b: &Error) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// Compares two results: equal values, or errors of the same variant.
pub(super) fn compare<T: PartialEq + Debug>(
    what: &str,
    saver: &checkpoint_core::Result<T>,
    model: &checkpoint_core::Result<T>,
) -> Result<(), Mismatch> {
    let agree = match (saver, model) {
        (Ok(a), Ok(b)) => a == b,
        (Err(a), Err(b)) => same_kind(a, b),
        _ => false,
    };
    if agree {
        Ok(())
    } else {
        Err(Mismatch::new(
            format!("{what} differs"),
            &Outcome(saver),
            &Outcome(model),
        ))
    }
}

pub(super) fn address(t: &CheckpointTuple) -> String {
    format!(
        "{}/{:?}/{}",
        t.config.thread_id, t.config.checkpoint_ns, t.checkpoint.id
    )
}

pub(super) fn addresses(tuples: &[CheckpointTuple]) -> String {
    let all: Vec<String> = tuples.iter().map(address).collect();
    format!("[{}]", all.join(", "))
}

pub(super) fn differing_fields(a: &CheckpointTuple, b: &CheckpointTuple) -> Vec<&'static str> {
    let mut out = Vec::new();
    if a.config != b.config {
        out.push("config");
    }
    if a.checkpoint != b.checkpoint {
        out.push("checkpoint");
    }
    if a.metadata != b.metadata {
        out.push("metadata");
    }
    if a.parent_config != b.parent_config {
        out.push("parent_config");
    }
    if a.pending_writes != b.pending_writes {
        out.push("pending_writes");
    }
    out
}

/// Compares two list results element by element.
pub(super) fn compare_lists(
    what: &str,
    saver: &checkpoint_core::Result<Vec<CheckpointTuple>>,
    model: &checkpoint_core::Result<Vec<CheckpointTuple>>,
) -> Result<(), Mismatch> {
    let (Ok(s), Ok(m)) = (saver, model) else {
        return compare(what, saver, model);
    };
    for i in 0..s.len().max(m.len()) {
        let (a, b) = (s.get(i), m.get(i));
        if a == b {
            continue;
        }
        let detail = match (a, b) {
            (Some(a), Some(b)) => format!("differs in {}", differing_fields(a, b).join(", ")),
            (Some(_), None) => "is extra in the saver's result".to_owned(),
            _ => "is missing from the saver's result".to_owned(),
        };
        return Err(Mismatch {
            what: format!(
                "{what}: element {i} {detail} (the saver yields {} tuples, the model {})\n  \
                 saver (thread/ns/id): {}\n  model (thread/ns/id): {}",
                s.len(),
                m.len(),
                addresses(s),
                addresses(m),
            ),
            saver: format!("{a:#?}"),
            model: format!("{b:#?}"),
        });
    }
    Ok(())
}

/// What the contract says of every tuple a read returns.
pub(super) fn tuple_violation(t: &CheckpointTuple) -> Option<String> {
    let c = &t.config;
    if c.checkpoint_id.as_deref() != Some(t.checkpoint.id.as_str()) || !c.extra.is_empty() {
        return Some(format!(
            "{}: config does not carry exactly its address",
            address(t)
        ));
    }
    if let Some(p) = &t.parent_config {
        let parent_id = p.checkpoint_id.as_deref().unwrap_or("");
        if p.thread_id != c.thread_id
            || p.checkpoint_ns != c.checkpoint_ns
            || parent_id >= t.checkpoint.id.as_str()
            || !p.extra.is_empty()
        {
            return Some(format!(
                "{}: parent_config {p:?} is not an older checkpoint of the same thread and \
                 namespace",
                address(t)
            ));
        }
    }
    if let Some(channel) = t
        .checkpoint
        .channel_values
        .keys()
        .find(|k| !t.checkpoint.channel_versions.contains_key(*k))
    {
        return Some(format!(
            "{}: channel {channel:?} has a value but no version",
            address(t)
        ));
    }
    let keys: Vec<_> = t
        .pending_writes
        .iter()
        .map(|w| (&w.task_path, &w.task_id, w.idx))
        .collect();
    if keys.windows(2).any(|k| k[0] >= k[1]) {
        return Some(format!(
            "{}: pending writes are not strictly ordered by (task_path, task_id, idx): {keys:?}",
            address(t)
        ));
    }
    for w in &t.pending_writes {
        let expected = checkpoint_core::writes::special_index(&w.channel);
        if expected.is_some_and(|i| i != w.idx) || (expected.is_none() && w.idx < 0) {
            return Some(format!(
                "{}: write {:?} of task {:?} has index {}",
                address(t),
                w.channel,
                w.task_id,
                w.idx
            ));
        }
    }
    None
}

/// What the contract says of every list result.
pub(super) fn list_violation(options: &ListOptions, tuples: &[CheckpointTuple]) -> Option<String> {
    if let Some(limit) = options.limit
        && tuples.len() > limit
    {
        return Some(format!("{} tuples exceed the limit {limit}", tuples.len()));
    }
    let key = |t: &CheckpointTuple| {
        (
            t.checkpoint.id.clone(),
            t.config.thread_id.clone(),
            t.config.checkpoint_ns.clone(),
        )
    };
    if let Some(pair) = tuples.windows(2).find(|p| key(&p[0]) <= key(&p[1])) {
        return Some(format!(
            "not ordered by (id, thread, namespace) descending: {} comes before {}",
            address(&pair[0]),
            address(&pair[1])
        ));
    }
    for t in tuples {
        if !options.admits(
            &t.config.thread_id,
            &t.config.checkpoint_ns,
            &t.checkpoint.id,
            &t.metadata,
        ) {
            return Some(format!("{} does not pass the list options", address(t)));
        }
        if let Some(v) = tuple_violation(t) {
            return Some(v);
        }
    }
    None
}

/// Checks that an operation the saver does not advertise failed with `Unsupported`
/// (or, when the input is faulty too, with `InvalidInput`: validation may come first).
pub(super) fn expect_unsupported<T: Debug>(
    capability: &str,
    saver: &checkpoint_core::Result<T>,
    faulty: bool,
) -> Result<(), Mismatch> {
    match saver {
        Err(Error::Unsupported { .. }) => Ok(()),
        Err(Error::InvalidInput { .. }) if faulty => Ok(()),
        _ => Err(Mismatch::new(
            format!(
                "the saver does not advertise `{capability}` in capabilities() but did not \
                 return Error::Unsupported"
            ),
            &Outcome(saver),
            &"Err(Unsupported { .. })",
        )),
    }
}
