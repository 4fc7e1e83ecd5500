//! JSON typed values: validation against the limits before decoding, and the decode.
#![no_main]

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
});
