//! `export_plugin!(Type, constructor)`: a failing constructor fails `init` with its message
//! and hands out no instance.

use std::ptr;

use serde_json::Value;
use turnstile_plugin::{
    CallContext, Manifest, Plugin, ToolError,
    abi::{ABI_VERSION, PluginTableV1, RawBuffer, RawInitParams, Status},
};

struct NeedsConfig;

impl NeedsConfig {
    fn new() -> Result<NeedsConfig, String> {
        Err("no config file".to_owned())
    }
}

impl Plugin for NeedsConfig {
    fn manifest(&self) -> Manifest {
        Manifest::new("needs-config", "1")
    }

    fn call(&self, tool: &str, _input: Value, _ctx: &CallContext) -> Result<Value, ToolError> {
        Err(ToolError::UnknownTool(tool.to_owned()))
    }
}

turnstile_plugin::export_plugin!(NeedsConfig, NeedsConfig::new);

unsafe extern "C" {
    fn turnstile_plugin_v1() -> *const PluginTableV1;
}

#[test]
fn a_failing_constructor_fails_init_with_its_message() {
    // SAFETY: the symbol is generated above; it returns a pointer to a `static` table.
    let table = unsafe { &*turnstile_plugin_v1() };
    let params = RawInitParams {
        struct_size: size_of::<RawInitParams>(),
        host_abi_version: ABI_VERSION,
        config_json: ptr::null(),
    };
    let mut instance = ptr::null_mut();
    let mut error = RawBuffer::empty();
    // SAFETY: valid params and out-pointers, as `InitFn` requires.
    let status = unsafe { (table.init.unwrap())(&params, &mut instance, &mut error) };
    assert_eq!(status, Status::INTERNAL);
    assert!(instance.is_null());
    // SAFETY: the plugin wrote `len` bytes at `data`; freed once through the plugin.
    let message = unsafe {
        let bytes = std::slice::from_raw_parts(error.data, error.len).to_vec();
        (table.free_buffer.unwrap())(error.data, error.len);
        bytes
    };
    assert_eq!(message, br#"{"message":"no config file"}"#);
}
