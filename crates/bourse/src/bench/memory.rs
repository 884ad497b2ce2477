//! Resident memory of this process, from `/proc/self/status` (Linux).
//!
//! `VmRSS` is what is resident now; `VmHWM` is the peak since the process started.
//! On systems without `/proc` both read as `None`.

/// Resident and peak resident memory, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resident {
    pub rss_bytes: Option<u64>,
    pub hwm_bytes: Option<u64>,
}

pub fn resident() -> Resident {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return Resident::default();
    };
    Resident { rss_bytes: field_bytes(&status, "VmRSS:"), hwm_bytes: field_bytes(&status, "VmHWM:") }
}

/// A `Name:   1234 kB` line of the status file, in bytes.
fn field_bytes(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(name))?;
    let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// Bytes as MiB for humans.
pub fn mib(bytes: Option<u64>) -> String {
    match bytes {
        Some(bytes) => format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0)),
        None => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_parse_to_bytes() {
        let status = "Name:\tbourse\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n";
        assert_eq!(field_bytes(status, "VmRSS:"), Some(100 * 1024 * 1024));
        assert_eq!(field_bytes(status, "VmHWM:"), Some(200 * 1024 * 1024));
        assert_eq!(field_bytes(status, "VmSwap:"), None);
    }
}
