//! JSON typed values: validation against the limits before decoding, the decode, and
//! LangGraph's legacy JSON checkpoints.
#![no_main]

use checkpoint_core::backend::langgraph::decode_checkpoint;
use checkpoint_core::{TypedValue, ValueType, json};
use libfuzzer_sys::fuzz_target;

#[path = "limits.rs"]
mod limits;

fuzz_target!(|data: &[u8]| {
    let limits = limits::limits();
    let _ = json::validate(data, &limits);
    let _ = json::decode_json(data, &limits);
    let value = TypedValue::new(ValueType::Json, data.to_vec());
    let _ = value.to_dynamic_with(&limits);
    let _ = decode_checkpoint("fuzz", Some("json"), data);
});
