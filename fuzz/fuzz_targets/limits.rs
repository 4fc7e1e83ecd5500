// The decode limits every target runs under: small enough that a limit is reached within
// libFuzzer's default input size, so the paths that refuse input are exercised too.
pub fn limits() -> checkpoint_core::DecodeLimits {
    checkpoint_core::DecodeLimits::default()
        .with_max_bytes(64 << 10)
        .with_max_depth(32)
        .with_max_elements(4096)
}
