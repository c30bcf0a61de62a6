//! The prompts and resources the plugins bring: [`PromptEntry`], [`ResourceEntry`] and
//! [`TemplateEntry`], and their checks against the workflow machines.
//!
//! They are admitted with their plugin, on the same terms as its tools: a name or URI another
//! plugin already serves, an unknown workflow or a state its machine does not have refuses the
//! whole plugin, each problem named by its place in the manifest (`prompts[0] "..."`). This
//! module does not decide who sees what (that is `gate`) and never produces content (that is
//! `invoke::read`).

use std::{collections::BTreeMap, sync::Arc};

use turnstile_plugin_abi::{
    HANDLE_VARIABLE, PromptManifest, ResourceManifest, ResourceTemplateManifest, uri_template,
};

use super::Catalog;
use crate::{plugin::LoadedPlugin, statechart::Machine};

/// Something bound to a workflow's states the way a tool is: listed and served only while the
/// instance is in one of them (no states: always).
pub trait Bound {
    /// The workflow it belongs to; `None`: bound to none, offered to everyone.
    fn workflow(&self) -> Option<&str>;
    /// The states it is offered in; empty: every state.
    fn states(&self) -> &[String];
}

/// One prompt and the plugin that produces it.
pub struct PromptEntry {
    pub manifest: PromptManifest,
    pub plugin: Arc<LoadedPlugin>,
}

/// One resource with a fixed URI and the plugin that produces it.
pub struct ResourceEntry {
    pub manifest: ResourceManifest,
    pub plugin: Arc<LoadedPlugin>,
}

/// One resource template and the plugin that produces its resources.
pub struct TemplateEntry {
    pub manifest: ResourceTemplateManifest,
    pub plugin: Arc<LoadedPlugin>,
}

impl Bound for PromptEntry {
    fn workflow(&self) -> Option<&str> {
        self.manifest.workflow.as_deref()
    }
    fn states(&self) -> &[String] {
        &self.manifest.states
    }
}

impl Bound for ResourceEntry {
    fn workflow(&self) -> Option<&str> {
        self.manifest.workflow.as_deref()
    }
    fn states(&self) -> &[String] {
        &self.manifest.states
    }
}

impl Bound for TemplateEntry {
    fn workflow(&self) -> Option<&str> {
        self.manifest.workflow.as_deref()
    }
    fn states(&self) -> &[String] {
        &self.manifest.states
    }
}

impl TemplateEntry {
    /// Whether the template names a workflow instance (`{handle}`): one resource per instance.
    pub fn is_instance(&self) -> bool {
        uri_template::template_variables(&self.manifest.uri_template)
            .is_ok_and(|variables| variables.contains(&HANDLE_VARIABLE))
    }

    /// The template's variables in `uri`, if `uri` is one of its resources.
    pub fn matches(&self, uri: &str) -> Option<BTreeMap<String, String>> {
        uri_template::match_template(&self.manifest.uri_template, uri)
    }

    /// The URI of the resource of the instance named `token` (a handle, or
    /// [`SESSION_TOKEN`]).
    pub fn instance_uri(&self, token: &str) -> String {
        let variables = BTreeMap::from([(HANDLE_VARIABLE.to_owned(), token.to_owned())]);
        uri_template::expand_template(&self.manifest.uri_template, &variables)
    }
}

/// What `{handle}` is in a session's own instance resource: a session has one instance per
/// workflow, so its URI names "this session's" rather than an id that would leak the session.
pub const SESSION_TOKEN: &str = "session";

/// The prompts and resources of one plugin, checked.
#[derive(Default)]
pub(super) struct AdmittedPrimitives {
    prompts: Vec<PromptManifest>,
    resources: Vec<ResourceManifest>,
    templates: Vec<ResourceTemplateManifest>,
}

/// The catalog's prompts and resources.
#[derive(Default)]
pub(super) struct Primitives {
    pub prompts: BTreeMap<String, Arc<PromptEntry>>,
    /// By URI.
    pub resources: BTreeMap<String, Arc<ResourceEntry>>,
    /// By URI template.
    pub templates: BTreeMap<String, Arc<TemplateEntry>>,
}

