//! What checkpoint-redis reads back from the server: value fields, checkpoint records and a
//! whole `load_tuple` reply (the input parsed as RESP).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    checkpoint_redis::fuzzing::stored_bytes(data);
});
