//! Turnstile example plugin: a card-payment workflow.
//!
//! ```text
//! new --AUTHORIZE--> authorized --CAPTURE--> captured --REFUND--> refunded (final)
//!                        |--VOID--> voided (final)
//!                        |--PAYMENT_FAILED (a declined capture)--> declined --VOID--> voided
//!                        \--after the authorization expires--> expired (final)
//! ```
//!
//! A capture can fail: the tool's binding fires `PAYMENT_FAILED` when its handler fails
//! (`on_error`), so a declined capture moves the payment to `declined`, where the agent's menu
//! offers only voiding the authorization, instead of leaving it in `authorized`, where a retry
//! would be offered forever. This example talks to no provider, so it declines as a provider
//! would decline an over-limit charge: a capture of more than the configured card limit
//! (`TURNSTILE_PLUGIN_PAYMENT_CARD_LIMIT`; unset: no limit). The authorized amount is in the
//! machine's context (assigned from the `payment.authorize` call), which the host passes to the
//! capture handler.
//!
//! An authorization not captured (or voided) in time expires, as card authorizations do: after 7
//! days, or `TURNSTILE_PLUGIN_PAYMENT_AUTHORIZATION_EXPIRY_MS` milliseconds (the host passes it as
//! the plugin's configuration; a value that is not a whole number above 0 refuses the load).
//! The payment is then closed and a capture is no longer on the menu.
//!
//! The gate is what makes this safe to hand to an agent: a capture is not on the menu until an
//! authorization succeeded, a refund not until the money was captured, and after a void or a
//! refund nothing is. Refunds are full refunds: the workflow has one `refunded` state, and
//! partial refunds would need a counter the machine does not model.
//!
//! Like the invoice plugin it is stateless: it talks to no payment provider (this is an
//! example) and keeps nothing in memory, because the host may run several processes against
//! one store. References it returns are derived from the call id. The host adds the state each
//! call left the payment in to its result.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use turnstile_plugin::{
    CallContext, InputKind, InputRequest, ToolError, plugin_config,
    sdk::{NoInput, Toolkit, ToolkitPlugin, Workflow},
};

// Like `export_toolkit!`, reading the configuration first: a bad expiry or threshold refuses
// the load.
turnstile_plugin::export_plugin!(ToolkitPlugin, || {
    let expiry = authorization_expiry_ms(plugin_config())?;
    let confirm_above = turnstile_plugin::config_number(
        plugin_config(),
        "payment",
        "confirm_above",
        DEFAULT_CONFIRM_ABOVE,
    )?;
    toolkit_configured(expiry, confirm_above)
        .build()
        .map_err(|error| error.to_string())
});

/// Capturing more than this asks a person to confirm, unless configured
/// (`TURNSTILE_PLUGIN_PAYMENT_CONFIRM_ABOVE`).
pub const DEFAULT_CONFIRM_ABOVE: f64 = 5_000.0;

/// Every tool here computes its answer from the call alone, in microseconds, without I/O: the
/// host may run it on the request's own thread (see `ToolManifest::quick_ms`).
const QUICK_MS: u32 = 2;

/// How long an authorization holds unless configured: 7 days.
pub const DEFAULT_AUTHORIZATION_EXPIRY_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// The authorization expiry `config` sets (`authorization_expiry_ms`: whole milliseconds, above
/// 0), or [`DEFAULT_AUTHORIZATION_EXPIRY_MS`].
fn authorization_expiry_ms(config: &Value) -> Result<u64, String> {
    turnstile_plugin::config_ms(
        config,
        "payment",
        "authorization_expiry_ms",
        DEFAULT_AUTHORIZATION_EXPIRY_MS,
    )
}

