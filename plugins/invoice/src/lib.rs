//! Turnstile example plugin: an invoice approval workflow.
//!
//! ```text
//! draft --SUBMIT--> review --APPROVE--> approved --DISCHARGE--> discharged (final)
//!                     |  \--APPROVE [amount > 10,000]--> second_approval --APPROVE_AGAIN--> approved
//!                     |--REJECT--> draft   (REJECT from second_approval too)
//!                     \--after the review deadline--> draft
//! ```
//!
//! A review nobody decides goes back to draft by itself after the review deadline: 48 hours, or
//! `TURNSTILE_PLUGIN_INVOICE_REVIEW_DEADLINE_MS` milliseconds (the host passes it as the
//! plugin's configuration; a value that is not a whole number above 0 refuses the load). The
//! host keeps the deadline with the instance, so it holds across restarts.
//!
//! Each gated tool is visible only in its state and fires one event; `invoice.status` is bound to
//! the workflow but to no state, so it is always visible and reports where the instance stands.
//! The review checklist (a prompt) is offered only while the invoice is in review, and the
//! invoice itself (the resource `invoice://{handle}`) once it has been submitted.
//! The handlers say what they did; where the invoice went next is the workflow's business, and
//! the host adds it to every result as `state`.
//!
//! The plugin is deliberately stateless: everything it knows about an invoice comes from the
//! call (arguments, handle, current state). The host persists the workflow state and may run
//! several processes against one store, so data kept in this process's memory would be missing
//! after a restart or on another node.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use turnstile_plugin::{
    CallContext, ToolError, plugin_config,
    sdk::{NoInput, Toolkit, ToolkitPlugin, Workflow},
};

// Like `export_toolkit!`, reading the configuration first: a bad deadline or threshold refuses
// the load.
turnstile_plugin::export_plugin!(ToolkitPlugin, || {
    let deadline = review_deadline_ms(plugin_config())?;
    let confirm_above = confirm_above(plugin_config())?;
    toolkit_configured(deadline, confirm_above)
        .build()
        .map_err(|error| error.to_string())
});

/// Discharging an invoice above this amount asks a person to confirm, unless configured.
pub const DEFAULT_CONFIRM_ABOVE: f64 = 5_000.0;

/// The amount above which a discharge is confirmed by a person: `confirm_above` in `config`
/// (`TURNSTILE_PLUGIN_INVOICE_CONFIRM_ABOVE`, a number of 0 or more), or
/// [`DEFAULT_CONFIRM_ABOVE`].
fn confirm_above(config: &Value) -> Result<f64, String> {
    turnstile_plugin::config_number(config, "invoice", "confirm_above", DEFAULT_CONFIRM_ABOVE)
}

/// Every tool here computes its answer from the call alone, in microseconds, without I/O: the
/// host may run it on the request's own thread (see `ToolManifest::quick_ms`).
const QUICK_MS: u32 = 2;

/// Invoices above this amount need a second approval.
const SECOND_APPROVAL_ABOVE: f64 = 10_000.0;

/// How long a review may stay undecided unless configured: 48 hours.
pub const DEFAULT_REVIEW_DEADLINE_MS: u64 = 48 * 60 * 60 * 1000;

/// The review deadline `config` sets (`review_deadline_ms`: whole milliseconds, above 0), or
/// [`DEFAULT_REVIEW_DEADLINE_MS`].
fn review_deadline_ms(config: &Value) -> Result<u64, String> {
    turnstile_plugin::config_ms(
        config,
        "invoice",
        "review_deadline_ms",
        DEFAULT_REVIEW_DEADLINE_MS,
    )
}

/// `ms` as a person says it: "48 hours", "90 seconds", "1500 ms".
fn spoken(ms: u64) -> String {
    let unit = |n: u64, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    match ms {
        ms if ms % 3_600_000 == 0 => unit(ms / 3_600_000, "hour"),
        ms if ms % 60_000 == 0 => unit(ms / 60_000, "minute"),
        ms if ms % 1_000 == 0 => unit(ms / 1_000, "second"),
        ms => format!("{ms} ms"),
    }
}

