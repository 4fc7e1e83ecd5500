//! Resident set size of the benchmark process, from `/proc/self/status` (Linux).

/// Current resident set size (`VmRSS`), in bytes; `None` where `/proc` is unavailable.
pub fn current_bytes() -> Option<u64> {
    status_field("VmRSS")
}

/// Peak resident set size (`VmHWM`), in bytes, since start or since the last
/// [`reset_peak`]; `None` where `/proc` is unavailable.
pub fn peak_bytes() -> Option<u64> {
    status_field("VmHWM")
}

/// Resets the peak to the current RSS (writes `5` to `/proc/self/clear_refs`, Linux ≥ 4.0),
/// so that each repetition reports its own peak. Returns whether it worked.
pub fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn status_field(name: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_kb_field(&status, name)
}

/// Reads `name:   1234 kB` from a `/proc/<pid>/status` text, in bytes.
pub fn parse_kb_field(status: &str, name: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kb * 1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_fields() {
        let s = "Name:\tx\nVmHWM:\t    1932 kB\nVmRSS:\t  1000 kB\n";
        assert_eq!(parse_kb_field(s, "VmHWM"), Some(1932 * 1024));
        assert_eq!(parse_kb_field(s, "VmRSS"), Some(1000 * 1024));
        assert_eq!(parse_kb_field(s, "VmSwap"), None);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn reads_this_process() {
        let rss = current_bytes().unwrap();
        assert!(rss > 0);
        assert!(peak_bytes().unwrap() >= rss / 2);
    }
}