/// The workflow machine, XState v5 JSON, with the authorization expiry in ms (a named delay, so
/// the diagram says what it is).
fn machine(authorization_expiry_ms: u64) -> Value {
    json!({
        "id": "payment",
        "initial": "new",
        "context": {"amount": 0},
        "delays": {"authorizationExpiry": authorization_expiry_ms},
        "states": {
            "new": {"on": {"AUTHORIZE": {
                "target": "authorized",
                "actions": [{"type": "xstate.assign",
                    "params": {"amount": {"var": "event.input.amount"}}}]
            }}},
            "authorized": {
                "after": {"authorizationExpiry": "expired"},
                "on": {"CAPTURE": "captured", "VOID": "voided", "PAYMENT_FAILED": "declined"}
            },
            "declined": {"on": {"VOID": "voided"}},
            "captured": {"on": {"REFUND": "refunded"}},
            "refunded": {"type": "final"},
            "voided": {"type": "final"},
            "expired": {"type": "final"}
        }
    })
}

/// The plugin with the default authorization expiry: the payment workflow, its five tools and
/// its refund policy (a prompt).
pub fn toolkit() -> Toolkit {
    toolkit_with(DEFAULT_AUTHORIZATION_EXPIRY_MS)
}

/// The plugin with authorizations that expire after `authorization_expiry_ms`.
pub fn toolkit_with(authorization_expiry_ms: u64) -> Toolkit {
    toolkit_configured(authorization_expiry_ms, DEFAULT_CONFIRM_ABOVE)
}

/// The plugin with authorizations that expire after `authorization_expiry_ms`, a person
/// confirming captures above `confirm_above`.
pub fn toolkit_configured(authorization_expiry_ms: u64, confirm_above: f64) -> Toolkit {
    let payment = Workflow::new(machine(authorization_expiry_ms));
    Toolkit::new("payment", env!("CARGO_PKG_VERSION"))
        .tool(
            payment
                .action("payment.authorize")
                .describe(
                    "Authorize a card payment: reserve `amount` (a positive number) in \
                     `currency` (ISO 4217 code such as EUR) on the customer's card. Nothing is \
                     charged yet; afterwards either capture the payment or void it, before the \
                     authorization expires.",
                )
                .compact("Authorize (reserve) a card payment: amount, currency.")
                .bind_state("new", "AUTHORIZE")
                .quick(QUICK_MS)
                .handle(authorize),
        )
        .tool(
            payment
                .action("payment.capture")
                .describe(
                    "Capture the authorized payment: actually charge the reserved amount. After \
                     a capture the payment can only be refunded.",
                )
                .compact("Charge the authorized amount.")
                .bind_state("authorized", "CAPTURE")
                .on_error("PAYMENT_FAILED")
                // The money moves here: above the threshold a person says yes first.
                .confirm_with(
                    format!("Charge the customer's card? The amount is over {confirm_above:.0}."),
                    None,
                    Some(json!({">": [{"var": ["context.amount", 0]}, confirm_above]})),
                )
                .quick(QUICK_MS)
                .handle(|_: NoInput, ctx| capture(ctx)),
        )
        .tool(
            payment
                .action("payment.void")
                .describe(
                    "Void the authorization: release the reserved amount without charging \
                     anything (also after a declined capture). Final: the payment is closed \
                     afterwards.",
                )
                .compact("Release the authorization uncharged.")
                .bind_state("authorized", "VOID")
                .bind_state("declined", "VOID")
                .quick(QUICK_MS)
                .handle(|input: Void, ctx| {
                    Ok(json!({"payment": ctx.handle, "reason": input.reason,
                        "message": "Authorization voided: nothing was charged."}))
                }),
        )
        .tool(
            payment
                .action("payment.refund")
                .describe(
                    "Refund the captured payment in full, giving the reason. Final: the payment \
                     is closed afterwards. Partial refunds are not supported.",
                )
                .compact("Refund the captured payment in full (reason).")
                .bind_state("captured", "REFUND")
                // Asks the client's model to draft the note to the customer, where it can.
                .asks()
                .quick(QUICK_MS)
                .handle(refund),
        )
        .tool(
            payment
                .action("payment.status")
                .describe(
                    "Report the payment's current state (new, authorized, declined, captured, \
                     refunded, voided or expired) and what can happen next. Changes nothing.",
                )
                .compact("Show the payment's state.")
                .read_only()
                .output::<Status>()
                .quick(QUICK_MS)
                .handle(|_: NoInput, ctx| Ok(status(ctx))),
        )
        .prompt(
            payment
                .prompt("payment.refund_policy")
                .title("Refund policy")
                .describe(
                    "The rules for refunding a captured payment: when a refund is due and what \
                     to give as its reason. Offered once the payment has been captured.",
                )
                .visible_in(["captured"])
                .text(REFUND_POLICY),
        )
}