impl Primitives {
    /// Checks what `plugin` brings against `catalog` and the plugin's own machines (`machine`
    /// finds one by id); pushes one problem per misfit.
    pub(super) fn check<'m>(
        catalog: &Catalog,
        plugin: &LoadedPlugin,
        machine: impl Fn(&str) -> Option<&'m Arc<Machine>>,
        problems: &mut Vec<String>,
    ) -> AdmittedPrimitives {
        let manifest = plugin.manifest();
        let taken = &catalog.primitives;
        let binding = |at: &str, workflow: Option<&str>, states: &[String]| -> Vec<String> {
            let Some(id) = workflow else {
                return Vec::new();
            };
            let Some(machine) = machine(id) else {
                return vec![format!("{at}: unknown workflow \"{id}\"")];
            };
            states
                .iter()
                .filter(|state| !machine.has_state(state))
                .map(|state| format!("{at}: workflow \"{id}\" has no state \"{state}\""))
                .collect()
        };
        for (index, prompt) in manifest.prompts.iter().enumerate() {
            let at = format!("prompts[{index}] \"{}\"", prompt.name);
            if taken.prompts.contains_key(&prompt.name) {
                problems.push(format!("{at}: prompt name is already taken"));
            }
            problems.extend(binding(&at, prompt.workflow.as_deref(), &prompt.states));
        }
        for (index, resource) in manifest.resources.iter().enumerate() {
            let at = format!("resources[{index}] \"{}\"", resource.uri);
            if taken.resources.contains_key(&resource.uri) {
                problems.push(format!("{at}: resource uri is already taken"));
            }
            problems.extend(binding(&at, resource.workflow.as_deref(), &resource.states));
        }
        for (index, template) in manifest.resource_templates.iter().enumerate() {
            let at = format!("resource_templates[{index}] \"{}\"", template.uri_template);
            if taken.templates.contains_key(&template.uri_template) {
                problems.push(format!("{at}: uri_template is already taken"));
            }
            problems.extend(binding(&at, template.workflow.as_deref(), &template.states));
        }
        AdmittedPrimitives {
            prompts: manifest.prompts.clone(),
            resources: manifest.resources.clone(),
            templates: manifest.resource_templates.clone(),
        }
    }

    /// Adds what a checked plugin brings.
    pub(super) fn admit(&mut self, plugin: &Arc<LoadedPlugin>, admitted: AdmittedPrimitives) {
        for manifest in admitted.prompts {
            let entry = PromptEntry {
                manifest,
                plugin: plugin.clone(),
            };
            self.prompts
                .insert(entry.manifest.name.clone(), Arc::new(entry));
        }
        for manifest in admitted.resources {
            let entry = ResourceEntry {
                manifest,
                plugin: plugin.clone(),
            };
            self.resources
                .insert(entry.manifest.uri.clone(), Arc::new(entry));
        }
        for manifest in admitted.templates {
            let entry = TemplateEntry {
                manifest,
                plugin: plugin.clone(),
            };
            self.templates
                .insert(entry.manifest.uri_template.clone(), Arc::new(entry));
        }
    }

    /// Whether `other` offers the same prompts and resources, declared the same way.
    pub(super) fn same_as(&self, other: &Primitives) -> bool {
        fn same<E, M: PartialEq>(
            a: &BTreeMap<String, Arc<E>>,
            b: &BTreeMap<String, Arc<E>>,
            manifest: impl Fn(&E) -> &M,
        ) -> bool {
            a.len() == b.len()
                && a.values()
                    .zip(b.values())
                    .all(|(a, b)| manifest(a) == manifest(b))
        }
        same(&self.prompts, &other.prompts, |e| &e.manifest)
            && same(&self.resources, &other.resources, |e| &e.manifest)
            && same(&self.templates, &other.templates, |e| &e.manifest)
    }
}