/// The workflow machine, XState v5 JSON, with the review deadline in ms. The context keeps the
/// submitted amount (assigned from the `invoice.submit` call's input), and a guard over it sends
/// a large invoice to a second approval: the agent's menu then offers `invoice.second_approve`
/// instead of the payout. A review left undecided past `review_deadline_ms` goes back to draft
/// (a named delay, so the diagram says what it is).
fn machine(review_deadline_ms: u64) -> Value {
    json!({
        "id": "invoice",
        "initial": "draft",
        "context": {"amount": 0},
        "delays": {"reviewDeadline": review_deadline_ms},
        "states": {
            "draft": {"on": {"SUBMIT": {
                "target": "review",
                "actions": [{"type": "xstate.assign",
                    "params": {"amount": {"var": "event.input.amount"}}}]
            }}},
            "review": {"after": {"reviewDeadline": "draft"}, "on": {
                "APPROVE": [
                    {"target": "second_approval", "guard": {"type": "jsonLogic", "params": {
                        "rule": {">": [{"var": "context.amount"}, SECOND_APPROVAL_ABOVE]}}}},
                    {"target": "approved"}
                ],
                "REJECT": "draft"
            }},
            "second_approval": {"on": {"APPROVE_AGAIN": "approved", "REJECT": "draft"}},
            "approved": {"on": {"DISCHARGE": "discharged"}},
            "discharged": {"type": "final"}
        }
    })
}

/// The plugin with the default review deadline: the invoice workflow, its six tools, its review
/// checklist and the invoice itself.
pub fn toolkit() -> Toolkit {
    toolkit_with(DEFAULT_REVIEW_DEADLINE_MS)
}

/// The plugin with a review deadline of `review_deadline_ms`.
pub fn toolkit_with(review_deadline_ms: u64) -> Toolkit {
    toolkit_configured(review_deadline_ms, DEFAULT_CONFIRM_ABOVE)
}

