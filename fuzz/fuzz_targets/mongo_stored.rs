//! What checkpoint-mongo reads back from the server: checkpoint, pending-writes and value
//! documents, in its own layout and in LangGraph's (the input read as BSON).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    checkpoint_mongo::fuzzing::stored_document(data);
});
