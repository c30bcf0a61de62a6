/*
 * turnstile_plugin.h — Turnstile plugin ABI, version 1.
 *
 * The C view of the types in the `turnstile-plugin-abi` crate (plugin-api/abi/src/abi.rs); the two
 * are kept identical, field by field, and `plugin-api/abi/tests/header.rs` checks sizes and offsets.
 *
 * A plugin is a shared library exporting two symbols:
 *
 *   uint32_t turnstile_plugin_abi_version(void);          returns TURNSTILE_PLUGIN_ABI_VERSION
 *   const TurnstilePluginV1 *turnstile_plugin_v1(void);   returns a static function table
 *
 * The host loads it with RTLD_NOW | RTLD_LOCAL, calls turnstile_plugin_abi_version first and
 * touches nothing else unless it answers 1, then calls turnstile_plugin_v1, checks struct_size,
 * calls init, then manifest, then call (many times, concurrently), then destroy, then unloads.
 *
 * Rules:
 *  - Every struct starts with struct_size, set by the side that allocates it to sizeof(struct).
 *    Readers check it before reading other fields; within major version 1 fields are only
 *    appended, and every field added after ABI 1.0 is optional.
 *  - How ABI 1 grows: a reader refuses a struct smaller than its ABI 1.0 layout (the
 *    TURNSTILE_*_V1_0_SIZE constants), never one merely smaller than the header it was compiled
 *    with; it reads a later field only when TURNSTILE_HAS_FIELD says struct_size covers it, and
 *    treats a missing field or a NULL function pointer as "not supported". So a new host runs old
 *    plugins, and a new plugin runs on an old host without the newer features.
 *    Added since 1.0: TurnstileCallContext.host (1.1, host services), TurnstileInitParams.config_json
 *    (1.1, the plugin's configuration), TurnstileCallContext.context_json (1.2, the instance's
 *    machine context), TurnstilePluginV1.read (1.3, the content of prompts and resources; NULL:
 *    the plugin serves only the static "text" of its manifest's prompts and resources),
 *    TurnstileCallContext.idempotency_key (1.4, a key to pass on to outside services),
 *    TurnstileCallContext.asking_json and TURNSTILE_NEEDS_INPUT (1.4, asking the person).
 *  - Strings from the host are NUL-terminated UTF-8, borrowed for the duration of the call.
 *  - Each side frees only what it allocated. Output buffers are allocated by the plugin and
 *    handed back to its free_buffer by the host.
 *  - `call` is invoked concurrently from several host threads with the same instance: the
 *    instance must be thread-safe.
 *  - No C++ exception or Rust panic may propagate out of any entry point.
 *
 * Output JSON convention (UTF-8, not NUL-terminated, length in TurnstileBuffer.len):
 *  - TURNSTILE_OK: any JSON value, the tool's result. The host shows it as the tool result's
 *    text and, when it is an object, as its structuredContent.
 *  - any other status: {"message": "..."}. For TURNSTILE_TOOL_ERROR and TURNSTILE_BAD_INPUT the
 *    host returns an isError tool result with that message; the other statuses are plugin faults
 *    the host reports as its own errors.
 *
 * The manifest (the output of `manifest`) is JSON:
 *   {"name": "...", "version": "...", "workflows": [<XState v5 machine JSON>, ...],
 *    "tools": [{"name", "description", "compact_description"?, "input_schema",
 *               "workflow"?, "states"?: [...], "transition"?, "title"?,
               "annotations"?: {"readOnlyHint"?, "destructiveHint"?, "idempotentHint"?,
                                "openWorldHint"?},
               "output_schema"?: <JSON Schema of the structured output, checked by the host>,
               "usage_note"?: false (leave out the host's note on when the tool can be used)}],
    "prompts"?: [{"name", "title"?, "description", "arguments"?: [{"name", "description"?,
                  "required"?}], "workflow"?, "states"?: [...], "text"?}],
    "resources"?: [{"uri", "name", "title"?, "description"?, "mime_type"?, "workflow"?,
                    "states"?: [...], "text"?}],
    "resource_templates"?: [{"uri_template", "name", "title"?, "description"?, "mime_type"?,
                             "workflow"?, "states"?: [...]}],
    "guards"?: ["<name of a guard this plugin's guard entry point decides>", ...],
    "isolate"?: true}
 * Prompts and resources are gated by workflow state exactly as tools are. A template with the
 * variable {handle} names a workflow instance (see TurnstilePluginV1.read).
 * "isolate": true asks the host to run the plugin in a process of its own (a crash fails only
 * the calls in flight, and the process is restarted); leave it out to run inside the server.
 * Output with content blocks: a TURNSTILE_OK output object may carry "_content": [MCP content
 * blocks: {"type":"text","text"}, {"type":"image","data","mimeType"}, {"type":"audio",...},
 * {"type":"resource","resource":{...}}]; the rest of the object is the structured content.
 * Unknown fields are rejected.
 */
