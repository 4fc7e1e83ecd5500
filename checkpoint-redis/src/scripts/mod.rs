//! The server-side Lua scripts and their arguments.
//!
//! The scripts live in `src/lua/*.lua`: one file per script body, plus `lua/lib/*.lua`
//! helper files and two headers binding `KEYS`. Each script is assembled at compile time
//! from a header, the helpers it calls and its body (every closure a script defines costs
//! time on every call, so a script includes only what it uses), and compiled once into a
//! [`redis::Script`] for its SHA1.
//!
//! Every operation on a thread is one script touching only that thread's keys (one Cluster
//! slot), so it is atomic and one round trip. On a single node the same scripts also
//! maintain the global index (passed as an extra key); on a Cluster the global index lives
//! in its own slot and is maintained by `gindex.lua` around the thread script (see the
//! crate README, "Cluster").
//!
//! The argument order of each script is known in one place only: its `…Args` type here,
//! which builds `ARGV` (the script unpacks it into named locals on its first lines); see
//! the `args` module. Build a call with [`Args::call`].

mod args;

use std::sync::LazyLock;

use redis::{Cmd, Script, cmd};

pub(crate) use args::*;

/// One compiled script: its source and its [`redis::Script`] (for the SHA1 `EVALSHA` uses).
///
/// Invocation goes through `conn::Link`, not `Script::invoke_async`: a put runs its script
/// inside a `MULTI` after plain commands, and a `NOSCRIPT` there is answered with `EVAL` of
/// the source on the same connection (one round trip; `invoke_async` would load and resend).
#[derive(Debug)]
pub(crate) struct Lua {
    pub(crate) name: &'static str,
    pub(crate) code: &'static str,
    script: Script,
}

impl Lua {
    fn new(name: &'static str, code: &'static str) -> Self {
        Self {
            name,
            code,
            script: Script::new(code),
        }
    }

    /// The SHA1 of the source, as `EVALSHA` takes it.
    pub(crate) fn hash(&self) -> &str {
        self.script.get_hash()
    }
}

/// The `KEYS` bindings of thread scripts (the thread's keys, then the global index key when
/// the script maintains it inline) and of global scripts.
macro_rules! header {
    (thread) => {
        include_str!("../lua/header_thread.lua")
    };
    (global) => {
        include_str!("../lua/header_global.lua")
    };
}

/// A script: a header, the helper files it calls (from `lua/lib/`), its body.
macro_rules! lua {
    ($name:literal, $header:ident, [$($lib:literal),*]) => {
        Lua::new(
            $name,
            concat!(
                header!($header),
                $(include_str!(concat!("../lua/lib/", $lib, ".lua")),)*
                include_str!(concat!("../lua/", $name, ".lua")),
            ),
        )
    };
    // The maintenance scripts, which run rarely, get every helper.
    ($name:literal, $header:ident, all) => {
        lua!($name, $header, [
            "guard", "base", "global", "thread", "chunk", "load", "sweep", "delete", "scan",
            "delta"
        ])
    };
}

/// Every script, compiled once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) put: Lua,
    pub(crate) touch: Lua,
    pub(crate) put_writes: Lua,
    pub(crate) get: Lua,
    pub(crate) delta: Lua,
    pub(crate) list: Lua,
    pub(crate) gscan: Lua,
    pub(crate) threads: Lua,
    pub(crate) gindex: Lua,
    pub(crate) delete_thread: Lua,
    pub(crate) prune: Lua,
    pub(crate) delete_runs: Lua,
    pub(crate) copy_read: Lua,
    pub(crate) copy_write: Lua,
    pub(crate) set_ttl: Lua,
    pub(crate) lease_acquire: Lua,
    pub(crate) lease_renew: Lua,
    pub(crate) lease_release: Lua,
    pub(crate) claim: Lua,
    pub(crate) claim_complete: Lua,
    pub(crate) claim_abandon: Lua,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    put: lua!(
        "put",
        thread,
        ["guard", "base", "global", "thread", "chunk", "sweep"]
    ),
    put_writes: lua!("put_writes", thread, ["guard"]),
    touch: lua!("touch", thread, ["guard"]),
    get: lua!("get", thread, ["guard", "base", "thread", "chunk", "load"]),
    delta: lua!(
        "delta",
        thread,
        ["guard", "base", "thread", "chunk", "load"]
    ),
    list: lua!("list", thread, ["guard", "base", "thread", "scan"]),
    gscan: lua!("gscan", global, ["base", "scan"]),
    threads: lua!("threads", global, ["base"]),
    gindex: lua!("gindex", global, ["base", "global"]),
    delete_thread: lua!("delete_thread", thread, all),
    prune: lua!("prune", thread, all),
    delete_runs: lua!("delete_runs", thread, all),
    copy_read: lua!("copy_read", thread, all),
    copy_write: lua!("copy_write", thread, all),
    set_ttl: lua!("set_ttl", thread, all),
    lease_acquire: lua!("lease_acquire", global, all),
    lease_renew: lua!("lease_renew", global, all),
    lease_release: lua!("lease_release", global, all),
    claim: lua!("claim", global, all),
    claim_complete: lua!("claim_complete", global, all),
    claim_abandon: lua!("claim_abandon", global, all),
});

impl Scripts {
    /// Every script, for preloading with `SCRIPT LOAD`.
    pub(crate) fn all(&self) -> [&Lua; 21] {
        [
            &self.put,
            &self.touch,
            &self.put_writes,
            &self.get,
            &self.delta,
            &self.list,
            &self.gscan,
            &self.threads,
            &self.gindex,
            &self.delete_thread,
            &self.prune,
            &self.delete_runs,
            &self.copy_read,
            &self.copy_write,
            &self.set_ttl,
            &self.lease_acquire,
            &self.lease_renew,
            &self.lease_release,
            &self.claim,
            &self.claim_complete,
            &self.claim_abandon,
        ]
    }
}

/// A script call: the script, its keys and arguments.
pub(crate) struct Call<'a> {
    pub(crate) script: &'a Lua,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<Vec<u8>>,
}

impl Call<'_> {
    /// The `EVALSHA` (or, `by_hash` false, `EVAL`) command of this call.
    pub(crate) fn command(&self, by_hash: bool) -> Cmd {
        let mut c = if by_hash {
            let mut c = cmd("EVALSHA");
            c.arg(self.script.hash());
            c
        } else {
            let mut c = cmd("EVAL");
            c.arg(self.script.code);
            c
        };
        c.arg(self.keys.len());
        for k in &self.keys {
            c.arg(k);
        }
        for a in &self.args {
            c.arg(&a[..]);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_is_assembled_from_its_files() {
        for lua in SCRIPTS.all() {
            assert!(
                lua.code.contains("local CP, BL, WI, WV, MI, OPT, LEASE"),
                "{}",
                lua.name
            );
            assert_eq!(lua.hash().len(), 40, "{}", lua.name);
        }
        // Each script carries only the helpers it calls.
        assert!(
            SCRIPTS
                .put_writes
                .code
                .contains("local function check_fence")
        );
        assert!(!SCRIPTS.put_writes.code.contains("local function sweep"));
        assert!(SCRIPTS.prune.code.contains("local function sweep"));
        let hashes: std::collections::BTreeSet<&str> =
            SCRIPTS.all().iter().map(|l| l.hash()).collect();
        assert_eq!(hashes.len(), SCRIPTS.all().len(), "every script differs");
    }
}
