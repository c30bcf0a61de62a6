//! The server's resident memory (`--server-pid` with `--mint`), read from `/proc/PID/status`, so
//! that a minting run can say what each live instance costs the server and what it gives back
//! once they are idle.

use std::io;

/// `VmRSS`: the resident set size of the process, in KiB.
pub fn resident_kib(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_status(&status).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/status: no VmRSS line"),
        )
    })
}

fn parse_status(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_vmrss_line() {
        let status = "Name:\tturnstile\nVmPeak:\t  99999 kB\nVmRSS:\t   18832 kB\nThreads:\t4\n";
        assert_eq!(parse_status(status), Some(18832));
        assert_eq!(parse_status("Name:\tkthreadd\nThreads:\t1\n"), None);
    }

    #[test]
    fn this_process_is_resident() {
        assert!(resident_kib(std::process::id()).unwrap() > 0);
    }
}