#ifndef TURNSTILE_PLUGIN_H
#define TURNSTILE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TURNSTILE_PLUGIN_ABI_VERSION 1u
#define TURNSTILE_PLUGIN_ABI_VERSION_SYMBOL "turnstile_plugin_abi_version"
#define TURNSTILE_PLUGIN_ENTRY_SYMBOL_V1 "turnstile_plugin_v1"

/* Status codes returned by init, manifest and call. */
typedef int32_t TurnstileStatus;
#define TURNSTILE_OK ((TurnstileStatus)0)           /* output: the result, any JSON value     */
#define TURNSTILE_TOOL_ERROR ((TurnstileStatus)1)   /* the tool ran and failed                */
#define TURNSTILE_BAD_INPUT ((TurnstileStatus)2)    /* arguments or context unusable          */
#define TURNSTILE_UNKNOWN_TOOL ((TurnstileStatus)3) /* no tool of that name                   */
#define TURNSTILE_PANIC ((TurnstileStatus)4)        /* the plugin hit a bug                   */
#define TURNSTILE_INTERNAL ((TurnstileStatus)5)     /* protocol failure (bad struct, init...) */
/* ABI 1.4: the tool needs input before it can go on. The output is
 * {"message": "...", "inputRequests": {"<key>": {"method": "...", "params": {...}}}}, each request
 * an MCP elicitation/create, sampling/createMessage or roots/list. Return it only when the host
 * passed asking_json; the host asks, then calls the tool again with the answers under
 * asking_json's "responses". A handler must be safe to run again up to the point where it asks. */
#define TURNSTILE_NEEDS_INPUT ((TurnstileStatus)6)

/*
 * A byte buffer allocated by the plugin and freed by the plugin.
 * The host allocates the struct, sets struct_size, data = NULL, len = 0, and passes it as an
 * out-parameter. The plugin may set data/len to memory it allocated and touches nothing else.
 * The host copies the bytes, then calls free_buffer(data, len) once if data is non-NULL.
 */
typedef struct TurnstileBuffer {
    size_t struct_size; /* host: sizeof(TurnstileBuffer) */
    uint8_t *data;      /* plugin-owned                  */
    size_t len;         /* bytes at data                 */
} TurnstileBuffer;

/* What the host tells init. Host-owned, read-only, borrowed for the duration of init. */
typedef struct TurnstileInitParams {
    size_t struct_size;        /* host: sizeof(TurnstileInitParams)             */
    uint32_t host_abi_version; /* the ABI version the host speaks (1)           */
    /* ABI 1.1, read only if TURNSTILE_HAS_FIELD(params, TurnstileInitParams, config_json): the
     * plugin's configuration as a JSON object, or NULL. May hold secrets: never log it. */
    const char *config_json;
} TurnstileInitParams;

/*
 * What the host offers a plugin during one call (ABI 1.1). Host-owned, read-only, borrowed for
 * the duration of call. Pass `call` to each function; each may be NULL (not offered). The
 * functions may be used from any thread while the call runs; after it returned they do nothing
 * and return TURNSTILE_INTERNAL (or 0), since `call` is an id, not a pointer.
 */
