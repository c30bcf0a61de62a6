//! Turnstile example plugin: an invoice approval workflow.
//!
//! ```text
//! draft --SUBMIT--> review --APPROVE--> approved --DISCHARGE--> discharged (final)
//!                     \--REJECT--> draft
//! ```
//!
//! Each gated tool is visible only in its state and fires one event; `invoice.status` is bound to
//! the workflow but to no state, so it is always visible and reports where the instance stands.
//!
//! The plugin is deliberately stateless: everything it knows about an invoice comes from the
//! call (arguments, handle, current state). The host persists the workflow state and may run
//! several processes against one store, so data kept in this process's memory would be missing
//! after a restart or on another node.

use serde::Deserialize;
use serde_json::{Value, json};
use turnstile_plugin_api::{
    CallContext, Manifest, Plugin, ToolAnnotations, ToolError, ToolManifest, parse_input,
};

/// The plugin value; no fields, see the crate docs for why.
#[derive(Default)]
pub struct Invoice;

turnstile_plugin_api::export_plugin!(Invoice);

/// Every tool here computes its answer from the call alone, in microseconds, without I/O: the
/// host may run it on the request's own thread (see `ToolManifest::quick_ms`).
const QUICK_MS: u32 = 2;

/// The workflow machine, XState v5 JSON.
fn machine() -> Value {
    json!({
        "id": "invoice",
        "initial": "draft",
        "states": {
            "draft": {"on": {"SUBMIT": "review"}},
            "review": {"on": {"APPROVE": "approved", "REJECT": "draft"}},
            "approved": {"on": {"DISCHARGE": "discharged"}},
            "discharged": {"type": "final"}
        }
    })
}

impl Plugin for Invoice {
    fn manifest(&self) -> Manifest {
        Manifest::new("invoice", env!("CARGO_PKG_VERSION"))
            .workflow(machine())
            .tool(
                ToolManifest::new(
                    "invoice.submit",
                    "Submit the draft invoice for review. Give the amount to bill (a positive \
                     number) and optionally the customer's name. Afterwards a reviewer approves \
                     or rejects it; the invoice cannot be paid out before it is approved.",
                    json!({
                        "type": "object",
                        "properties": {
                            "amount": {"type": "number", "exclusiveMinimum": 0,
                                "description": "Amount to bill, greater than zero."},
                            "customer": {"type": "string", "description": "Customer name."}
                        },
                        "required": ["amount"]
                    }),
                )
                .compact("Submit the invoice (amount, customer) for review.")
                .workflow("invoice", ["draft"])
                .transition("SUBMIT")
                .quick(QUICK_MS),
            )
            .tool(
                ToolManifest::new(
                    "invoice.approve",
                    "Approve the invoice under review, optionally with a note for the record. \
                     An approved invoice can then be discharged (paid out).",
                    json!({
                        "type": "object",
                        "properties": {
                            "note": {"type": "string", "description": "Reviewer's note."}
                        }
                    }),
                )
                .compact("Approve the invoice.")
                .workflow("invoice", ["review"])
                .transition("APPROVE")
                .quick(QUICK_MS),
            )
            .tool(
                ToolManifest::new(
                    "invoice.reject",
                    "Reject the invoice under review and send it back to draft, with the reason \
                     the submitter must address before submitting again.",
                    json!({
                        "type": "object",
                        "properties": {
                            "reason": {"type": "string", "minLength": 1,
                                "description": "Why the invoice is rejected."}
                        },
                        "required": ["reason"]
                    }),
                )
                .compact("Reject the invoice back to draft (reason).")
                .workflow("invoice", ["review"])
                .transition("REJECT")
                .quick(QUICK_MS),
            )
            .tool(
                ToolManifest::new(
                    "invoice.discharge",
                    "Discharge (pay out) the approved invoice. This is the final step: the \
                     invoice is closed afterwards. Optionally give the payment reference.",
                    json!({
                        "type": "object",
                        "properties": {
                            "reference": {"type": "string",
                                "description": "Payment reference, e.g. a bank transfer id."}
                        }
                    }),
                )
                .compact("Pay out the approved invoice.")
                .workflow("invoice", ["approved"])
                .transition("DISCHARGE")
                .quick(QUICK_MS),
            )
            .tool(
                ToolManifest::new(
                    "invoice.status",
                    "Report the invoice's current workflow state (draft, review, approved or \
                     discharged) and what can happen next. Changes nothing.",
                    json!({"type": "object", "properties": {}}),
                )
                .compact("Show the invoice's state.")
                .workflow("invoice", Vec::<String>::new())
                .title("Invoice status")
                .quick(QUICK_MS)
                .annotations(ToolAnnotations {
                    read_only_hint: Some(true),
                    idempotent_hint: Some(true),
                    ..ToolAnnotations::default()
                })
                .output_schema(json!({
                    "type": "object",
                    "properties": {
                        "invoice": {"type": "string"},
                        "state": {"description": "The XState state value"},
                        "next": {"type": "string"},
                        "message": {"type": "string"}
                    },
                    "required": ["state", "next", "message"]
                })),
            )
    }

    fn call(&self, tool: &str, input: Value, ctx: &CallContext) -> Result<Value, ToolError> {
        match tool {
            "invoice.submit" => submit(parse_input(input)?, ctx),
            "invoice.approve" => approve(parse_input(input)?, ctx),
            "invoice.reject" => reject(parse_input(input)?, ctx),
            "invoice.discharge" => discharge(parse_input(input)?, ctx),
            "invoice.status" => Ok(status(ctx)),
            other => Err(ToolError::UnknownTool(other.to_owned())),
        }
    }
}

