//! Keeping another copy of SQLite in this process from deleting the saver's write-ahead log.
//!
//! SQLite locks a database file with POSIX record locks, which belong to a *process*: two
//! copies of the SQLite library in one process (this crate's bundled one and, say, the one
//! behind Python's `sqlite3` module) do not see each other's locks. When the other copy
//! closes its last connection to the file, it asks for the exclusive lock to learn whether
//! it is the file's last user, gets it, copies the WAL into the database, and deletes the
//! `-wal` and `-shm` files; the saver's connections keep writing to the deleted log, and a
//! process that opens the file later never sees those writes. When it opens the file, it
//! finds nothing holding the `-shm` file's dead-man-switch byte, takes itself for the first
//! user and truncates the file under the saver's memory map.
//!
//! An *open file description* lock (Linux's `F_OFD_SETLK`) conflicts with POSIX locks even
//! of the same process. While a saver has a file open, this module holds two shared ones: on
//! SQLite's shared-lock range of the database file (so no copy of SQLite, in this process or
//! another, gets the exclusive lock that deleting the log requires) and on the `-shm` file's
//! dead-man-switch byte (so none takes itself for its first user). Neither blocks what
//! SQLite does while the file is open in WAL mode: readers and writers lock other bytes,
//! and only closing the last connection or leaving WAL mode asks for the exclusive lock.
//!
//! This makes another copy's *reading* survivable (open, query, close). It does not make
//! its *writing* safe: the WAL write lock in the `-shm` file stays a POSIX lock that the two
//! copies do not see, so both could append to the log at once.
//!
//! Closing any descriptor of a file drops all of the process's POSIX locks on it, those of
//! the saver's connections included. So the descriptors are never closed while the file
//! exists: when the last saver of the process lets go of a file, its locks are released
//! (`F_UNLCK`, which drops nothing else) and the descriptors are kept for the next saver of
//! the same file. Descriptors of a file that was deleted are closed at the next
//! [`FileGuard::acquire`].
//!
//! Only on Linux and Android, on the architectures whose `struct flock` has no private
//! fields; elsewhere nothing is guarded and [`FileGuard::active`] is false.

use std::fmt;
use std::path::Path;

/// This saver's hold on the locks of one database file (shared with the other savers of the
/// process that opened the same file); released when dropped.
pub(crate) struct FileGuard {
    #[cfg_attr(
        not(all(
            any(target_os = "linux", target_os = "android"),
            any(
                target_arch = "x86_64",
                target_arch = "aarch64",
                target_arch = "x86",
                target_arch = "arm",
                target_arch = "riscv64"
            )
        )),
        allow(dead_code)
    )]
    key: imp::FileId,
    active: bool,
}

impl fmt::Debug for FileGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileGuard")
            .field("active", &self.active)
            .finish()
    }
}

impl FileGuard {
    /// A hold on the locks of the database file at `path`, which a connection of this
    /// process has open in WAL mode (so its `-shm` file exists). Blocking: file system calls,
    /// and up to a few hundred milliseconds of retries should another connection be opening
    /// or closing the file at that instant.
    pub(crate) fn acquire(path: &Path) -> Self {
        imp::acquire(path)
    }

    /// Whether both locks are held (false where the platform has no such locks, or when the
    /// file system refused them).
    pub(crate) fn active(&self) -> bool {
        self.active
    }
}

impl Drop for FileGuard {
    fn drop(&mut self) {
        imp::release(self);
    }
}