/// The plugin with a review deadline of `review_deadline_ms`, confirming discharges of invoices
/// above `confirm_above` with a person.
pub fn toolkit_configured(review_deadline_ms: u64, confirm_above: f64) -> Toolkit {
    let invoice = Workflow::new(machine(review_deadline_ms));
    let deadline = spoken(review_deadline_ms);
    Toolkit::new("invoice", env!("CARGO_PKG_VERSION"))
        .tool(
            invoice
                .action("invoice.submit")
                .describe(format!(
                    "Submit the draft invoice for review. Give the amount to bill (a positive \
                     number) and optionally the customer's name. Afterwards a reviewer approves \
                     or rejects it; the invoice cannot be paid out before it is approved. A \
                     review not decided within {deadline} sends the invoice back to draft."
                ))
                .compact("Submit the invoice (amount, customer) for review.")
                .bind_state("draft", "SUBMIT")
                .quick(QUICK_MS)
                .handle(submit),
        )
        .tool(
            invoice
                .action("invoice.approve")
                .describe(format!(
                    "Approve the invoice under review, optionally with a note for the record. \
                     An approved invoice can then be discharged (paid out); one over 10,000 \
                     needs a second approval first. The review must be decided within \
                     {deadline} of the submission, or the invoice goes back to draft."
                ))
                .compact("Approve the invoice.")
                .bind_state("review", "APPROVE")
                .quick(QUICK_MS)
                .handle(|input: Approve, ctx| {
                    Ok(json!({"invoice": ctx.handle, "note": input.note,
                        "message": "Invoice approved."}))
                }),
        )
        .tool(
            invoice
                .action("invoice.second_approve")
                .describe(
                    "Give the second approval an invoice over 10,000 needs, optionally with a \
                     note. Afterwards it can be discharged (paid out).",
                )
                .compact("Second approval of a large invoice.")
                .bind_state("second_approval", "APPROVE_AGAIN")
                .quick(QUICK_MS)
                .handle(|input: Approve, ctx| {
                    Ok(json!({"invoice": ctx.handle, "note": input.note,
                        "message": "Invoice approved a second time."}))
                }),
        )
        .tool(
            invoice
                .action("invoice.reject")
                .describe(
                    "Reject the invoice under review and send it back to draft, with the reason \
                     the submitter must address before submitting again.",
                )
                .compact("Reject the invoice back to draft (reason).")
                .bind_state("review", "REJECT")
                .bind_state("second_approval", "REJECT")
                .quick(QUICK_MS)
                .handle(reject),
        )
        .tool(
            invoice
                .action("invoice.discharge")
                .describe(
                    "Discharge (pay out) the approved invoice. This is the final step: the \
                     invoice is closed afterwards. Optionally give the payment reference.",
                )
                .compact("Pay out the approved invoice.")
                .bind_state("approved", "DISCHARGE")
                // The money leaves here: above the threshold a person says yes first, and may
                // give the payment reference (kept in the audit trail as what they confirmed,
                // and told to the handler).
                .confirm_with(
                    format!(
                        "Pay out this invoice? It is over {confirm_above:.0}, and the money \
                         leaves at once."
                    ),
                    Some(json!({"type": "object", "properties": {
                        "reference": {"type": "string", "title": "Payment reference",
                            "description": "The bank transfer's reference, if you have it."}}})),
                    Some(json!({">": [{"var": ["context.amount", 0]}, confirm_above]})),
                )
                .quick(QUICK_MS)
                .handle(discharge),
        )
        .tool(
            invoice
                .action("invoice.status")
                .describe(
                    "Report the invoice's current workflow state (draft, review, approved or \
                     discharged) and what can happen next. Changes nothing.",
                )
                .compact("Show the invoice's state.")
                .title("Invoice status")
                .read_only()
                .output::<Status>()
                .quick(QUICK_MS)
                .handle(|_: NoInput, ctx| Ok(status(ctx))),
        )
        .prompt(
            invoice
                .prompt("invoice.review_checklist")
                .title("Invoice review checklist")
                .describe(
                    "What a reviewer checks before approving or rejecting the invoice under \
                     review. Offered only while an invoice is in review.",
                )
                .visible_in(["review", "second_approval"])
                .render(review_checklist)
                // What reviewers most often look at first, for a client to offer as they type.
                .complete("focus", |typed, _ctx| {
                    FOCUSES
                        .iter()
                        .filter(|focus| focus.starts_with(typed))
                        .map(|focus| (*focus).to_owned())
                        .collect()
                }),
        )
        .resource(
            invoice
                .resource("invoice://{handle}", "invoice")
                .title("Invoice")
                .describe(
                    "The invoice as it stands: its state, the submitted amount and what can \
                     happen next. Readable once it has been submitted.",
                )
                .mime_type("application/json")
                .visible_in(["review", "second_approval", "approved", "discharged"])
                .read(|_request, ctx| Ok(invoice_document(ctx))),
        )
}

/// What a reviewer may name as the checklist's focus: the prompt's completions.
const FOCUSES: &[&str] = &[
    "the VAT number",
    "the amount against the order",
    "the customer's address",
    "the payment terms",
    "the due date",
];

/// The arguments of the `invoice.review_checklist` prompt.
#[derive(Deserialize, JsonSchema)]
struct ReviewFocus {
    /// Anything the reviewer should look at first (e.g. "the VAT number").
    focus: Option<String>,
}