typedef struct TurnstileHostServices {
    size_t struct_size; /* host: sizeof(TurnstileHostServices) */
    const void *call;   /* the host's name for this call; opaque */
    /* Logs to the client (notifications/message) if the session's level lets it through. level:
     * "debug" "info" "notice" "warning" "error" "critical" "alert" "emergency"; logger may be
     * NULL; data_json is any JSON value. TURNSTILE_BAD_INPUT for a bad level or JSON. */
    TurnstileStatus (*log)(const void *call, const char *level, const char *logger,
                           const char *data_json);
    /* Reports progress (notifications/progress) if the client asked for it. total < 0 means
     * unknown; message may be NULL. */
    TurnstileStatus (*progress)(const void *call, double progress, double total,
                                const char *message);
    /* 1 once the client cancelled the call or its deadline passed, else 0. Stop early with a
     * tool error: a call that fails fires no transition. */
    int32_t (*is_cancelled)(const void *call);
} TurnstileHostServices;

/* What read (ABI 1.3) is asked for. */
typedef int32_t TurnstileReadKind;
#define TURNSTILE_READ_PROMPT ((TurnstileReadKind)1)   /* prompts/get    */
#define TURNSTILE_READ_RESOURCE ((TurnstileReadKind)2) /* resources/read */
/* ABI 1.4: completion/complete of one argument of a prompt or template variable. */
#define TURNSTILE_READ_COMPLETION ((TurnstileReadKind)3)

/* The context of one call. Host-owned, read-only, borrowed for the duration of call. */
typedef struct TurnstileCallContext {
    size_t struct_size;     /* host: sizeof(TurnstileCallContext)                              */
    const char *call_id;    /* unique id of this call                                          */
    const char *handle;     /* workflow instance handle ("" for a tool bound to no workflow)   */
    const char *state_json; /* current state value as JSON: "\"draft\"", "{\"a\":\"b\"}", "null" */
    /* ABI 1.1, read only if TURNSTILE_HAS_FIELD(ctx, TurnstileCallContext, host): the host's
     * services for this call, or NULL. */
    const TurnstileHostServices *host;
    /* ABI 1.2, read only if TURNSTILE_HAS_FIELD(ctx, TurnstileCallContext, context_json): the
     * instance's machine context before this call as JSON, or NULL when there is no instance. */
    const char *context_json;
    /* ABI 1.4, read only if TURNSTILE_HAS_FIELD(ctx, TurnstileCallContext, idempotency_key): a
     * key that is the same for every run of this tool on this instance at its current version,
     * on any server, and different for anything else ("" for a tool bound to no workflow). Pass
     * it as the idempotency key of the outside services the handler calls (a payment
     * provider's): a transition a paused server started and another took over then acts once. */
    const char *idempotency_key;
    /* ABI 1.4, read only if TURNSTILE_HAS_FIELD(ctx, TurnstileCallContext, asking_json): what the
     * handler may ask for and what it has been told, as JSON {"canAsk": [...], "responses":
     * {"<key>": answer}}, or NULL when the host cannot ask for this call (then never return
     * TURNSTILE_NEEDS_INPUT). canAsk lists "elicitation.form", "elicitation.url", "sampling" and
     * "roots" as the client can answer them; responses holds the answers to the requests
     * earlier runs of this call returned with TURNSTILE_NEEDS_INPUT, and, when the tool's
     * binding has a person confirm and they accepted, "turnstile.confirm": {"action": "accept",
     * "content": {...}} with the form's fields the host kept. */
    const char *asking_json;
} TurnstileCallContext;

/* Whether the struct at ptr (whose struct_size the other side set) holds `field` of type T. */
#define TURNSTILE_HAS_FIELD(ptr, T, field) \
    ((ptr)->struct_size >= offsetof(T, field) + sizeof(((T *)0)->field))

/* The ABI 1.0 sizes: the smallest struct of each kind a reader accepts. */
#define TURNSTILE_CALL_CONTEXT_V1_0_SIZE offsetof(TurnstileCallContext, host)
#define TURNSTILE_INIT_PARAMS_V1_0_SIZE \
    (offsetof(TurnstileInitParams, host_abi_version) + sizeof(uint32_t))
#define TURNSTILE_PLUGIN_TABLE_V1_0_SIZE \
    (offsetof(TurnstilePluginV1, free_buffer) + sizeof(void (*)(uint8_t *, size_t)))

/*
 * The function table. Plugin-owned (normally a static), read-only for the host, valid until the
 * library is unloaded. The function pointers of ABI 1.0 (init to free_buffer) must be non-NULL;
 * later ones may be NULL (not supported).
 */
