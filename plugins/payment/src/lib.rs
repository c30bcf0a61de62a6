//! Turnstile example plugin: a card-payment workflow.
//!
//! ```text
//! new --AUTHORIZE--> authorized --CAPTURE--> captured --REFUND--> refunded (final)
//!                        \--VOID--> voided (final)
//! ```
//!
//! The gate is what makes this safe to hand to an agent: a capture is not on the menu until an
//! authorization succeeded, a refund not until the money was captured, and after a void or a
//! refund nothing is. Refunds are full refunds: the workflow has one `refunded` state, and
//! partial refunds would need a counter the machine does not model.
//!
//! Like the invoice plugin it is stateless: it talks to no payment provider (this is an
//! example) and keeps nothing in memory, because the host may run several processes against
//! one store. References it returns are derived from the call id.

use serde::Deserialize;
use serde_json::{Value, json};
use turnstile_plugin_api::{CallContext, Manifest, Plugin, ToolError, ToolManifest, parse_input};

/// The plugin value; stateless, see the crate docs.
#[derive(Default)]
pub struct Payment;

turnstile_plugin_api::export_plugin!(Payment);

/// Every tool here computes its answer from the call alone, in microseconds, without I/O: the
/// host may run it on the request's own thread (see `ToolManifest::quick_ms`).
const QUICK_MS: u32 = 2;

/// The workflow machine, XState v5 JSON.
fn machine() -> Value {
    json!({
        "id": "payment",
        "initial": "new",
        "states": {
            "new": {"on": {"AUTHORIZE": "authorized"}},
            "authorized": {"on": {"CAPTURE": "captured", "VOID": "voided"}},
            "captured": {"on": {"REFUND": "refunded"}},
            "refunded": {"type": "final"},
            "voided": {"type": "final"}
        }
    })
}

impl Plugin for Payment {
    fn manifest(&self) -> Manifest {
        Manifest::new("payment", env!("CARGO_PKG_VERSION"))
            .workflow(machine())
            .tool(
                ToolManifest::new(
                    "payment.authorize",
                    "Authorize a card payment: reserve `amount` (a positive number) in \
                     `currency` (ISO 4217 code such as EUR) on the customer's card. Nothing is \
                     charged yet; afterwards either capture the payment or void it.",
                    json!({
                        "type": "object",
                        "properties": {
                            "amount": {"type": "number", "exclusiveMinimum": 0,
                                "description": "Amount to reserve, greater than zero."},
                            "currency": {"type": "string", "pattern": "^[A-Z]{3}$",
                                "description": "ISO 4217 currency code, e.g. EUR."},
                            "description": {"type": "string",
                                "description": "What the payment is for."}
                        },
                        "required": ["amount", "currency"]
                    }),
                )
                .compact("Authorize (reserve) a card payment: amount, currency.")
                .workflow("payment", ["new"])
                .transition("AUTHORIZE")
                .quick(QUICK_MS),
            )
            .tool(
                ToolManifest::new(
                    "payment.capture",
                    "Capture the authorized payment: actually charge the reserved amount. After \
                     a capture the payment can only be refunded.",
                    json!({"type": "object", "properties": {}}),
                )
                .compact("Charge the authorized amount.")
                .workflow("payment", ["authorized"])
                .transition("CAPTURE")
                .quick(QUICK_MS),
            )
            .tool(
                ToolManifest::new(
                    "payment.void",
                    "Void the authorization: release the reserved amount without charging \
                     anything. Final: the payment is closed afterwards.",
                    json!({
                        "type": "object",
                        "properties": {
                            "reason": {"type": "string", "description": "Why it is voided."}
                        }
                    }),
                )
                .compact("Release the authorization uncharged.")
                .workflow("payment", ["authorized"])
                .transition("VOID")
                .quick(QUICK_MS),
            )
            .tool(
                ToolManifest::new(
                    "payment.refund",
                    "Refund the captured payment in full, giving the reason. Final: the payment \
                     is closed afterwards. Partial refunds are not supported.",
                    json!({
                        "type": "object",
                        "properties": {
                            "reason": {"type": "string", "minLength": 1,
                                "description": "Why the money is returned."}
                        },
                        "required": ["reason"]
                    }),
                )
                .compact("Refund the captured payment in full (reason).")
                .workflow("payment", ["captured"])
                .transition("REFUND")
                .quick(QUICK_MS),
            )
            .tool(
                ToolManifest::new(
                    "payment.status",
                    "Report the payment's current state (new, authorized, captured, refunded or \
                     voided) and what can happen next. Changes nothing.",
                    json!({"type": "object", "properties": {}}),
                )
                .compact("Show the payment's state.")
                .workflow("payment", Vec::<String>::new())
                .quick(QUICK_MS),
            )
    }

