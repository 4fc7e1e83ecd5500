//! The arguments of each script: one type per script that builds its `ARGV` in the order
//! the script unpacks it, so the order is known in exactly one place on the Rust side.

use super::{Call, Lua, SCRIPTS};
use crate::keys::esc;

/// The arguments of one script: which script, and its `ARGV` in order.
pub(crate) trait Args: Sized {
    /// The script these arguments are for.
    fn script() -> &'static Lua;

    /// `ARGV`, in the order the script unpacks it.
    fn argv(self) -> Vec<Vec<u8>>;

    /// A call of the script on `keys` with these arguments.
    fn call(self, keys: Vec<String>) -> Call<'static> {
        Call {
            script: Self::script(),
            keys,
            args: self.argv(),
        }
    }
}

fn bytes(s: impl AsRef<[u8]>) -> Vec<u8> {
    s.as_ref().to_vec()
}

fn flag(yes: bool) -> Vec<u8> {
    bytes(if yes { "1" } else { "0" })
}

fn number(n: impl ToString) -> Vec<u8> {
    n.to_string().into_bytes()
}

fn fence(token: Option<u64>) -> Vec<u8> {
    token.map(number).unwrap_or_default()
}

/// What the client wrote ahead of `put.lua`, and what follows its fixed arguments.
pub(crate) enum PutMode {
    /// `P`: a single-node unconditional re-put; everything but the record was written ahead.
    Prewritten,
    /// `F`: a single-node compare-and-set or fenced put. `written` are the value and chunk
    /// fields written ahead, swept again if the put is refused.
    Refusable {
        thread_index: Vec<Vec<u8>>,
        global_index: Vec<Vec<u8>>,
        written: Vec<Vec<u8>>,
    },
    /// `V`: a Cluster put; `values` are (field, value) pairs, chunks first.
    Cluster {
        thread_index: Vec<Vec<u8>>,
        values: Vec<Vec<u8>>,
    },
}

/// `put.lua`.
pub(crate) struct PutArgs<'a> {
    pub(crate) ttl_ms: u64,
    pub(crate) thread_id: &'a str,
    pub(crate) fence: Option<u64>,
    pub(crate) compare_and_set: bool,
    pub(crate) ns: &'a str,
    pub(crate) id: &'a str,
    pub(crate) parent: Option<&'a str>,
    pub(crate) record: Vec<u8>,
    pub(crate) mode: PutMode,
}

impl Args for PutArgs<'_> {
    fn script() -> &'static Lua {
        &SCRIPTS.put
    }

    fn argv(self) -> Vec<Vec<u8>> {
        let extra = match &self.mode {
            PutMode::Prewritten => 0,
            PutMode::Refusable {
                thread_index,
                global_index,
                written,
            } => 2 + thread_index.len() + global_index.len() + written.len(),
            PutMode::Cluster {
                thread_index,
                values,
            } => 2 + thread_index.len() + values.len(),
        };
        let mut argv = Vec::with_capacity(9 + extra);
        argv.extend([
            number(self.ttl_ms),
            esc(self.thread_id),
            fence(self.fence),
            flag(self.compare_and_set),
            esc(self.ns),
            esc(self.id),
            self.parent.map(esc).unwrap_or_default(),
            self.record,
        ]);
        match self.mode {
            PutMode::Prewritten => argv.push(bytes("P")),
            PutMode::Refusable {
                thread_index,
                global_index,
                written,
            } => {
                argv.push(bytes("F"));
                argv.push(number(thread_index.len()));
                argv.extend(thread_index);
                argv.push(number(global_index.len()));
                argv.extend(global_index);
                argv.extend(written);
            }
            PutMode::Cluster {
                thread_index,
                values,
            } => {
                argv.push(bytes("V"));
                argv.push(number(thread_index.len()));
                argv.extend(thread_index);
                argv.push(number(0));
                argv.extend(values);
            }
        }
        argv
    }
}

/// `touch.lua`.
pub(crate) struct TouchArgs {
    pub(crate) ttl_ms: u64,
}

impl Args for TouchArgs {
    fn script() -> &'static Lua {
        &SCRIPTS.touch
    }

    fn argv(self) -> Vec<Vec<u8>> {
        vec![number(self.ttl_ms)]
    }
}

/// `put_writes.lua`. `writes` are (esc(task_id) idx8, stored form) pairs.
pub(crate) struct PutWritesArgs {
    pub(crate) ttl_ms: u64,
    pub(crate) fence: Option<u64>,
    pub(crate) tref: Vec<u8>,
    pub(crate) replace: bool,
    pub(crate) task_path: Vec<u8>,
    pub(crate) writes: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Args for PutWritesArgs {
    fn script() -> &'static Lua {
        &SCRIPTS.put_writes
    }