/// The review checklist, for the amount the instance's context holds (assigned at submit).
fn review_checklist(input: ReviewFocus, ctx: &CallContext) -> Result<String, ToolError> {
    let amount = ctx.context["amount"].as_f64().unwrap_or(0.0);
    let second = if amount > SECOND_APPROVAL_ABOVE {
        format!(
            "\n- The amount is over {SECOND_APPROVAL_ABOVE:.0}: approving sends it to a second \
             approval."
        )
    } else {
        String::new()
    };
    let focus = input
        .focus
        .map(|focus| format!("\nLook at this first: {focus}."))
        .unwrap_or_default();
    Ok(format!(
        "You are reviewing invoice {handle} of {amount:.2}. Before you approve it, check:\n\
         - The amount matches the order or contract it bills.\n\
         - The customer is named and their details are complete.\n\
         - It has not been billed already.{second}\n\
         Then call invoice.approve, or invoice.reject with the reason.{focus}",
        handle = ctx.handle,
    ))
}

/// The invoice as the `invoice://{handle}` resource shows it: from the instance's state and
/// context alone (the plugin keeps nothing).
fn invoice_document(ctx: &CallContext) -> Value {
    let status = status(ctx);
    json!({
        "invoice": ctx.handle,
        "state": ctx.state,
        "amount": ctx.context["amount"],
        "next": status.next,
    })
}

/// The arguments of `invoice.submit`.
#[derive(Deserialize, JsonSchema)]
struct Submit {
    /// Amount to bill, greater than zero.
    #[schemars(extend("exclusiveMinimum" = 0))]
    amount: f64,
    /// Customer name.
    customer: Option<String>,
}

/// The arguments of `invoice.approve`.
#[derive(Deserialize, JsonSchema)]
struct Approve {
    /// Reviewer's note.
    note: Option<String>,
}

/// The arguments of `invoice.reject`.
#[derive(Deserialize, JsonSchema)]
struct Reject {
    /// Why the invoice is rejected.
    #[schemars(length(min = 1))]
    reason: String,
}

/// The arguments of `invoice.discharge`.
#[derive(Deserialize, JsonSchema)]
struct Discharge {
    /// Payment reference, e.g. a bank transfer id.
    reference: Option<String>,
}

/// The result of `invoice.status`.
#[derive(Serialize, JsonSchema)]
struct Status {
    /// The XState state value.
    state: Value,
    /// What can happen next, in words.
    next: String,
    message: String,
    /// The invoice's handle.
    #[serde(skip_serializing_if = "String::is_empty")]
    invoice: String,
}

fn submit(input: Submit, ctx: &CallContext) -> Result<Value, ToolError> {
    // The host checks the schema too; this keeps the plugin safe when called without it.
    if !(input.amount.is_finite() && input.amount > 0.0) {
        return Err(ToolError::bad_input(
            "amount must be a number greater than 0",
        ));
    }
    // The inputs are in the output once: a message that repeated them would double what a
    // long customer name costs every reader of the result (and every remembered result).
    Ok(json!({
        "invoice": ctx.handle,
        "amount": input.amount,
        "customer": input.customer,
        "message": "Invoice submitted for review.",
    }))
}

/// Pays the invoice out. The payment reference is the one the person gave when confirming, if
/// they were asked and gave one (their word over the model's), else the argument's.
fn discharge(input: Discharge, ctx: &CallContext) -> Result<Value, ToolError> {
    let confirmed = ctx
        .confirmation()
        .and_then(|confirmed| confirmed["reference"].as_str())
        .map(str::trim)
        .filter(|reference| !reference.is_empty());
    let reference = confirmed.map(str::to_owned).or(input.reference);
    Ok(json!({"invoice": ctx.handle, "reference": reference,
        "message": "Invoice discharged (paid out)."}))
}

fn reject(input: Reject, ctx: &CallContext) -> Result<Value, ToolError> {
    let reason = input.reason.trim();
    if reason.is_empty() {
        return Err(ToolError::bad_input("reason must not be empty"));
    }
    Ok(json!({
        "invoice": ctx.handle,
        "reason": reason,
        "message": "Invoice rejected: fix what the reason says and submit it again.",
    }))
}

