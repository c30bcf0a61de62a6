//! Who a request is from, whichever proof it brought (a token of the file, an OAuth access
//! token): one [`Principal`], the tenant its handle-keyed instances belong to, and its [`Role`].

use crate::actors::{Tenant, sha256_hex16};

/// Who a request is from, named by where its proof came from, so that no two sources can name
/// the same principal: `token:NAME` (a named token of the token file), `token:sha256:HEX` (a
/// bare token, by a digest of the token), `oauth:ISSUER#SUB` (an OAuth access token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

impl Principal {
    /// The principal of the token file's line `NAME TOKEN`.
    pub fn named_token(name: &str) -> Principal {
        Principal(format!("token:{name}"))
    }

    /// The principal of a bare token: the first 16 bytes of its SHA-256, in hex.
    pub fn bare_token(token: &str) -> Principal {
        Principal(format!("token:sha256:{}", sha256_hex16(token)))
    }

    /// The principal of an OAuth access token of `issuer` for `sub`.
    pub fn oauth(issuer: &str, sub: &str) -> Principal {
        Principal(format!("oauth:{issuer}#{sub}"))
    }

    /// The tenant its handle-keyed instances belong to (`actors::Tenant`). An OAuth principal
    /// keeps the tenant its `sub` always had, so instances made before principals were
    /// namespaced stay its own (one issuer per server). A token principal's tenant is its
    /// namespaced name behind a NUL byte, which no accepted `sub` holds (`oauth.rs` refuses
    /// control characters), so a `sub` can never reach a token's instances; instances of the
    /// old token forms are moved to it at start (`commands/serve.rs`).
    pub fn tenant(&self) -> Tenant {
        match self
            .0
            .strip_prefix("oauth:")
            .and_then(|rest| rest.split_once('#'))
        {
            Some((_, sub)) => Tenant::of(sub),
            None => Tenant::of(&format!("\0{}", self.0)),
        }
    }
}

/// What a principal may do besides using tools: an operator may also use the console
/// (`console/`), which sees and fixes every principal's instances. Given by the proof: a token
/// line marked `operator` in the token file, or an OAuth access token carrying the scope named
/// by `--operator-scope`. An operator's is put in a request's extensions beside its
/// [`Principal`] (a request without one is a client's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Role {
    /// Uses tools, prompts and resources: every client.
    #[default]
    Client,
    /// Also operates the server through the console.
    Operator,
}
