//! Frames: how messages cross the pipes between the server and an isolated plugin's process.
//!
//! # Frame format
//!
//! A frame is a 4-byte **big-endian** unsigned length `N`, then `N` bytes of UTF-8 JSON holding
//! exactly one message (the types are in `protocol.rs`). Nothing separates frames; a stream is
//! frames back to back. `N` is at most [`MAX_FRAME`]: a reader refuses a longer frame before
//! reading (or allocating) its body, so a corrupted length cannot make either side allocate
//! gigabytes. A stream that ends between frames ended cleanly; one that ends inside a frame
//! (in its length or its body) is truncated, an error.
//!
//! The length prefix, not a newline, delimits frames so that a message may hold any text and
//! the reader knows the size before it reads; JSON keeps the messages readable in a hex dump
//! and reuses the serde types the host already has.
//!
//! This module owns only the byte format: it knows nothing of calls, processes or threads.

use std::io::{self, Read};

use serde::{Serialize, de::DeserializeOwned};

/// The largest frame body, in bytes: 64 MiB, far above `--max-result-bytes`' default (4 MiB),
/// so a result the host would accept always fits (the limit on results is checked after, by
/// `invoke`, with its own error for the client).
pub const MAX_FRAME: usize = 64 << 20;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream ended inside a frame.
    #[error("the stream ended inside a frame ({got} of {expected} bytes)")]
    Truncated { got: usize, expected: usize },
    /// The length prefix (or a message to send) is over [`MAX_FRAME`].
    #[error("a frame of {0} bytes is over the limit of {MAX_FRAME} bytes")]
    TooLarge(usize),
    /// The body is not JSON, or not a message of the expected type.
    #[error("a frame does not hold a valid message: {0}")]
    BadMessage(serde_json::Error),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// `message` as one frame: its length prefix and its JSON.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let mut frame = vec![0; 4];
    serde_json::to_writer(&mut frame, message).map_err(FrameError::BadMessage)?;
    let length = frame.len() - 4;
    if length > MAX_FRAME {
        return Err(FrameError::TooLarge(length));
    }
    // `MAX_FRAME` fits in a u32, so the cast loses nothing.
    frame[..4].copy_from_slice(&(length as u32).to_be_bytes());
    Ok(frame)
}

/// Reads the next frame's message. `Ok(None)`: the stream ended cleanly, between frames.
pub fn read<T: DeserializeOwned>(reader: &mut impl Read) -> Result<Option<T>, FrameError> {
    let mut prefix = [0u8; 4];
    let got = read_full(reader, &mut prefix)?;
    if got == 0 {
        return Ok(None);
    }
    if got < prefix.len() {
        return Err(FrameError::Truncated { got, expected: 4 });
    }
    let length = u32::from_be_bytes(prefix) as usize;
    if length > MAX_FRAME {
        return Err(FrameError::TooLarge(length));
    }
    let mut body = vec![0; length];
    let got = read_full(reader, &mut body)?;
    if got < length {
        return Err(FrameError::Truncated {
            got: 4 + got,
            expected: 4 + length,
        });
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(FrameError::BadMessage)
}

/// Fills `buffer` unless the stream ends first; returns how many bytes it read.
fn read_full(reader: &mut impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn frames(messages: &[Value]) -> Vec<u8> {
        messages
            .iter()
            .flat_map(|message| encode(message).unwrap())
            .collect()
    }

    #[test]
    fn frames_round_trip_back_to_back_and_end_cleanly() {
        let messages = [json!({"type": "cancel", "id": 7}), json!("a\nb"), json!([])];
        let bytes = frames(&messages);
        let first = messages[0].to_string().len() as u32;
        assert_eq!(
            &bytes[..4],
            &first.to_be_bytes(),
            "the length is big-endian"
        );
        let mut reader = bytes.as_slice();
        for message in &messages {
            assert_eq!(read::<Value>(&mut reader).unwrap().as_ref(), Some(message));
        }
        assert!(read::<Value>(&mut reader).unwrap().is_none(), "a clean end");
    }

    #[test]
    fn a_stream_ending_inside_a_frame_is_truncated() {
        let bytes = frames(&[json!({"id": 1})]);
        for cut in [1, 3, 4, bytes.len() - 1] {
            let error = read::<Value>(&mut &bytes[..cut]).unwrap_err();
            assert!(
                matches!(error, FrameError::Truncated { got, .. } if got == cut),
                "cut at {cut}: {error:?}"
            );
        }
    }

    #[test]
    fn an_oversized_frame_is_refused_before_its_body_is_read() {
        // A length just over the limit and no body at all: refused on the prefix alone.
        let prefix = (MAX_FRAME as u32 + 1).to_be_bytes();
        let error = read::<Value>(&mut prefix.as_slice()).unwrap_err();
        assert!(
            matches!(error, FrameError::TooLarge(n) if n == MAX_FRAME + 1),
            "{error:?}"
        );
        let huge = Value::String("x".repeat(MAX_FRAME));
        assert!(matches!(encode(&huge), Err(FrameError::TooLarge(_))));
    }

    #[test]
    fn a_frame_that_is_not_the_expected_json_is_a_bad_message() {
        let mut bytes = 5u32.to_be_bytes().to_vec();
        bytes.extend_from_slice(b"{\"a\":");
        let error = read::<Value>(&mut bytes.as_slice()).unwrap_err();
        assert!(matches!(error, FrameError::BadMessage(_)), "{error:?}");
        // Valid JSON, but not the message type asked for.
        let bytes = frames(&[json!({"id": "seven"})]);
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)] // Only its shape matters.
        struct Numbered {
            id: u64,
        }
        let error = read::<Numbered>(&mut bytes.as_slice()).unwrap_err();
        assert!(
            error.to_string().contains("invalid type"),
            "the error says what is wrong: {error}"
        );
    }
}
