//! The named guards a machine may use: those its plugin implements (ABI 1.2's `guard` entry
//! point, listed in the plugin's manifest), evaluated by calling the plugin.
//!
//! A workflow's guards come from the plugin that brings the workflow, and from no other: a
//! machine is checked, loaded and replaced with its plugin, so a guard can never be missing
//! while its machine is served. A machine naming a guard its plugin does not list is refused at
//! load, with the guard's JSON path, as every other problem of a machine is.
//!
//! The statechart engine is synchronous and pure, and asks its guards as it goes; a plugin's
//! guard is a call into plugin code, which must run as tool calls do (a blocking thread, the
//! plugin's pool, a deadline, the pipe of an isolated plugin), never on the thread that asked.
//! So while serving, the engine runs with [`GuardAnswers`] at hand: a question it has no
//! answer to is noted and counts as false for that run, `invoke::answering_guards` has the
//! plugin answer it, and the engine runs again with the answer.

use std::{cell::RefCell, collections::HashMap};

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

    /// Looked up in the [`GuardAnswers`] of the engine's run, when it has them (serving);
    /// otherwise asked here (a machine checked or loaded, an instance made with a given context
    /// by a command). A guard that cannot answer (the plugin failed, panicked or answered
    /// something else than a boolean) is false, as an XState guard that throws blocks its
    /// transition; the plugin's author learns why from the log.
    fn check(&self, name: &str, params: Option<&Value>, context: &Value, event: &Event) -> bool {
        let params = params.unwrap_or(&Value::Null);
        let event = event.to_json();
        let looked_up = ANSWERING.with_borrow_mut(|answering| match answering {
            Some(answers) => Ok(answers.look_up(&self.plugin, name, params, context, event)),
            None => Err(event),
        });
        let event = match looked_up {
            Ok(passes) => return passes,
            Err(event) => event,
        };
        match self.plugin.guard(name, params, context, &event) {
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

/// The answers a plugin's guards gave during one computation of the statechart engine (a
/// step, the timers falling due), kept so that the engine, which is synchronous and pure, can
/// run again with them at hand instead of calling the plugin itself.
///
/// Installed for the length of one run of the engine on this thread
/// ([`GuardAnswers::consult`]); a guard asked meanwhile is looked up, and one not answered yet
/// is noted and counts as false for that run. `invoke::answering_guards` then asks the plugin
/// the noted questions as it runs tool calls (a blocking thread, the plugin's pool, the
/// deadline) and runs the engine again, until it asks nothing new. Outside such a run (a
/// machine checked at load, an instance made with a given context) a guard is asked inline.
#[derive(Default)]
pub struct GuardAnswers {
    answers: HashMap<String, bool>,
    unanswered: Vec<GuardQuestion>,
    /// No more questions are asked: the unanswered ones stay false.
    closed: bool,
}

/// One question a run of the engine put to a plugin guard, with everything the guard is given.
pub struct GuardQuestion {
    pub plugin: LoadedPlugin,
    pub name: String,
    pub params: Value,
    pub context: Value,
    pub event: Value,
    /// The question as text: what its answer is kept under.
    key: String,
}

thread_local! {
    static ANSWERING: RefCell<Option<GuardAnswers>> = const { RefCell::new(None) };
}

impl GuardAnswers {
    /// Runs `engine` with these answers at hand; gives back its result and the answers, with
    /// the questions it asked that had none ([`GuardAnswers::take_unanswered`]).
    pub fn consult<T>(self, engine: impl FnOnce() -> T) -> (T, GuardAnswers) {
        let outer = ANSWERING.replace(Some(self));
        let result = engine();
        let answers = ANSWERING
            .replace(outer)
            .expect("the answers installed above are still there");
        (result, answers)
    }

    /// The questions the last run asked that had no answer, each once.
    pub fn take_unanswered(&mut self) -> Vec<GuardQuestion> {
        std::mem::take(&mut self.unanswered)
    }

    /// Keeps `passes` as the answer to `question`.
    pub fn answer(&mut self, question: GuardQuestion, passes: bool) {
        self.answers.insert(question.key, passes);
    }

    /// Asks nothing more: a question without an answer stays false.
    pub fn close(&mut self) {
        self.closed = true;
    }

    fn look_up(
        &mut self,
        plugin: &LoadedPlugin,
        name: &str,
        params: &Value,
        context: &Value,
        event: Value,
    ) -> bool {
        let key = format!("{name}\u{0}{params}\u{0}{context}\u{0}{event}");
        if let Some(passes) = self.answers.get(&key) {
            return *passes;
        }
        if !self.closed && !self.unanswered.iter().any(|asked| asked.key == key) {
            self.unanswered.push(GuardQuestion {
                plugin: plugin.clone(),
                name: name.to_owned(),
                params: params.clone(),
                context: context.clone(),
                event,
                key,
            });
        }
        false
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
