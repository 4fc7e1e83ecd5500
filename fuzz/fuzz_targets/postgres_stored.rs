//! What checkpoint-postgres reads back from a checkpoint row: the checkpoint and metadata
//! `jsonb` columns (ours, and LangGraph's with inline values) and the value rows applied to
//! them.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    checkpoint_postgres::fuzzing::stored_row(data);
});
