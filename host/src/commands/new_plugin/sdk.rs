//! The plugin SDK this binary carries, for a new Rust plugin to build on where this source tree
//! is not: the crates `turnstile-plugin`, `turnstile-plugin-abi` and `turnstile-statechart` as
//! they were when it was built, their manifests made to stand alone (`host/build.rs` reads them
//! in and says how).
//!
//! It owns which files a new plugin's `turnstile-sdk/` holds and how its manifest names the SDK;
//! it must not write anything itself (`new_plugin.rs` writes, refusing to overwrite).

/// What `host/build.rs` wrote: `VERSION` and `FILES`.
mod carried {
    include!(concat!(env!("OUT_DIR"), "/carried_sdk.rs"));
}

/// The new plugin's folder holding the SDK, one folder per crate. The plugin's workspace leaves
/// it out: the SDK's crates are its dependencies, not its members.
pub const FOLDER: &str = "turnstile-sdk";

/// The version of the carried `turnstile-plugin`.
pub const VERSION: &str = carried::VERSION;

/// The dependency line of a new plugin's `Cargo.toml` on the carried SDK: its version with its
/// path, so that taking it from a registry once it is there is one edit.
pub fn dependency() -> String {
    format!(
        "# The SDK, carried by the `turnstile` that wrote this crate ({FOLDER}/). Once it is on a\n\
         # registry, removing `path` takes it from there.\n\
         turnstile-plugin = {{ version = \"{VERSION}\", path = \"{FOLDER}/turnstile-plugin\" }}"
    )
}

/// Every carried file: its path in the new plugin, and its text.
pub fn files() -> impl Iterator<Item = (String, &'static str)> {
    carried::FILES
        .iter()
        .map(|(path, text)| (format!("{FOLDER}/{path}"), *text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_crates_are_carried_standing_alone() {
        let files: Vec<_> = files().collect();
        for krate in [
            "turnstile-plugin",
            "turnstile-plugin-abi",
            "turnstile-statechart",
        ] {
            let manifest = files
                .iter()
                .find(|(path, _)| *path == format!("{FOLDER}/{krate}/Cargo.toml"))
                .map(|(_, text)| *text)
                .unwrap_or_else(|| panic!("{krate}'s manifest is carried"));
            assert!(!manifest.contains("workspace"), "{manifest}");
            assert!(
                manifest.contains(&format!("name = \"{krate}\"")),
                "{manifest}"
            );
            assert!(
                files
                    .iter()
                    .any(|(path, _)| *path == format!("{FOLDER}/{krate}/src/lib.rs"))
            );
        }
        let sdk = files
            .iter()
            .find(|(path, _)| path.ends_with("/turnstile-plugin/Cargo.toml"))
            .unwrap()
            .1;
        assert!(
            sdk.contains(&format!(
                "turnstile-plugin-abi = {{ version = \"{VERSION}\", path = \"../turnstile-plugin-abi\" }}"
            )),
            "{sdk}"
        );
        assert!(files.iter().any(|(path, _)| path.ends_with("LICENSE")));
    }
}