    fn call(&self, tool: &str, input: Value, ctx: &CallContext) -> Result<Value, ToolError> {
        match tool {
            "payment.authorize" => authorize(parse_input(input)?, ctx),
            "payment.capture" => Ok(step(
                ctx,
                "CAPTURE",
                "captured",
                "Payment captured: the \
                 reserved amount was charged. Next: refund it if needed.",
            )),
            "payment.void" => {
                let VoidInput { reason } = parse_input(input)?;
                let mut out = step(
                    ctx,
                    "VOID",
                    "voided",
                    "Authorization voided: nothing was \
                     charged. The payment is closed.",
                );
                out["reason"] = json!(reason);
                Ok(out)
            }
            "payment.refund" => {
                let RefundInput { reason } = parse_input(input)?;
                let reason = reason.trim();
                if reason.is_empty() {
                    return Err(ToolError::bad_input("reason must not be empty"));
                }
                let mut out = step(
                    ctx,
                    "REFUND",
                    "refunded",
                    "Payment refunded in full. The \
                     payment is closed.",
                );
                out["reason"] = json!(reason);
                out["refund"] = json!(format!("re_{}", ctx.call_id));
                Ok(out)
            }
            "payment.status" => Ok(status(ctx)),
            other => Err(ToolError::UnknownTool(other.to_owned())),
        }
    }
}

// Input structs tolerate unknown fields: the host adds properties of its own (the handle).

#[derive(Deserialize)]
struct AuthorizeInput {
    amount: f64,
    currency: String,
    description: Option<String>,
}

#[derive(Deserialize)]
struct VoidInput {
    reason: Option<String>,
}

#[derive(Deserialize)]
struct RefundInput {
    reason: String,
}

fn authorize(input: AuthorizeInput, ctx: &CallContext) -> Result<Value, ToolError> {
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
        "event": "AUTHORIZE",
        "status": "authorized",
        "amount": input.amount,
        "currency": input.currency,
        "description": input.description,
        "authorization": format!("auth_{}", ctx.call_id),
        "message": format!(
            "Authorized {:.2} {} on the card. Next: capture to charge it, or void to release it.",
            input.amount, input.currency
        ),
    }))
}

/// The output of a transition tool without inputs of its own.
fn step(ctx: &CallContext, event: &str, status: &str, message: &str) -> Value {
    json!({"payment": ctx.handle, "event": event, "status": status, "message": message})
}

fn status(ctx: &CallContext) -> Value {
    let next = match ctx.state.as_str() {
        Some("new") => "authorize it",
        Some("authorized") => "capture or void it",
        Some("captured") => "refund it if needed",
        Some("refunded" | "voided") => "nothing: the payment is closed",
        _ => "unknown",
    };
    json!({
        "payment": ctx.handle,
        "state": ctx.state,
        "next": next,
        "message": format!("Payment is in state {}; next step: {next}.", ctx.state),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(state: &str) -> CallContext {
        CallContext {
            call_id: "c1".into(),
            handle: "pay-1".into(),
            state: json!(state),
            ..CallContext::default()
        }
    }

    #[test]
    fn authorize_validates_and_reports() {
        let out = Payment
            .call(
                "payment.authorize",
                json!({"amount": 10, "currency": "EUR"}),
                &ctx("new"),
            )
            .unwrap();
        assert_eq!(out["status"], "authorized");
        assert_eq!(out["authorization"], "auth_c1");
        for bad in [
            json!({"amount": 10, "currency": "eur"}),
            json!({"amount": -1, "currency": "EUR"}),
        ] {
            let err = Payment
                .call("payment.authorize", bad, &ctx("new"))
                .unwrap_err();
            assert!(matches!(err, ToolError::BadInput(_)), "{err:?}");
        }
    }

    #[test]
    fn refund_needs_a_reason() {
        let err = Payment
            .call("payment.refund", json!({}), &ctx("captured"))
            .unwrap_err();
        assert!(matches!(err, ToolError::BadInput(_)));
        let out = Payment
            .call("payment.refund", json!({"reason": "dup"}), &ctx("captured"))
            .unwrap();
        assert_eq!(out["status"], "refunded");
    }

    #[test]
    fn manifest_binds_every_transition_of_the_machine() {
        let manifest = Payment.manifest();
        let bound: Vec<_> = manifest
            .tools
            .iter()
            .map(|t| {
                (
                    t.name.as_str(),
                    t.states.join(","),
                    t.transition.clone().unwrap_or_default(),
                )
            })
            .collect();
        let expected = [
            ("payment.authorize", "new", "AUTHORIZE"),
            ("payment.capture", "authorized", "CAPTURE"),
            ("payment.void", "authorized", "VOID"),
            ("payment.refund", "captured", "REFUND"),
            ("payment.status", "", ""),
        ];
        let expected: Vec<_> = expected
            .iter()
            .map(|(n, s, t)| (*n, s.to_string(), t.to_string()))
            .collect();
        assert_eq!(bound, expected);
        assert_eq!(manifest.workflows, [machine()]);
    }
}
