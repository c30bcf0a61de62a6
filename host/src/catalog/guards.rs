//! The named guards a machine may use: those its plugin implements (ABI 1.2's `guard` entry
//! point, listed in the plugin's manifest), evaluated by calling the plugin.
//!
//! A workflow's guards come from the plugin that brings the workflow, and from no other: a
//! machine is checked, loaded and replaced with its plugin, so a guard can never be missing
//! while its machine is served. A machine naming a guard its plugin does not list is refused at
//! load, with the guard's JSON path, as every other problem of a machine is.

use serde_json::Value;

use crate::{
    plugin::LoadedPlugin,
    statechart::{Event, Guards},
};

/// The guards of one plugin.
pub struct PluginGuards {
    plugin: LoadedPlugin,
}

impl PluginGuards {
    pub fn new(plugin: LoadedPlugin) -> Self {
        PluginGuards { plugin }
    }
}

impl Guards for PluginGuards {
    fn contains(&self, name: &str) -> bool {
        self.plugin
            .manifest()
            .guards
            .iter()
            .any(|guard| guard == name)
    }

    fn eval(&self, name: &str, params: Option<&Value>, event: &Event) -> bool {
        self.check(name, params, &Value::Null, event)
    }

    /// A guard that cannot answer (the plugin failed, panicked or answered something else than
    /// a boolean) is false, as an XState guard that throws blocks its transition; the plugin's
    /// author learns why from the log.
    fn check(&self, name: &str, params: Option<&Value>, context: &Value, event: &Event) -> bool {
        let params = params.unwrap_or(&Value::Null);
        match self.plugin.guard(name, params, context, &event.to_json()) {
            Ok(passes) => passes,
            Err(error) => {
                tracing::warn!(
                    plugin = %self.plugin.manifest().name,
                    guard = name,
                    %error,
                    "a guard gave no answer; it counts as false"
                );
                false
            }
        }
    }
}

/// The guards of a machine no loaded plugin brings (one kept in the store only): every name is
/// accepted, so the machine loads and its instances can be read, and every guard is false.
/// Nothing runs on such a machine (its calls answer `VERSION_UNAVAILABLE`), so no transition
/// depends on them.
pub struct Unavailable;

impl Guards for Unavailable {
    fn contains(&self, _name: &str) -> bool {
        true
    }

    fn eval(&self, _name: &str, _params: Option<&Value>, _event: &Event) -> bool {
        false
    }
}
