//! [`ResourceBuilder`]: one resource, or one family of resources named by a URI template,
//! declared in one chain; [`Resource`], what the chain produces.
//!
//! A URI with a `{variable}` is a template (`resources/templates/list`), any other a fixed
//! resource (`resources/list`); the chain is the same. Like tools and prompts, a resource is
//! bound to workflow states ([`ResourceBuilder::visible_in`]) and the host serves it only while
//! the instance is in one of them. A template with the variable `{handle}` names the instance
//! itself (see [`ResourceTemplateManifest`]): `invoice://{handle}`, rendered from the instance's
//! state and context, follows the invoice through its workflow.

use std::{collections::BTreeMap, fmt};

use serde::{Deserialize, Serialize};

use super::{prompt::Reader, workflow::Workflow};
use crate::{CallContext, ResourceManifest, ResourceTemplateManifest, ToolError};

/// What a resource's reader is asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ResourceRequest {
    /// The URI the client read.
    pub uri: String,
    /// For a template, the value of each of its variables in `uri` (`handle` for an instance
    /// resource: the instance is also `ctx.handle`).
    #[serde(default)]
    pub variables: BTreeMap<String, String>,
}

/// A resource declared so far. Start one with [`Workflow::resource`] or [`resource`]; finish it
/// with [`text`](ResourceBuilder::text) (fixed URIs only) or [`read`](ResourceBuilder::read).
#[must_use = "a resource is declared only once `text` or `read` finishes it"]
pub struct ResourceBuilder {
    declared: Declared,
    workflow: Option<Workflow>,
}

/// A declared resource or resource template, ready for
/// [`Toolkit::resource`](super::Toolkit::resource).
pub struct Resource {
    pub(crate) declared: Declared,
    pub(crate) workflow: Option<Workflow>,
    /// `None`: the manifest's static `text` is the content.
    pub(crate) reader: Option<Reader>,
    /// `text` was given for a template, which has no single content (reported by the toolkit).
    pub(crate) text_on_template: bool,
    /// Completions by template variable ([`Resource::complete`]).
    pub(crate) completers: Vec<(String, super::prompt::Completer)>,
}

impl Resource {
    /// Completes the template variable `variable` with `complete` (see
    /// [`Prompt::complete`](super::Prompt::complete)). The host completes `{handle}` of an
    /// instance template itself, with the caller's own instances.
    pub fn complete<F>(mut self, variable: impl Into<String>, complete: F) -> Resource
    where
        F: Fn(&str, &CallContext) -> Vec<String> + Send + Sync + 'static,
    {
        self.completers.push((variable.into(), Box::new(complete)));
        self
    }
}

/// What the manifest will say of it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Declared {
    Fixed(ResourceManifest),
    Template(ResourceTemplateManifest),
}

impl Declared {
    pub(crate) fn name(&self) -> &str {
        match self {
            Declared::Fixed(resource) => &resource.name,
            Declared::Template(template) => &template.name,
        }
    }

    pub(crate) fn uri(&self) -> &str {
        match self {
            Declared::Fixed(resource) => &resource.uri,
            Declared::Template(template) => &template.uri_template,
        }
    }

    pub(crate) fn states(&self) -> &[String] {
        match self {
            Declared::Fixed(resource) => &resource.states,
            Declared::Template(template) => &template.states,
        }
    }

    fn states_mut(&mut self) -> &mut Vec<String> {
        match self {
            Declared::Fixed(resource) => &mut resource.states,
            Declared::Template(template) => &mut template.states,
        }
    }
}

impl fmt::Debug for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resource")
            .field("declared", &self.declared)
            .finish_non_exhaustive()
    }
}

/// Starts a resource bound to no workflow: always listed. `uri` with a `{variable}` makes it a
/// template.
pub fn resource(uri: impl Into<String>, name: impl Into<String>) -> ResourceBuilder {
    ResourceBuilder::new(uri.into(), name.into(), None)
}