    fn argv(self) -> Vec<Vec<u8>> {
        let mut argv = Vec::with_capacity(5 + 2 * self.writes.len());
        argv.extend([
            number(self.ttl_ms),
            fence(self.fence),
            self.tref,
            flag(self.replace),
            self.task_path,
        ]);
        for (tail, stored) in self.writes {
            argv.push(tail);
            argv.push(stored);
        }
        argv
    }
}

/// `get.lua`.
pub(crate) struct GetArgs<'a> {
    pub(crate) ttl_ms: u64,
    pub(crate) refresh: bool,
    pub(crate) ns: &'a str,
    /// `None`: the namespace's latest.
    pub(crate) id: Option<&'a str>,
    /// Only the small part of the tuple (record and write members).
    pub(crate) meta_only: bool,
}

impl Args for GetArgs<'_> {
    fn script() -> &'static Lua {
        &SCRIPTS.get
    }

    fn argv(self) -> Vec<Vec<u8>> {
        vec![
            number(self.ttl_ms),
            flag(self.refresh),
            esc(self.ns),
            self.id.map(esc).unwrap_or_default(),
            flag(self.meta_only),
        ]
    }
}

/// `delta.lua`.
pub(crate) struct DeltaArgs<'a> {
    pub(crate) ttl_ms: u64,
    pub(crate) refresh: bool,
    pub(crate) ns: &'a str,
    /// `None`: the namespace's latest.
    pub(crate) id: Option<&'a str>,
    pub(crate) channels: &'a [&'a str],
}

impl Args for DeltaArgs<'_> {
    fn script() -> &'static Lua {
        &SCRIPTS.delta
    }

    fn argv(self) -> Vec<Vec<u8>> {
        let mut argv = vec![
            number(self.ttl_ms),
            flag(self.refresh),
            esc(self.ns),
            self.id.map(esc).unwrap_or_default(),
        ];
        for channel in self.channels {
            argv.push(channel.as_bytes().to_vec());
            argv.push(esc(channel));
        }
        argv
    }
}

/// How `list.lua` walks a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ThreadScan {
    /// One namespace, no filter.
    Namespace,
    /// Every namespace, no filter.
    ById,
    /// Metadata tokens, intersected.
    Tokens,
}

/// `list.lua`: one page of a thread.
pub(crate) struct ListArgs<'a> {
    pub(crate) ttl_ms: u64,
    pub(crate) refresh: bool,
    pub(crate) want: usize,
    pub(crate) budget: usize,
    pub(crate) lo: Vec<u8>,
    pub(crate) hi: Vec<u8>,
    /// The namespace each reference must have (`Tokens` with a namespace), escaped.
    pub(crate) ns_check: Vec<u8>,
    pub(crate) scan: ThreadScan,
    /// The namespace (`Namespace`).
    pub(crate) ns: Option<&'a str>,
    pub(crate) tokens: &'a [String],
}

impl Args for ListArgs<'_> {
    fn script() -> &'static Lua {
        &SCRIPTS.list
    }

    fn argv(self) -> Vec<Vec<u8>> {
        let mode = match self.scan {
            ThreadScan::Namespace => "byns",
            ThreadScan::ById => "byid",
            ThreadScan::Tokens => "mi",
        };
        let mut argv = Vec::with_capacity(9 + self.tokens.len());
        argv.extend([
            number(self.ttl_ms),
            flag(self.refresh),
            number(self.want),
            number(self.budget),
            self.lo,
            self.hi,
            self.ns_check,
            bytes(mode),
            self.ns.map(esc).unwrap_or_default(),
        ]);
        argv.extend(self.tokens.iter().map(bytes));
        argv
    }
}

/// `threads.lua`: one page of thread entries from `lo` (exclusive), checking on a single
/// node that each thread still exists.
pub(crate) struct ThreadsArgs {
    pub(crate) lo: Vec<u8>,
    pub(crate) want: usize,
    pub(crate) budget: usize,
    pub(crate) check: bool,
}

impl Args for ThreadsArgs {
    fn script() -> &'static Lua {
        &SCRIPTS.threads
    }

    fn argv(self) -> Vec<Vec<u8>> {
        vec![
            self.lo,
            number(self.want),
            number(self.budget),
            flag(self.check),
        ]
    }
}

/// `gscan.lua`: one page of global references, every checkpoint (`tokens` empty) or those
/// whose metadata has every token.
pub(crate) struct GscanArgs<'a> {
    pub(crate) want: usize,
    pub(crate) budget: usize,
    pub(crate) lo: Vec<u8>,
    pub(crate) hi: Vec<u8>,
    pub(crate) ns_check: Vec<u8>,
    pub(crate) tokens: &'a [String],
}

