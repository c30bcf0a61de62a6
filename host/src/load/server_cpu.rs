//! The server's CPU time (`--server-pid`), read from `/proc/PID/stat`, so a report can say
//! what each call cost the server as well as how long the client waited.

use std::{io, time::Duration};

/// User plus system CPU time the process has used so far.
pub fn cpu_time(pid: u32) -> io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat: unexpected format"),
        )
    })
}

fn parse_stat(stat: &str) -> Option<Duration> {
    // The command name (field 2) is in parentheses and may hold spaces or parentheses itself:
    // the fields that follow start after the last `)`. There, field 3 (state) is index 0, so
    // utime (field 14) and stime (field 15) are 11 and 12.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the C library; it has no memory effects.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    Some(Duration::from_secs_f64((utime + stime) as f64 / ticks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_user_and_system_time_past_an_awkward_command_name() {
        // SAFETY: as above.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 4 0 1 2 3";
        let expected = Duration::from_secs_f64(200.0 / ticks);
        assert_eq!(parse_stat(stat), Some(expected));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_has_used_some_cpu() {
        let mut spin = 0u64;
        for n in 0..5_000_000u64 {
            spin = spin.wrapping_add(n * n);
        }
        assert!(spin > 0);
        assert!(cpu_time(std::process::id()).is_ok());
    }
}
