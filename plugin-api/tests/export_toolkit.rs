//! `export_toolkit!`: the declaration is checked when the host loads the library, and one that
//! does not fit its machine fails `init` with every problem named, handing out no instance.

use std::ptr;

use serde_json::{Value, json};
use turnstile_plugin::{
    abi::{ABI_VERSION, PluginTableV1, RawBuffer, RawInitParams, Status},
    sdk::{NoInput, Toolkit, Workflow},
};

fn toolkit() -> Toolkit {
    let door = Workflow::new(json!({"id": "door", "initial": "closed", "states": {
        "closed": {"on": {"OPEN": "open"}}, "open": {"on": {"CLOSE": "closed"}}}}));
    Toolkit::new("door", "1").tool(
        door.action("door.open")
            .describe("Opens the door.")
            .bind_state("closed", "OPNE")
            .handle(|_: NoInput, _| Ok("opened")),
    )
}

turnstile_plugin::export_toolkit!(toolkit);

unsafe extern "C" {
    fn turnstile_plugin_v1() -> *const PluginTableV1;
}

#[test]
fn a_declaration_that_does_not_fit_its_machine_fails_init_naming_the_problem() {
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
    let message: Value = unsafe {
        let bytes = std::slice::from_raw_parts(error.data, error.len).to_vec();
        (table.free_buffer.unwrap())(error.data, error.len);
        serde_json::from_slice(&bytes).unwrap()
    };
    assert_eq!(
        message["message"],
        "plugin door declares tools that do not fit its workflows: tool door.open: no state of \
         workflow \"door\" takes event \"OPNE\""
    );
}
