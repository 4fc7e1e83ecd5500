//! checkpoint-sanitize's message parsers (LangChain msgpack and JSON, OpenAI, Anthropic) on
//! any value, then validation and repair of whatever list they recognize.
#![no_main]

use checkpoint_core::{TypedValue, ValueType};
use checkpoint_sanitize::messages::{MessageList, RepairOptions, decode_update};
use libfuzzer_sys::fuzz_target;

#[path = "limits.rs"]
mod limits;

fuzz_target!(|data: &[u8]| {
    let limits = limits::limits();
    for tag in [ValueType::Msgpack, ValueType::Json] {
        let value = TypedValue::new(tag, data.to_vec());
        let _ = decode_update(&value);
        if let Ok(Some(list)) = MessageList::decode_with(&value, &limits) {
            let _ = list.validate();
            let _ = list.repair(&RepairOptions::default());
            for i in 0..list.len() {
                let _ = list.element_bytes(i);
            }
        }
    }
});