// Input structs tolerate unknown fields on purpose: the host adds its own properties (such as
// the instance handle) to every gated tool's schema.

#[derive(Deserialize)]
struct SubmitInput {
    amount: f64,
    customer: Option<String>,
}

#[derive(Deserialize)]
struct ApproveInput {
    note: Option<String>,
}

#[derive(Deserialize)]
struct RejectInput {
    reason: String,
}

#[derive(Deserialize)]
struct DischargeInput {
    reference: Option<String>,
}

fn submit(input: SubmitInput, ctx: &CallContext) -> Result<Value, ToolError> {
    // The host checks the schema too; this keeps the plugin safe when called without it.
    if !(input.amount.is_finite() && input.amount > 0.0) {
        return Err(ToolError::bad_input(
            "amount must be a number greater than 0",
        ));
    }
    let customer = input.customer.as_deref().unwrap_or("(no customer given)");
    Ok(json!({
        "invoice": ctx.handle,
        "event": "SUBMIT",
        "status": "review",
        "amount": input.amount,
        "customer": input.customer,
        "message": format!(
            "Invoice of {:.2} for {customer} submitted for review. Next: approve or reject it.",
            input.amount
        ),
    }))
}

fn approve(input: ApproveInput, ctx: &CallContext) -> Result<Value, ToolError> {
    Ok(json!({
        "invoice": ctx.handle,
        "event": "APPROVE",
        "status": "approved",
        "note": input.note,
        "message": "Invoice approved. Next: discharge (pay out) it.",
    }))
}

fn reject(input: RejectInput, ctx: &CallContext) -> Result<Value, ToolError> {
    let reason = input.reason.trim();
    if reason.is_empty() {
        return Err(ToolError::bad_input("reason must not be empty"));
    }
    Ok(json!({
        "invoice": ctx.handle,
        "event": "REJECT",
        "status": "draft",
        "reason": reason,
        "message": format!("Invoice rejected and back in draft: {reason}. Fix it and submit again."),
    }))
}

fn discharge(input: DischargeInput, ctx: &CallContext) -> Result<Value, ToolError> {
    Ok(json!({
        "invoice": ctx.handle,
        "event": "DISCHARGE",
        "status": "discharged",
        "reference": input.reference,
        "message": "Invoice discharged (paid out). The workflow is complete.",
    }))
}

fn status(ctx: &CallContext) -> Value {
    let next = match ctx.state.as_str() {
        Some("draft") => "submit it for review",
        Some("review") => "approve or reject it",
        Some("approved") => "discharge (pay out) it",
        Some("discharged") => "nothing: the invoice is closed",
        _ => "unknown",
    };
    json!({
        "invoice": ctx.handle,
        "state": ctx.state,
        "next": next,
        "message": format!("Invoice is in state {}; next step: {next}.", ctx.state),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(state: &str) -> CallContext {
        CallContext {
            call_id: "c".into(),
            handle: "h".into(),
            state: json!(state),
            ..CallContext::default()
        }
    }

    #[test]
    fn submit_reports_what_happened() {
        let out = Invoice
            .call(
                "invoice.submit",
                json!({"amount": 120.5, "customer": "ACME"}),
                &ctx("draft"),
            )
            .unwrap();
        assert_eq!(out["status"], "review");
        assert_eq!(out["amount"], 120.5);
        assert!(out["message"].as_str().unwrap().contains("120.50 for ACME"));
    }

    #[test]
    fn bad_inputs_are_rejected() {
        for input in [json!({}), json!({"amount": 0}), json!({"amount": "1"})] {
            let err = Invoice
                .call("invoice.submit", input, &ctx("draft"))
                .unwrap_err();
            assert!(matches!(err, ToolError::BadInput(_)), "{err:?}");
        }
        let err = Invoice.call("invoice.reject", json!({"reason": " "}), &ctx("review"));
        assert!(matches!(err, Err(ToolError::BadInput(_))));
    }

    #[test]
    fn manifest_binds_every_transition_of_the_machine() {
        let manifest = Invoice.manifest();
        let bound: Vec<_> = manifest
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.states.clone(), t.transition.as_deref()))
            .collect();
        assert_eq!(
            bound,
            [
                ("invoice.submit", vec!["draft".to_owned()], Some("SUBMIT")),
                (
                    "invoice.approve",
                    vec!["review".to_owned()],
                    Some("APPROVE")
                ),
                ("invoice.reject", vec!["review".to_owned()], Some("REJECT")),
                (
                    "invoice.discharge",
                    vec!["approved".to_owned()],
                    Some("DISCHARGE")
                ),
                ("invoice.status", vec![], None),
            ]
        );
        assert!(
            manifest
                .tools
                .iter()
                .all(|t| t.workflow.as_deref() == Some("invoice"))
        );
        assert_eq!(manifest.workflows, [machine()]);
    }

    #[test]
    fn status_reads_the_context() {
        let out = Invoice
            .call("invoice.status", json!({}), &ctx("approved"))
            .unwrap();
        assert_eq!(out["state"], "approved");
        assert_eq!(out["next"], "discharge (pay out) it");
    }
}