impl ResourceBuilder {
    pub(crate) fn new(uri: String, name: String, workflow: Option<Workflow>) -> ResourceBuilder {
        let workflow_id = workflow.as_ref().map(|workflow| workflow.id().to_owned());
        let declared = if uri.contains('{') {
            Declared::Template(ResourceTemplateManifest {
                uri_template: uri,
                name,
                title: None,
                description: None,
                mime_type: None,
                workflow: workflow_id,
                states: Vec::new(),
            })
        } else {
            Declared::Fixed(ResourceManifest {
                uri,
                name,
                title: None,
                description: None,
                mime_type: None,
                workflow: workflow_id,
                states: Vec::new(),
                text: None,
            })
        };
        ResourceBuilder { declared, workflow }
    }

    /// What the resource is (shown in the listings).
    pub fn describe(mut self, description: impl Into<String>) -> Self {
        let description = Some(description.into());
        match &mut self.declared {
            Declared::Fixed(resource) => resource.description = description,
            Declared::Template(template) => template.description = description,
        }
        self
    }

    /// A human-readable name for display (MCP `title`).
    pub fn title(mut self, title: impl Into<String>) -> Self {
        let title = Some(title.into());
        match &mut self.declared {
            Declared::Fixed(resource) => resource.title = title,
            Declared::Template(template) => template.title = title,
        }
        self
    }

    /// The content's MIME type, e.g. `text/markdown` (a string content gets it).
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        let mime_type = Some(mime_type.into());
        match &mut self.declared {
            Declared::Fixed(resource) => resource.mime_type = mime_type,
            Declared::Template(template) => template.mime_type = mime_type,
        }
        self
    }

    /// Serves the resource only in these states (besides any given before). A resource of a
    /// workflow that names no state is served in every state.
    pub fn visible_in<S: Into<String>>(mut self, states: impl IntoIterator<Item = S>) -> Self {
        self.declared
            .states_mut()
            .extend(states.into_iter().map(Into::into));
        self
    }

    /// Finishes a fixed resource with its content, the same for every instance. (A template has
    /// no single content: the toolkit refuses `text` on one.)
    pub fn text(mut self, text: impl Into<String>) -> Resource {
        let text_on_template = match &mut self.declared {
            Declared::Fixed(resource) => {
                resource.text = Some(text.into());
                false
            }
            Declared::Template(_) => true,
        };
        Resource {
            declared: self.declared,
            workflow: self.workflow,
            reader: None,
            text_on_template,
            completers: Vec::new(),
        }
    }

    /// Finishes the resource with its reader, which gets the URI read (and a template's
    /// variables) and the instance's context, and returns a string (the text, with the declared
    /// MIME type), `{"contents": [...]}` as MCP's `resources/read` result has it, or any other
    /// serialisable value (served as its JSON text).
    pub fn read<O, F>(self, reader: F) -> Resource
    where
        O: Serialize + 'static,
        F: Fn(ResourceRequest, &CallContext) -> Result<O, ToolError> + Send + Sync + 'static,
    {
        let uri = self.declared.uri().to_owned();
        let reader: Reader = Box::new(move |request, ctx| {
            let request: ResourceRequest = serde_json::from_value(request)
                .map_err(|error| ToolError::bad_input(format!("bad resource request: {error}")))?;
            let output = reader(request, ctx)?;
            serde_json::to_value(output).map_err(|error| {
                ToolError::failed(format!(
                    "resource {uri} produced what JSON cannot hold: {error}"
                ))
            })
        });
        Resource {
            declared: self.declared,
            workflow: self.workflow,
            reader: Some(reader),
            text_on_template: false,
            completers: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_uri_with_a_variable_is_a_template() {
        let fixed = resource("policy://refunds", "refunds").text("Full refunds only.");
        assert!(matches!(fixed.declared, Declared::Fixed(ref r) if r.text.is_some()));
        let template = resource("invoice://{handle}", "invoice")
            .mime_type("application/json")
            .read(|request, ctx| Ok(json!({"uri": request.uri, "state": ctx.state})));
        let Declared::Template(manifest) = &template.declared else {
            panic!("{template:?}")
        };
        assert_eq!(manifest.mime_type.as_deref(), Some("application/json"));
        let out = (template.reader.as_ref().unwrap())(
            json!({"uri": "invoice://h1", "variables": {"handle": "h1"}}),
            &CallContext::default(),
        )
        .unwrap();
        assert_eq!(out, json!({"uri": "invoice://h1", "state": null}));
        assert!(resource("x://{y}", "y").text("t").text_on_template);
    }
}
