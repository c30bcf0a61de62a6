//! Who a request is from: bearer tokens from a file (`bearer.rs`) and OAuth access tokens
//! (`oauth.rs`), both giving one [`Principal`](principal::Principal) (`principal.rs`).

pub mod bearer;
pub mod oauth;
pub mod principal;