/// The refund policy, offered to the agent once there is money it could give back.
const REFUND_POLICY: &str = "Refund policy. A captured payment may be refunded, in full only, \
    when the customer returned the goods within 30 days, when the service was not delivered, or \
    when the charge was a mistake (a duplicate, a wrong amount). Give that reason to \
    payment.refund in one sentence. A refund closes the payment: nothing can be charged on it \
    afterwards. Anything else (a partial refund, a goodwill gesture) is not done here: hand it to \
    a person.";

/// The arguments of `payment.authorize`.
#[derive(Deserialize, JsonSchema)]
struct Authorize {
    /// Amount to reserve, greater than zero.
    #[schemars(extend("exclusiveMinimum" = 0))]
    amount: f64,
    /// ISO 4217 currency code, e.g. EUR.
    #[schemars(pattern(r"^[A-Z]{3}$"))]
    currency: String,
    /// What the payment is for.
    description: Option<String>,
}

/// The arguments of `payment.void`.
#[derive(Deserialize, JsonSchema)]
struct Void {
    /// Why it is voided.
    reason: Option<String>,
}

/// The arguments of `payment.refund`.
#[derive(Deserialize, JsonSchema)]
struct Refund {
    /// Why the money is returned.
    #[schemars(length(min = 1))]
    reason: String,
}

/// The result of `payment.status`.
#[derive(Serialize, JsonSchema)]
struct Status {
    /// The XState state value.
    state: Value,
    /// What can happen next, in words.
    next: String,
    message: String,
    /// The payment's handle.
    #[serde(skip_serializing_if = "String::is_empty")]
    payment: String,
}

fn authorize(input: Authorize, ctx: &CallContext) -> Result<Value, ToolError> {
    if !(input.amount.is_finite() && input.amount > 0.0) {
        return Err(ToolError::bad_input(
            "amount must be a number greater than 0",
        ));
    }
    let currency_ok =
        input.currency.len() == 3 && input.currency.bytes().all(|b| b.is_ascii_uppercase());
    if !currency_ok {
        return Err(ToolError::bad_input(format!(
            "currency must be a three-letter ISO 4217 code such as EUR, not {:?}",
            input.currency
        )));
    }
    Ok(json!({
        "payment": ctx.handle,
        "amount": input.amount,
        "currency": input.currency,
        "description": input.description,
        "authorization": format!("auth_{}", ctx.call_id),
        "message": format!("Authorized {:.2} {} on the card.", input.amount, input.currency),
    }))
}

/// Charges the authorized amount, unless it is over the card limit the plugin is configured
/// with: then the capture is declined (a tool error, which fires `PAYMENT_FAILED`).
fn capture(ctx: &CallContext) -> Result<Value, ToolError> {
    let amount = ctx.context["amount"].as_f64().unwrap_or(0.0);
    if let Some(limit) = card_limit()
        && amount > limit
    {
        return Err(ToolError::failed(format!(
            "the card issuer declined the capture: {amount:.2} is over the card's limit of \
             {limit:.2}. The payment is now declined; void the authorization to release it."
        )));
    }
    Ok(json!({"payment": ctx.handle, "amount": amount,
        "message": "Payment captured: the reserved amount was charged."}))
}

