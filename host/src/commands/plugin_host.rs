//! `turnstile plugin-host LIBRARY` (hidden): the process an isolated plugin runs in. `serve`
//! starts it, with the protocol on its stdin and stdout; it is not meant to be run by hand.
//! The work is in `plugin::isolated` (`child.rs`).

use std::{path::Path, process::ExitCode};

use crate::plugin;

pub fn run(library: &Path) -> anyhow::Result<ExitCode> {
    plugin::run_plugin_host(library)?;
    Ok(ExitCode::SUCCESS)
}
