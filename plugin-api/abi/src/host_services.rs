//! [`HostServices`]: the services the host offers a running call (ABI 1.1), logging to the
//! client, progress and cancellation, as safe methods over the function pointers of the ABI's
//! [`RawHostServices`]; and [`LogLevel`], the severities a log message crosses with.
//!
//! It owns the one place a plugin calls the host's functions, and must not keep anything past
//! a call: the host treats the call id as a name and ignores a stale one.

use std::ffi::{CString, c_void};

use serde_json::Value;

use crate::abi::{HostIsCancelledFn, HostLogFn, HostProgressFn, RawHostServices, Status};

/// A log message's severity, as MCP names them (RFC 5424's levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    /// Every level, least severe first.
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// The MCP name: `"debug"`, `"info"`, … `"emergency"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    /// The level named `name` (an MCP level name).
    pub fn parse(name: &str) -> Option<LogLevel> {
        LogLevel::ALL
            .into_iter()
            .find(|level| level.as_str() == name)
    }
}

/// The host's services during one call: copied out of the ABI's `RawHostServices`, so it may be
/// kept and used from other threads while the call runs (after the call returns, the host
/// ignores it). `Default` is a host that offers nothing: every method is a no-op.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostServices {
    /// The host's opaque name for the call (a pointer-sized id, never dereferenced here).
    call: usize,
    log: Option<HostLogFn>,
    progress: Option<HostProgressFn>,
    is_cancelled: Option<HostIsCancelledFn>,
}

/// By call, not by function address (function pointers have no meaningful identity).
impl PartialEq for HostServices {
    fn eq(&self, other: &Self) -> bool {
        self.call == other.call && self.is_offered() == other.is_offered()
    }
}

impl HostServices {
    /// The services `raw` offers, copied out (the plugin's glue does this for every call).
    ///
    /// # Safety
    ///
    /// `raw` is the services struct the host passed with a call, already checked to be at
    /// least ABI 1.1's size: its functions have the signatures the ABI declares and accept
    /// `raw.call` for as long as this value is used.
    pub unsafe fn from_raw(raw: &RawHostServices) -> HostServices {
        HostServices {
            call: raw.call as usize,
            log: raw.log,
            progress: raw.progress,
            is_cancelled: raw.is_cancelled,
        }
    }

    /// Sends `data` (any JSON value, typically a string or an object) to the client as a log
    /// message at `level`. Returns whether the host took it (false on a host without logging;
    /// the session's level may still filter it out).
    pub fn log(&self, level: LogLevel, data: &Value) -> bool {
        self.log_as(level, None, data)
    }

    /// [`HostServices::log`] under a logger name.
    pub fn log_as(&self, level: LogLevel, logger: Option<&str>, data: &Value) -> bool {
        let Some(log) = self.log else { return false };
        let level = CString::new(level.as_str()).expect("level names hold no NUL");
        let logger = logger.and_then(|logger| CString::new(logger).ok());
        let Ok(data) = CString::new(data.to_string()) else {
            return false;
        };
        let logger_ptr = logger.as_ref().map_or(std::ptr::null(), |l| l.as_ptr());
        // SAFETY: `log` came from the host's services struct for this call, which declares it
        // with this signature; every string is NUL-terminated and outlives the call; the host
        // treats `call` as an id and ignores a stale one.
        let status = unsafe {
            log(
                self.call as *const c_void,
                level.as_ptr(),
                logger_ptr,
                data.as_ptr(),
            )
        };
        status == Status::OK
    }

    /// Reports progress: `progress` so far, of `total` when known, with an optional message.
    /// Sent only if the client asked for progress on this call. Returns whether the host took it.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) -> bool {
        let Some(report) = self.progress else {
            return false;
        };
        let message = message.and_then(|message| CString::new(message).ok());
        let message_ptr = message.as_ref().map_or(std::ptr::null(), |m| m.as_ptr());
        // SAFETY: as in `log_as`: the host's function, a live NUL-terminated string or NULL.
        let status = unsafe {
            report(
                self.call as *const c_void,
                progress,
                total.unwrap_or(-1.0),
                message_ptr,
            )
        };
        status == Status::OK
    }

    /// Whether the client has cancelled this call (or its deadline passed). Long-running tools
    /// should poll it and return an error early: a call that returns an error fires nothing.
    pub fn is_cancelled(&self) -> bool {
        let Some(is_cancelled) = self.is_cancelled else {
            return false;
        };
        // SAFETY: as in `log_as`.
        unsafe { is_cancelled(self.call as *const c_void) != 0 }
    }

    /// Whether the host offers any service at all (false on a host older than ABI 1.1).
    pub fn is_offered(&self) -> bool {
        self.log.is_some() || self.progress.is_some() || self.is_cancelled.is_some()
    }
}