/// `TURNSTILE_PLUGIN_PAYMENT_CARD_LIMIT`, as a number (none, or not a number: no limit).
fn card_limit() -> Option<f64> {
    turnstile_plugin::plugin_config()
        .get("card_limit")?
        .as_str()?
        .trim()
        .parse()
        .ok()
}

/// Refunds the payment, with a note to the customer: drafted by the client's model when the
/// client can sample (ABI 1.4; asked before anything happens, so the run before the answer
/// did nothing), else a plain one.
fn refund(input: Refund, ctx: &CallContext) -> Result<Value, ToolError> {
    let reason = input.reason.trim();
    if reason.is_empty() {
        return Err(ToolError::bad_input("reason must not be empty"));
    }
    let amount = ctx.context["amount"].as_f64().unwrap_or(0.0);
    let drafted = if ctx.can_ask(InputKind::Sampling) {
        let draft = ctx.ask(
            "customer_note",
            InputRequest::sample(
                format!(
                    "In two short, friendly sentences, tell a customer that their card payment of \
                     {amount:.2} was refunded in full. The reason: {reason}."
                ),
                120,
            ),
        )?;
        draft["content"]["text"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_owned()
    } else {
        String::new()
    };
    let note = if drafted.is_empty() {
        format!("Your payment of {amount:.2} was refunded in full ({reason}).")
    } else {
        drafted
    };
    Ok(json!({
        "payment": ctx.handle,
        "reason": reason,
        "refund": format!("re_{}", ctx.call_id),
        "note": note,
        "message": "Payment refunded in full.",
    }))
}

fn status(ctx: &CallContext) -> Status {
    let next = match ctx.state.as_str() {
        Some("new") => "authorize it",
        Some("authorized") => "capture or void it",
        Some("declined") => "void it: the capture was declined",
        Some("captured") => "refund it if needed",
        Some("refunded" | "voided") => "nothing: the payment is closed",
        Some("expired") => {
            "nothing: the authorization expired before it was captured; authorize a new payment"
        }
        _ => "unknown",
    };
    Status {
        state: ctx.state.clone(),
        next: next.to_owned(),
        message: format!("Payment is in state {}; next step: {next}.", ctx.state),
        payment: ctx.handle.clone(),
    }
}

#[cfg(test)]
mod tests {
    use turnstile_plugin::{
        Plugin,
        testing::{bindings, built, context},
    };

    use super::*;

    #[test]
    fn manifest_binds_every_transition_of_the_machine() {
        let manifest = built(toolkit()).manifest();
        assert_eq!(
            bindings(&manifest),
            [
                ("payment.authorize", "new".to_owned(), Some("AUTHORIZE")),
                ("payment.capture", "authorized".to_owned(), Some("CAPTURE")),
                (
                    "payment.void",
                    "authorized,declined".to_owned(),
                    Some("VOID")
                ),
                ("payment.refund", "captured".to_owned(), Some("REFUND")),
                ("payment.status", String::new(), None),
            ]
        );
        assert_eq!(
            manifest.workflows,
            [machine(DEFAULT_AUTHORIZATION_EXPIRY_MS)]
        );
        let policy = &manifest.prompts[0];
        assert_eq!(
            (policy.name.as_str(), policy.states.as_slice()),
            ("payment.refund_policy", ["captured".to_owned()].as_slice())
        );
        assert_eq!(policy.text.as_deref(), Some(REFUND_POLICY));
    }

    #[test]
    fn the_authorization_expiry_comes_from_the_configuration() {
        assert_eq!(
            authorization_expiry_ms(&Value::Null),
            Ok(DEFAULT_AUTHORIZATION_EXPIRY_MS)
        );
        assert_eq!(
            authorization_expiry_ms(&json!({"authorization_expiry_ms": "250"})),
            Ok(250)
        );
        for bad in ["0", "never", "-1"] {
            let refused =
                authorization_expiry_ms(&json!({"authorization_expiry_ms": bad})).unwrap_err();
            assert!(
                refused.contains("TURNSTILE_PLUGIN_PAYMENT_AUTHORIZATION_EXPIRY_MS"),
                "{refused}"
            );
        }
        let manifest = toolkit_with(250).build().unwrap().manifest();
        assert_eq!(manifest.workflows[0]["delays"]["authorizationExpiry"], 250);
    }

    #[test]
    fn the_authorize_schema_carries_its_constraints() {
        let manifest = built(toolkit()).manifest();
        assert_eq!(
            manifest.tools[0].input_schema,
            json!({
                "type": "object",
                "properties": {
                    "amount": {"type": "number", "exclusiveMinimum": 0,
                        "description": "Amount to reserve, greater than zero."},
                    "currency": {"type": "string", "pattern": "^[A-Z]{3}$",
                        "description": "ISO 4217 currency code, e.g. EUR."},
                    "description": {"type": "string", "description": "What the payment is for."}
                },
                "required": ["amount", "currency"]
            })
        );
    }

    #[test]
    fn authorize_validates_and_reports() {
        let plugin = built(toolkit());
        let out = plugin
            .call(
                "payment.authorize",
                json!({"amount": 10, "currency": "EUR"}),
                &context("pay-1", "new"),
            )
            .unwrap();
        assert_eq!(out["authorization"], "auth_c1");
        for bad in [
            json!({"amount": 10, "currency": "eur"}),
            json!({"amount": -1, "currency": "EUR"}),
            json!({"amount": 10}),
        ] {
            let err = plugin
                .call("payment.authorize", bad, &context("pay-1", "new"))
                .unwrap_err();
            assert!(matches!(err, ToolError::BadInput(_)), "{err:?}");
        }
    }

    #[test]
    fn refund_needs_a_reason() {
        let plugin = built(toolkit());
        let err = plugin
            .call("payment.refund", json!({}), &context("pay-1", "captured"))
            .unwrap_err();
        assert!(matches!(err, ToolError::BadInput(_)));
        let out = plugin
            .call(
                "payment.refund",
                json!({"reason": "dup"}),
                &context("pay-1", "captured"),
            )
            .unwrap();
        assert_eq!(out["refund"], "re_c1");
    }

    /// A client that can sample is asked to draft the customer's note, and the refund runs only
    /// with the draft; one that cannot gets the plain note at once.
    #[test]
    fn a_refund_asks_the_clients_model_for_the_note_where_it_can() {
        let plugin = built(toolkit());
        let refund = |asking: Value| {
            let ctx = CallContext {
                context: json!({"amount": 40}),
                asking,
                ..context("pay-1", "captured")
            };
            plugin.call("payment.refund", json!({"reason": "duplicate"}), &ctx)
        };
        let Err(ToolError::NeedsInput(requests)) =
            refund(json!({"canAsk": ["sampling"], "responses": {}}))
        else {
            panic!("a sampling client is asked first");
        };
        assert_eq!(
            requests["customer_note"]["method"],
            "sampling/createMessage"
        );
        let drafted = refund(
            json!({"canAsk": ["sampling"], "responses": {"customer_note":
            {"role": "assistant", "content": {"type": "text", "text": "Sorry! Refunded."}}}}),
        )
        .unwrap();
        assert_eq!(drafted["note"], "Sorry! Refunded.");
        let plain = refund(Value::Null).unwrap();
        assert!(plain["note"].as_str().unwrap().contains("40.00"), "{plain}");
    }

    #[test]
    fn status_reads_the_context() {
        let out = built(toolkit())
            .call("payment.status", json!({}), &context("pay-1", "authorized"))
            .unwrap();
        assert_eq!(out["state"], "authorized");
        assert_eq!(out["next"], "capture or void it");
    }
}