#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "x86",
        target_arch = "arm",
        target_arch = "riscv64"
    )
))]
mod imp {
    use std::collections::HashMap;
    use std::fs::File;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};
    use std::sync::{LazyLock, Mutex, PoisonError};
    use std::time::{Duration, Instant};

    use nix::errno::Errno;
    use nix::fcntl::{FcntlArg, fcntl};
    use nix::libc;

    use super::FileGuard;

    /// SQLite's shared-lock range in a database file (`os_unix.c`: `SHARED_FIRST` is
    /// `PENDING_BYTE + 2`, the range 510 bytes). Its exclusive lock is a write lock on all of
    /// it.
    const SHARED_FIRST: i64 = 0x4000_0002;
    const SHARED_SIZE: i64 = 510;
    /// SQLite's dead-man-switch byte in a `-shm` file (`UNIX_SHM_DMS`: 120 + 8).
    const SHM_DMS: i64 = 128;
    /// How long a lock is retried while another connection holds a conflicting one (only the
    /// instant of another connection's opening or closing can).
    const PATIENCE: Duration = Duration::from_millis(200);

    /// A file's identity: device and inode.
    pub(super) type FileId = (u64, u64);

    /// The descriptors of one file and how many savers hold its locks.
    struct Slot {
        db: File,
        shm: Option<File>,
        holders: usize,
        active: bool,
    }

    impl Slot {
        /// Takes both locks (again); whether both are held.
        fn lock(&mut self, path: &Path) -> bool {
            if self.shm.is_none() {
                self.shm = File::open(sibling(path, "-shm")).ok();
            }
            self.active = set(&self.db, libc::F_RDLCK, SHARED_FIRST, SHARED_SIZE)
                && self
                    .shm
                    .as_ref()
                    .is_some_and(|shm| set(shm, libc::F_RDLCK, SHM_DMS, 1));
            self.active
        }

        /// Releases both locks, keeping the descriptors (closing them would drop the
        /// process's POSIX locks on the files).
        fn unlock(&mut self) {
            set(&self.db, libc::F_UNLCK, SHARED_FIRST, SHARED_SIZE);
            if let Some(shm) = &self.shm {
                set(shm, libc::F_UNLCK, SHM_DMS, 1);
            }
            self.active = false;
        }
    }

    static SLOTS: LazyLock<Mutex<HashMap<FileId, Slot>>> = LazyLock::new(Default::default);

    fn sibling(path: &Path, suffix: &str) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    }

    pub(super) fn acquire(path: &Path) -> FileGuard {
        let mut slots = SLOTS.lock().unwrap_or_else(PoisonError::into_inner);
        // Descriptors of deleted files that no saver holds: nothing can open those files
        // again, so closing them drops no lock that matters.
        slots.retain(|_, slot| {
            slot.holders > 0 || slot.db.metadata().is_ok_and(|meta| meta.nlink() > 0)
        });
        // SQLite names the `-shm` file after the database's real path.
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        // Identity by `stat`: opening and closing a descriptor to learn it would drop the
        // POSIX locks this process's connections hold on the file.
        let Ok(meta) = std::fs::metadata(&path) else {
            return FileGuard {
                key: (0, 0),
                active: false,
            };
        };
        let key = (meta.dev(), meta.ino());
        if let Some(slot) = slots.get_mut(&key) {
            if slot.holders == 0 {
                slot.lock(&path);
            }
            slot.holders += 1;
            return FileGuard {
                key,
                active: slot.active,
            };
        }
        let Ok(db) = File::open(&path) else {
            return FileGuard {
                key: (0, 0),
                active: false,
            };
        };
        let mut slot = Slot {
            db,
            shm: None,
            holders: 1,
            active: false,
        };
        let active = slot.lock(&path);
        slots.insert(key, slot);
        FileGuard { key, active }
    }

    pub(super) fn release(guard: &FileGuard) {
        let mut slots = SLOTS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get_mut(&guard.key) {
            slot.holders -= 1;
            if slot.holders == 0 {
                slot.unlock();
            }
        }
    }

    /// Sets (`F_RDLCK`) or releases (`F_UNLCK`) an open-file-description lock on `len` bytes
    /// from `start`, retrying for [`PATIENCE`] while a conflicting lock is held.
    fn set(file: &File, kind: libc::c_int, start: i64, len: i64) -> bool {
        let (Ok(l_type), Ok(l_start), Ok(l_len)) = (
            libc::c_short::try_from(kind),
            libc::off_t::try_from(start),
            libc::off_t::try_from(len),
        ) else {
            return false;
        };
        let lock = libc::flock {
            l_type,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start,
            l_len,
            l_pid: 0,
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            match fcntl(file.as_fd(), FcntlArg::F_OFD_SETLK(&lock)) {
                Ok(_) => return true,
                Err(Errno::EAGAIN | Errno::EACCES) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => return false,
            }
        }
    }
}

#[cfg(not(all(
    any(target_os = "linux", target_os = "android"),
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "x86",
        target_arch = "arm",
        target_arch = "riscv64"
    )
)))]
mod imp {
    use std::path::Path;

    use super::FileGuard;

    pub(super) type FileId = ();

    pub(super) fn acquire(_path: &Path) -> FileGuard {
        FileGuard {
            key: (),
            active: false,
        }
    }

    pub(super) fn release(_guard: &FileGuard) {}
}
