//! Applying one operation to both savers and comparing what they did.

use std::collections::BTreeSet;

use checkpoint_core::{
    Capabilities, ChannelVersion, ChannelVersions, Checkpoint, CheckpointConfig, CheckpointTuple,
    Error, InMemorySaver, ListOptions, PutOptions, PutWritesOptions, Saver, SaverExt, TypedValue,
    new_checkpoint_id,
};

use super::*;

/// The state of one run: the savers and what the model currently holds.
pub(super) struct Run<'a> {
    pub(super) saver: &'a dyn Saver,
    pub(super) model: &'a InMemorySaver,
    pub(super) caps: Capabilities,
    /// Every checkpoint of the model, newest first, as `ListOptions::new()` yields them.
    pub(super) current: Vec<CheckpointTuple>,
    /// Every checkpoint id a put was attempted with, oldest first.
    pub(super) issued: Vec<String>,
}

/// Resolves `index` modulo `len`.
pub(super) fn pick<T>(items: &[T], index: usize) -> Option<&T> {
    if items.is_empty() {
        None
    } else {
        items.get(index % items.len())
    }
}

/// A successor of `parent` (or a first checkpoint) with `changes` applied, and its
/// `new_versions`.
pub(super) fn successor(
    parent: Option<&Checkpoint>,
    changes: &[(String, Option<TypedValue>)],
    string_versions: bool,
) -> (Checkpoint, ChannelVersions) {
    let mut checkpoint = match parent {
        Some(p) => {
            let mut c = p.successor();
            c.versions_seen
                .insert(NODE.to_owned(), p.channel_versions.clone());
            c
        }
        None => Checkpoint::new(),
    };
    let mut new_versions = ChannelVersions::new();
    let mut updated = BTreeSet::new();
    for (channel, value) in changes {
        let current = checkpoint.channel_versions.get(channel);
        let next = if string_versions && current.is_none() {
            ChannelVersion::next_string(None)
        } else {
            ChannelVersion::next(current)
        };
        match value {
            Some(v) => {
                checkpoint.channel_values.insert(channel.clone(), v.clone());
            }
            None => {
                checkpoint.channel_values.remove(channel);
            }
        }
        checkpoint
            .channel_versions
            .insert(channel.clone(), next.clone());
        new_versions.insert(channel.clone(), next);
        updated.insert(channel.clone());
    }
    checkpoint.updated_channels = (!updated.is_empty()).then(|| updated.into_iter().collect());
    (checkpoint, new_versions)
}

pub(super) fn put_options(compare_and_set: bool) -> PutOptions {
    if compare_and_set {
        PutOptions::compare_and_set()
    } else {
        PutOptions::new()
    }
}

