//! Who a request is from: bearer tokens from a file (`bearer.rs`) and OAuth access tokens
//! (`oauth.rs`), both giving one [`Principal`](bearer::Principal).

pub mod bearer;
pub mod oauth;