fn status(ctx: &CallContext) -> Status {
    let next = match ctx.state.as_str() {
        Some("draft") => "submit it for review",
        Some("review") => {
            "approve or reject it (undecided past the review deadline, it goes back to draft)"
        }
        Some("second_approval") => "give it its second approval, or reject it",
        Some("approved") => "discharge (pay out) it",
        Some("discharged") => "nothing: the invoice is closed",
        _ => "unknown",
    };
    Status {
        state: ctx.state.clone(),
        next: next.to_owned(),
        message: format!("Invoice is in state {}; next step: {next}.", ctx.state),
        invoice: ctx.handle.clone(),
    }
}

#[cfg(test)]
mod tests {
    use turnstile_plugin::{
        Plugin, PrimitiveKind,
        testing::{bindings, built, context},
    };

    use super::*;

    #[test]
    fn manifest_binds_every_transition_of_the_machine() {
        let manifest = built(toolkit()).manifest();
        assert_eq!(
            bindings(&manifest),
            [
                ("invoice.submit", "draft".to_owned(), Some("SUBMIT")),
                ("invoice.approve", "review".to_owned(), Some("APPROVE")),
                (
                    "invoice.second_approve",
                    "second_approval".to_owned(),
                    Some("APPROVE_AGAIN")
                ),
                (
                    "invoice.reject",
                    "review,second_approval".to_owned(),
                    Some("REJECT")
                ),
                (
                    "invoice.discharge",
                    "approved".to_owned(),
                    Some("DISCHARGE")
                ),
                ("invoice.status", String::new(), None),
            ]
        );
        assert!(
            manifest
                .tools
                .iter()
                .all(|t| t.workflow.as_deref() == Some("invoice"))
        );
        assert_eq!(manifest.workflows, [machine(DEFAULT_REVIEW_DEADLINE_MS)]);
    }

    #[test]
    fn the_review_deadline_comes_from_the_configuration() {
        assert_eq!(
            review_deadline_ms(&Value::Null),
            Ok(DEFAULT_REVIEW_DEADLINE_MS)
        );
        assert_eq!(
            review_deadline_ms(&json!({"other": "1"})),
            Ok(DEFAULT_REVIEW_DEADLINE_MS)
        );
        assert_eq!(
            review_deadline_ms(&json!({"review_deadline_ms": " 1500 "})),
            Ok(1500)
        );
        for bad in ["0", "-5", "1.5", "soon", ""] {
            let refused = review_deadline_ms(&json!({"review_deadline_ms": bad})).unwrap_err();
            assert!(
                refused.contains("TURNSTILE_PLUGIN_INVOICE_REVIEW_DEADLINE_MS"),
                "{refused}"
            );
        }
        let manifest = toolkit_with(90_000).build().unwrap().manifest();
        assert_eq!(manifest.workflows[0]["delays"]["reviewDeadline"], 90_000);
        let submit = manifest
            .tools
            .iter()
            .find(|t| t.name == "invoice.submit")
            .unwrap();
        assert!(
            submit.description.contains("within 90 seconds"),
            "{}",
            submit.description
        );
        assert_eq!(spoken(DEFAULT_REVIEW_DEADLINE_MS), "48 hours");
        assert_eq!(spoken(60_000), "1 minute");
        assert_eq!(spoken(1_500), "1500 ms");
    }

    #[test]
    fn schemas_are_what_a_model_reads() {
        let manifest = built(toolkit()).manifest();
        let schema = |name: &str| {
            let tool = manifest.tools.iter().find(|t| t.name == name).unwrap();
            (tool.input_schema.clone(), tool.output_schema.clone())
        };
        assert_eq!(
            schema("invoice.submit").0,
            json!({
                "type": "object",
                "properties": {
                    "amount": {"type": "number", "exclusiveMinimum": 0,
                        "description": "Amount to bill, greater than zero."},
                    "customer": {"type": "string", "description": "Customer name."}
                },
                "required": ["amount"]
            })
        );
        assert_eq!(
            schema("invoice.reject").0["properties"]["reason"],
            json!({"type": "string", "minLength": 1, "description": "Why the invoice is rejected."})
        );
        let (input, output) = schema("invoice.status");
        assert_eq!(input, json!({"type": "object", "properties": {}}));
        assert_eq!(
            output.unwrap()["required"],
            json!(["state", "next", "message"])
        );
    }