impl Run<'_> {
    /// The model's checkpoints of one thread and namespace, newest first.
    fn of(&self, thread: &str, ns: &str) -> Vec<&CheckpointTuple> {
        self.current
            .iter()
            .filter(|t| t.config.thread_id == thread && t.config.checkpoint_ns == ns)
            .collect()
    }

    fn existing(&self, index: usize) -> Option<CheckpointTuple> {
        pick(&self.current, index).cloned()
    }

    /// The id of an existing checkpoint (or, when there is none, of an issued one).
    fn existing_id(&self, index: usize) -> Option<String> {
        pick(&self.current, index)
            .map(|t| t.checkpoint.id.clone())
            .or_else(|| pick(&self.issued, index).cloned())
    }

    /// Lists both with `options`, compares element by element, checks the contract, and
    /// returns the model's result.
    async fn list_both(
        &self,
        what: &str,
        options: &ListOptions,
    ) -> Result<Vec<CheckpointTuple>, Mismatch> {
        let s = guard(Side::Saver, "list", self.saver.list_all(options.clone())).await?;
        let m = guard(Side::Model, "list", self.model.list_all(options.clone())).await?;
        compare_lists(what, &s, &m)?;
        match m {
            Ok(tuples) => match list_violation(options, &tuples) {
                Some(v) => Err(Mismatch::contract(what, &v, &addresses(&tuples))),
                None => Ok(tuples),
            },
            // Both failed alike: tolerated for a query, but the full contents must list.
            Err(e) => Err(Mismatch::new(
                format!("{what} failed on both savers"),
                &Outcome::<()>(&s.map(|_| ())),
                &Outcome::<()>(&Err(e)),
            )),
        }
    }

    /// Lists both savers' full contents, compares them and remembers the model's.
    pub(super) async fn check_state(&mut self) -> Result<(), Mismatch> {
        self.current = self
            .list_both("the full contents (global list)", &ListOptions::new())
            .await?;
        Ok(())
    }

    pub(super) async fn apply(&mut self, op: &Op) -> Result<(), Mismatch> {
        match op {
            Op::Put {
                thread,
                ns,
                parent,
                changes,
                string_versions,
                metadata,
                compare_and_set,
                fault,
            } => {
                let entries = self.of(thread, ns);
                let parent = match parent {
                    Parent::None => None,
                    Parent::Head => entries.first().copied(),
                    Parent::Older(i) if entries.len() > 1 => {
                        Some(entries[1 + i % (entries.len() - 1)])
                    }
                    Parent::Older(_) => entries.first().copied(),
                }
                .cloned();
                let mut config = CheckpointConfig::new(thread.as_str()).with_ns(ns.as_str());
                if let Some(p) = &parent {
                    config = config.with_checkpoint_id(p.checkpoint.id.as_str());
                }
                let (mut checkpoint, mut new_versions) = successor(
                    parent.as_ref().map(|p| &p.checkpoint),
                    changes,
                    *string_versions,
                );
                match fault {
                    None => {}
                    Some(PutFault::EmptyThread) => config.thread_id.clear(),
                    Some(PutFault::EmptyCheckpointId) => checkpoint.id.clear(),
                    Some(PutFault::IdNotAboveParent) => match &parent {
                        Some(p) => checkpoint.id = p.checkpoint.id.clone(),
                        None => config.checkpoint_id = Some(new_checkpoint_id()),
                    },
                    Some(PutFault::VersionMismatch) => {
                        let channel = changes
                            .first()
                            .map_or(CHANNELS[0], |(c, _)| c.as_str())
                            .to_owned();
                        // Differs from the channel's version in the checkpoint (if any).
                        let wrong = ChannelVersion::next(checkpoint.channel_versions.get(&channel));
                        new_versions.insert(channel, wrong);
                    }
                }
                if !checkpoint.id.is_empty() {
                    self.issued.push(checkpoint.id.clone());
                }
                let options = put_options(*compare_and_set);
                let s = guard(
                    Side::Saver,
                    "put",
                    self.saver.put(
                        &config,
                        checkpoint.clone(),
                        metadata.clone(),
                        new_versions.clone(),
                        options.clone(),
                    ),
                )
                .await?;
                if *compare_and_set && !self.caps.compare_and_set {
                    return expect_unsupported("compare_and_set", &s, fault.is_some());
                }
                let expected = config.latest().with_checkpoint_id(checkpoint.id.as_str());
                let m = guard(
                    Side::Model,
                    "put",
                    self.model
                        .put(&config, checkpoint, metadata.clone(), new_versions, options),
                )
                .await?;
                compare("the put result", &s, &m)?;
                match &m {
                    Ok(returned) if *returned != expected => Err(Mismatch::contract(
                        "the put result",
                        &format!("put must return {expected:?}"),
                        returned,
                    )),
                    Err(e) if fault.is_some() && !matches!(e, Error::InvalidInput { .. }) => {
                        Err(Mismatch::contract(
                            "the put result",
                            "a faulty put must fail with InvalidInput",
                            e,
                        ))
                    }
                    Ok(returned) if fault.is_some() => Err(Mismatch::contract(
                        "the put result",
                        "a faulty put must fail with InvalidInput",
                        returned,
                    )),
                    _ => Ok(()),
                }
            }
            Op::RepeatPut {
                target,
                metadata,
                compare_and_set,
            } => {
                let Some(t) = self.existing(*target) else {
                    return Ok(());
                };
                let mut config = t.config.latest();
                if let Some(p) = &t.parent_config {
                    config.checkpoint_id = p.checkpoint_id.clone();
                }
                let new_versions = t.checkpoint.channel_versions.clone();
                let options = put_options(*compare_and_set);
                let s = guard(
                    Side::Saver,
                    "put",
                    self.saver.put(
                        &config,
                        t.checkpoint.clone(),
                        metadata.clone(),
                        new_versions.clone(),
                        options.clone(),
                    ),
                )
                .await?;
                if *compare_and_set && !self.caps.compare_and_set {
                    return expect_unsupported("compare_and_set", &s, false);
                }
                let m = guard(
                    Side::Model,
                    "put",
                    self.model.put(
                        &config,
                        t.checkpoint,
                        metadata.clone(),
                        new_versions,
                        options,
                    ),
                )
                .await?;
                compare("the repeated put result", &s, &m)
            }
            Op::PutWrites {
                target,
                writes,
                task_id,
                task_path,
                fault,
            } => {
                let Some(t) = self.existing(*target) else {
                    return Ok(());
                };
                let mut config = t.config;
                match fault {
                    None => {}
                    Some(WritesFault::EmptyThread) => config.thread_id.clear(),
                    Some(WritesFault::NoCheckpointId) => config.checkpoint_id = None,
                }
                let options = PutWritesOptions::new().task_path(task_path.as_str());
                let s = guard(
                    Side::Saver,
                    "put_writes",
                    self.saver
                        .put_writes(&config, writes.clone(), task_id, options.clone()),
                )
                .await?;
                let m = guard(
                    Side::Model,
                    "put_writes",
                    self.model
                        .put_writes(&config, writes.clone(), task_id, options),
                )
                .await?;
                compare("the put_writes result", &s, &m)
            }
            Op::GetTuple { target } => {
                let config = match target {
                    GetTarget::Latest { thread, ns } => {
                        CheckpointConfig::new(thread.as_str()).with_ns(ns.as_str())
                    }
                    GetTarget::Existing(i) => match self.existing(*i) {
                        Some(t) => t.config,
                        None => CheckpointConfig::new(THREADS[0]),
                    },
                    GetTarget::Issued { index, thread, ns } => {
                        let id = pick(&self.issued, *index)
                            .cloned()
                            .unwrap_or_else(new_checkpoint_id);
                        CheckpointConfig::new(thread.as_str())
                            .with_ns(ns.as_str())
                            .with_checkpoint_id(id)
                    }
                    GetTarget::Missing { thread, ns } => CheckpointConfig::new(thread.as_str())
                        .with_ns(ns.as_str())
                        .with_checkpoint_id(new_checkpoint_id()),
                    GetTarget::EmptyThread => CheckpointConfig::new(""),
                };
                let what = format!("get_tuple({config:?})");
                let s = guard(Side::Saver, "get_tuple", self.saver.get_tuple(&config)).await?;
                let m = guard(Side::Model, "get_tuple", self.model.get_tuple(&config)).await?;
                compare(&what, &s, &m)?;
                let violation = match &m {
                    Ok(Some(t)) => tuple_violation(t).or_else(|| {
                        let wanted = (
                            &config.thread_id,
                            &config.checkpoint_ns,
                            config.checkpoint_id.as_ref().unwrap_or(&t.checkpoint.id),
                        );
                        let got = (
                            &t.config.thread_id,
                            &t.config.checkpoint_ns,
                            &t.checkpoint.id,
                        );
                        (wanted != got).then(|| "returns another checkpoint".to_owned())
                    }),
                    Ok(None) => None,
                    Err(Error::InvalidInput { .. }) if config.thread_id.is_empty() => None,
                    Err(_) if config.thread_id.is_empty() => {
                        Some("an empty thread id must give InvalidInput".to_owned())
                    }
                    Err(_) => Some("a read of a valid address must not fail".to_owned()),
                };
                match violation {
                    Some(v) => Err(Mismatch::contract(&what, &v, &Outcome(&m))),
                    None => Ok(()),
                }
            }
            Op::List {
                thread,
                ns,
                checkpoint_id,
                filter,
                before,
                limit,
            } => {
                let mut options = ListOptions::new().with_filter(filter.clone());
                options.thread_id = thread.clone();
                options.checkpoint_ns = ns.clone();
                options.checkpoint_id = checkpoint_id.and_then(|i| self.existing_id(i));
                options.before = before.and_then(|i| self.existing_id(i));
                options.limit = *limit;
                self.list_both(&format!("list({options:?})"), &options)
                    .await
                    .map(drop)
            }
            Op::DeleteThread { thread } => {
                let s = guard(
                    Side::Saver,
                    "delete_thread",
                    self.saver.delete_thread(thread),
                )
                .await?;
                let m = guard(
                    Side::Model,
                    "delete_thread",
                    self.model.delete_thread(thread),
                )
                .await?;
                compare("the delete_thread result", &s, &m)
            }
            Op::CopyThread { source, target } => {
                let s = guard(
                    Side::Saver,
                    "copy_thread",
                    self.saver.copy_thread(source, target),
                )
                .await?;
                if !self.caps.copy_thread {
                    return expect_unsupported("copy_thread", &s, false);
                }
                let m = guard(
                    Side::Model,
                    "copy_thread",
                    self.model.copy_thread(source, target),
                )
                .await?;
                compare("the copy_thread result", &s, &m)
            }
            Op::Prune { threads, strategy } => {
                let s = guard(Side::Saver, "prune", self.saver.prune(threads, *strategy)).await?;
                if !self.caps.prune {
                    return expect_unsupported("prune", &s, false);
                }
                let m = guard(Side::Model, "prune", self.model.prune(threads, *strategy)).await?;
                compare("the prune result", &s, &m)
            }
            Op::DeleteForRuns { runs } => {
                let s = guard(
                    Side::Saver,
                    "delete_for_runs",
                    self.saver.delete_for_runs(runs),
                )
                .await?;
                if !self.caps.delete_for_runs {
                    return expect_unsupported("delete_for_runs", &s, false);
                }
                let m = guard(
                    Side::Model,
                    "delete_for_runs",
                    self.model.delete_for_runs(runs),
                )
                .await?;
                compare("the delete_for_runs result", &s, &m)
            }
        }
    }
}
