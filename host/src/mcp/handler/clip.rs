//! What of a client's string an answer or a log line may repeat: a client controls its length,
//! and a megabyte of tool name echoed in an error, or in every log line about it, is its
//! megabyte twice.

use std::borrow::Cow;

/// The most characters of a client-supplied string that an error message or a log line repeats.
pub const MAX_ECHO_CHARS: usize = 128;

/// `text` as it may be echoed in an error or a log line: at most [`MAX_ECHO_CHARS`] characters,
/// then "…" if anything was cut. Borrowed when it is short enough already.
pub fn clip(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(MAX_ECHO_CHARS) {
        None => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!("{}…", &text[..end])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_strings_and_cuts_long_ones_on_a_character() {
        assert!(matches!(
            clip("invoice.submit"),
            Cow::Borrowed("invoice.submit")
        ));
        let exact = "é".repeat(MAX_ECHO_CHARS);
        assert_eq!(clip(&exact), exact);
        let long = "é".repeat(1_000_000);
        let clipped = clip(&long);
        assert_eq!(clipped.chars().count(), MAX_ECHO_CHARS + 1);
        assert!(clipped.ends_with("é…"));
    }
}
