//! What a request says it accepts (`Accept`), read the way rmcp reads it, so that the fast
//! path and the event stream take only what rmcp would let through.

use axum::http::{HeaderMap, header};

/// Whether `Accept` names each of `media` (exactly: a wildcard or a weight of 0 is left to
/// rmcp).
pub fn accepts(headers: &HeaderMap, media: &[&str]) -> bool {
    let Some(accept) = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
    else {
        return false;
    };
    media.iter().all(|media| {
        accept.split(',').any(|range| {
            let mut pieces = range.split(';');
            pieces
                .next()
                .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(media))
                && pieces.all(|parameter| !parameter.trim().starts_with("q=0"))
        })
    })
}