impl Args for GscanArgs<'_> {
    fn script() -> &'static Lua {
        &SCRIPTS.gscan
    }

    fn argv(self) -> Vec<Vec<u8>> {
        let mode = if self.tokens.is_empty() { "all" } else { "mi" };
        let mut argv = Vec::with_capacity(6 + self.tokens.len());
        argv.extend([
            number(self.want),
            number(self.budget),
            self.lo,
            self.hi,
            self.ns_check,
            bytes(mode),
        ]);
        argv.extend(self.tokens.iter().map(bytes));
        argv
    }
}

/// One operation of `gindex.lua`.
pub(crate) enum IndexOp {
    /// Adds a checkpoint's entries, keeping tokens it had.
    Add { gref: Vec<u8>, tokens: Vec<u8> },
    /// Sets a checkpoint's entries.
    Set { gref: Vec<u8>, tokens: Vec<u8> },
    /// Removes a checkpoint's entries.
    Remove { gref: Vec<u8> },
    /// Removes a checkpoint's entries if its record `tref` is gone from hash `cp_key`.
    RemoveIfGone {
        gref: Vec<u8>,
        cp_key: String,
        tref: Vec<u8>,
    },
    /// Adds a thread's entry (`keys::thread_entry`) and records when (Cluster).
    AddThread { entry: Vec<u8> },
    /// Removes a thread entry whose thread was found gone, unless it was written within
    /// the last `grace_ms` (Cluster: a put may be in flight).
    RemoveThreadIfOld { entry: Vec<u8>, grace_ms: u64 },
}

/// `gindex.lua`: global index operations, applied in order.
pub(crate) struct GindexArgs {
    pub(crate) ops: Vec<IndexOp>,
}

impl Args for GindexArgs {
    fn script() -> &'static Lua {
        &SCRIPTS.gindex
    }

    fn argv(self) -> Vec<Vec<u8>> {
        let mut argv = Vec::with_capacity(3 * self.ops.len());
        for op in self.ops {
            match op {
                IndexOp::Add { gref, tokens } => argv.extend([bytes("A"), gref, tokens]),
                IndexOp::Set { gref, tokens } => argv.extend([bytes("S"), gref, tokens]),
                IndexOp::Remove { gref } => argv.extend([bytes("R"), gref]),
                IndexOp::RemoveIfGone { gref, cp_key, tref } => {
                    argv.extend([bytes("X"), gref, bytes(cp_key), tref]);
                }
                IndexOp::AddThread { entry } => argv.extend([bytes("T"), entry]),
                IndexOp::RemoveThreadIfOld { entry, grace_ms } => {
                    argv.extend([bytes("U"), entry, number(grace_ms)]);
                }
            }
        }
        argv
    }
}

/// `delete_thread.lua`.
pub(crate) struct ThreadArgs<'a> {
    pub(crate) thread_id: &'a str,
}

impl Args for ThreadArgs<'_> {
    fn script() -> &'static Lua {
        &SCRIPTS.delete_thread
    }

    fn argv(self) -> Vec<Vec<u8>> {
        vec![esc(self.thread_id)]
    }
}

/// `prune.lua`.
pub(crate) struct PruneArgs<'a> {
    pub(crate) thread_id: &'a str,
    pub(crate) keep: usize,
}

impl Args for PruneArgs<'_> {
    fn script() -> &'static Lua {
        &SCRIPTS.prune
    }

    fn argv(self) -> Vec<Vec<u8>> {
        vec![esc(self.thread_id), number(self.keep)]
    }
}

/// `delete_runs.lua`.
pub(crate) struct DeleteRunsArgs<'a> {
    pub(crate) thread_id: &'a str,
    pub(crate) run_token: &'a str,
    pub(crate) trefs: &'a [Vec<u8>],
}

impl Args for DeleteRunsArgs<'_> {
    fn script() -> &'static Lua {
        &SCRIPTS.delete_runs
    }

    fn argv(self) -> Vec<Vec<u8>> {
        let mut argv = Vec::with_capacity(2 + self.trefs.len());
        argv.extend([esc(self.thread_id), bytes(self.run_token)]);
        argv.extend(self.trefs.iter().cloned());
        argv
    }
}

/// `copy_read.lua`.
pub(crate) struct CopyReadArgs;

impl Args for CopyReadArgs {
    fn script() -> &'static Lua {
        &SCRIPTS.copy_read
    }

    fn argv(self) -> Vec<Vec<u8>> {
        Vec::new()
    }
}

