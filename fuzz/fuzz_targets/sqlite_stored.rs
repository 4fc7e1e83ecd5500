//! What checkpoint-sqlite reads back from a checkpoint row: the checkpoint and metadata
//! columns, the pending writes packed into it (a JSON index over concatenated bytes) and
//! the value rows it names.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    checkpoint_sqlite::fuzzing::stored_row(data);
});