    #[test]
    fn submit_reports_what_happened() {
        let out = built(toolkit())
            .call(
                "invoice.submit",
                json!({"amount": 120.5, "customer": "ACME"}),
                &context("h", "draft"),
            )
            .unwrap();
        assert_eq!(out["amount"], 120.5);
        assert_eq!(out["customer"], "ACME");
        // Each input once: the message does not repeat the customer.
        assert!(!out["message"].as_str().unwrap().contains("ACME"));
        assert!(out.get("state").is_none(), "the host reports the state");
    }

    #[test]
    fn a_discharge_reports_the_reference_the_person_confirmed() {
        let plugin = built(toolkit());
        let confirmed = |content: Value| CallContext {
            asking: json!({"responses": {"turnstile.confirm":
                {"action": "accept", "content": content}}}),
            ..context("h", "approved")
        };
        let discharge = |arguments: Value, ctx: &CallContext| {
            plugin.call("invoice.discharge", arguments, ctx).unwrap()["reference"].clone()
        };
        let given = json!({"reference": "R-model"});
        assert_eq!(
            discharge(given.clone(), &confirmed(json!({"reference": "R-person"}))),
            "R-person"
        );
        assert_eq!(discharge(given.clone(), &confirmed(json!({}))), "R-model");
        assert_eq!(discharge(given, &context("h", "approved")), "R-model");
        assert_eq!(discharge(json!({}), &context("h", "approved")), Value::Null);
    }

    #[test]
    fn bad_inputs_are_rejected() {
        let plugin = built(toolkit());
        for input in [json!({}), json!({"amount": 0}), json!({"amount": "1"})] {
            let err = plugin
                .call("invoice.submit", input, &context("h", "draft"))
                .unwrap_err();
            assert!(matches!(err, ToolError::BadInput(_)), "{err:?}");
        }
        let err = plugin.call(
            "invoice.reject",
            json!({"reason": " "}),
            &context("h", "review"),
        );
        assert!(matches!(err, Err(ToolError::BadInput(_))));
    }

    #[test]
    fn the_checklist_and_the_invoice_read_the_submitted_amount() {
        let plugin = built(toolkit());
        let manifest = plugin.manifest();
        assert_eq!(manifest.prompts[0].states, ["review", "second_approval"]);
        assert_eq!(manifest.prompts[0].arguments[0].name, "focus");
        assert_eq!(
            manifest.resource_templates[0].uri_template,
            "invoice://{handle}"
        );
        let review = CallContext {
            context: json!({"amount": 12_500}),
            ..context("h", "review")
        };
        let checklist = plugin
            .read(
                PrimitiveKind::Prompt,
                "invoice.review_checklist",
                json!({}),
                &review,
            )
            .unwrap();
        let text = checklist.as_str().unwrap();
        assert!(text.contains("invoice h of 12500.00"), "{text}");
        assert!(text.contains("second approval"), "{text}");
        let request = json!({"uri": "invoice://h", "variables": {"handle": "h"}});
        let document = plugin
            .read(PrimitiveKind::Resource, "invoice", request, &review)
            .unwrap();
        assert_eq!(
            document,
            json!({"invoice": "h", "state": "review", "amount": 12_500,
                "next": "approve or reject it (undecided past the review deadline, it goes \
                    back to draft)"})
        );
    }

    #[test]
    fn status_reads_the_context() {
        let out = built(toolkit())
            .call("invoice.status", json!({}), &context("h", "approved"))
            .unwrap();
        assert_eq!(out["state"], "approved");
        assert_eq!(out["next"], "discharge (pay out) it");
        assert_eq!(out["invoice"], "h");
    }
}