/// `copy_write.lua`: (tref, record) pairs, (field, value) pairs, (member, value) pairs.
pub(crate) struct CopyWriteArgs<'a> {
    pub(crate) ttl_ms: u64,
    pub(crate) target: &'a str,
    pub(crate) records: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) values: Vec<Vec<u8>>,
    pub(crate) writes: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Args for CopyWriteArgs<'_> {
    fn script() -> &'static Lua {
        &SCRIPTS.copy_write
    }

    fn argv(self) -> Vec<Vec<u8>> {
        let mut argv = Vec::with_capacity(
            4 + 2 * self.records.len() + self.values.len() + 2 * self.writes.len(),
        );
        argv.extend([
            number(self.ttl_ms),
            esc(self.target),
            number(self.records.len()),
        ]);
        for (tref, record) in self.records {
            argv.extend([tref, record]);
        }
        argv.push(number(self.values.len() / 2));
        argv.extend(self.values);
        for (member, value) in self.writes {
            argv.extend([member, value]);
        }
        argv
    }
}

/// How long a thread lives, for `set_ttl.lua`.
pub(crate) enum TtlMode {
    Pin,
    Expire(u64),
    Default,
}

/// `set_ttl.lua`.
pub(crate) struct SetTtlArgs {
    pub(crate) mode: TtlMode,
    pub(crate) default_ttl_ms: u64,
}

impl Args for SetTtlArgs {
    fn script() -> &'static Lua {
        &SCRIPTS.set_ttl
    }

    fn argv(self) -> Vec<Vec<u8>> {
        let (mode, ms) = match self.mode {
            TtlMode::Pin => ("pin", 0),
            TtlMode::Expire(ms) => ("ms", ms),
            TtlMode::Default => ("default", 0),
        };
        vec![bytes(mode), number(ms), number(self.default_ttl_ms)]
    }
}

/// The lease scripts.
pub(crate) enum LeaseArgs<'a> {
    /// `lease_acquire.lua`.
    Acquire { holder: &'a str, ttl_ms: u64 },
    /// `lease_renew.lua`.
    Renew {
        holder: &'a str,
        token: u64,
        ttl_ms: u64,
    },
    /// `lease_release.lua`.
    Release { holder: &'a str, token: u64 },
}

impl LeaseArgs<'_> {
    /// A call of the matching script on the thread's lease key.
    pub(crate) fn call(self, lease_key: String) -> Call<'static> {
        let (script, args) = match self {
            LeaseArgs::Acquire { holder, ttl_ms } => {
                (&SCRIPTS.lease_acquire, vec![bytes(holder), number(ttl_ms)])
            }
            LeaseArgs::Renew {
                holder,
                token,
                ttl_ms,
            } => (
                &SCRIPTS.lease_renew,
                vec![bytes(holder), number(token), number(ttl_ms)],
            ),
            LeaseArgs::Release { holder, token } => {
                (&SCRIPTS.lease_release, vec![bytes(holder), number(token)])
            }
        };
        Call {
            script,
            keys: vec![lease_key],
            args,
        }
    }
}

/// The ledger scripts.
pub(crate) enum ClaimArgs {
    /// `claim.lua`.
    Claim { ttl_ms: u64 },
    /// `claim_complete.lua`; `outcome` in its stored form.
    Complete { token: u64, outcome: Vec<u8> },
    /// `claim_abandon.lua`.
    Abandon { token: u64 },
}

impl ClaimArgs {
    /// A call of the matching script on the ledger key.
    pub(crate) fn call(self, ledger_key: String) -> Call<'static> {
        let (script, args) = match self {
            ClaimArgs::Claim { ttl_ms } => (&SCRIPTS.claim, vec![number(ttl_ms)]),
            ClaimArgs::Complete { token, outcome } => {
                (&SCRIPTS.claim_complete, vec![number(token), outcome])
            }
            ClaimArgs::Abandon { token } => (&SCRIPTS.claim_abandon, vec![number(token)]),
        };
        Call {
            script,
            keys: vec![ledger_key],
            args,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_arguments_follow_the_scripts_unpacking() {
        let argv = PutArgs {
            ttl_ms: 5,
            thread_id: "t",
            fence: Some(7),
            compare_and_set: true,
            ns: "",
            id: "c2",
            parent: Some("c1"),
            record: b"rec".to_vec(),
            mode: PutMode::Refusable {
                thread_index: vec![b"0".to_vec(), b"m".to_vec()],
                global_index: vec![],
                written: vec![b"f".to_vec()],
            },
        }
        .argv();
        let text: Vec<String> = argv
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(
            text,
            [
                "5", "t\0", "7", "1", "\0", "c2\0", "c1\0", "rec", "F", "2", "0", "m", "0", "f"
            ]
        );
    }
}