typedef struct TurnstilePluginV1 {
    size_t struct_size;   /* plugin: sizeof(TurnstilePluginV1) */
    uint32_t abi_version; /* TURNSTILE_PLUGIN_ABI_VERSION      */

    /* Creates the instance; writes an opaque pointer (may be NULL) to *out_instance. On failure
     * may write {"message"} to out_error, and destroy will not be called. */
    TurnstileStatus (*init)(const TurnstileInitParams *params, void **out_instance,
                            TurnstileBuffer *out_error);
    /* Drops the instance, after every call has returned, before the library is unloaded. */
    void (*destroy)(void *instance);
    /* Writes the manifest JSON to out. Called once, after init. */
    TurnstileStatus (*manifest)(void *instance, TurnstileBuffer *out);
    /* Runs one tool; tool and input_json are NUL-terminated, borrowed. Thread-safe. */
    TurnstileStatus (*call)(void *instance, const char *tool, const char *input_json,
                            const TurnstileCallContext *ctx, TurnstileBuffer *out);
    /* Frees a buffer this plugin wrote; never called with NULL. Must not need the instance. */
    void (*free_buffer)(uint8_t *data, size_t len);
    /* ABI 1.2, optional (NULL: no named guards; the host reads it only when struct_size covers
     * it): decides the guard `name` listed in the manifest's "guards" for params_json (the
     * guard's params, "null" when none), context_json (the instance's context) and event_json
     * (the whole event). On TURNSTILE_OK writes `true` or `false` to out; anything else counts as
     * false. Must be pure and quick: it runs while the host decides a transition. */
    TurnstileStatus (*guard)(void *instance, const char *name, const char *params_json,
                             const char *context_json, const char *event_json,
                             TurnstileBuffer *out);
    /* ABI 1.3, optional (NULL: none). Produces the content of a prompt or resource the manifest
     * declares, for the instance ctx describes (ctx->host is NULL). name is the prompt's name, or
     * the resource's or template's manifest name. request_json:
     *   TURNSTILE_READ_PROMPT:   {"arguments": {"<name>": "<string>", ...}}
     *   TURNSTILE_READ_RESOURCE: {"uri": "<the URI read>", "variables": {"<var>": "<string>"}}
     *   TURNSTILE_READ_COMPLETION (1.4): {"ref": "prompt"|"resource", "argument": {"name",
     *              "value"}, "arguments": {"<other>": "<string>"}}
     * Output (TURNSTILE_OK):
     *   prompt:   {"description"?, "messages": [{"role": "user"|"assistant",
     *              "content": <MCP content block>}]}, or a JSON string (one user text message)
     *   resource: {"contents": [{"uri"?, "mimeType"?, "text" | "blob" (base64)}]}, a JSON
     *             string (one text content of the URI read, with the declared mime_type), or
     *             any other JSON value (one text content holding it, application/json)
     *   completion: {"values": ["<string>", ...], "total"?, "hasMore"?} or a list of strings
     * TURNSTILE_UNKNOWN_TOOL: no such prompt or resource (for a completion: none to offer); TURNSTILE_TOOL_ERROR and
     * TURNSTILE_BAD_INPUT: {"message"} the client sees. Changes nothing; thread-safe. */
    TurnstileStatus (*read)(void *instance, TurnstileReadKind kind, const char *name,
                            const char *request_json, const TurnstileCallContext *ctx,
                            TurnstileBuffer *out);
} TurnstilePluginV1;

/* Marks the two exported symbols visible even when compiling with -fvisibility=hidden (which
 * keeps every other symbol of a C plugin private, as RTLD_LOCAL intends). */
#if defined(_WIN32)
#define TURNSTILE_PLUGIN_EXPORT __declspec(dllexport)
#else
#define TURNSTILE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* The two symbols every plugin exports. */
TURNSTILE_PLUGIN_EXPORT uint32_t turnstile_plugin_abi_version(void);
TURNSTILE_PLUGIN_EXPORT const TurnstilePluginV1 *turnstile_plugin_v1(void);

#ifdef __cplusplus
}
#endif

#endif /* TURNSTILE_PLUGIN_H */
