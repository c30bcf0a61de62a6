/*
 * Turnstile example plugin written in C: a multi-step, destructive schema migration.
 *
 *   planned --DRY_RUN--> dry_run_ok --BACKUP--> backed_up --APPLY--> applied --VERIFY--> verified
 *                                                   ^                   |
 *                                                   +----ROLLBACK-------+
 *
 * The point of gating it: `migration.apply` is not even on the agent's menu until a dry run
 * passed and a backup exists, and `migration.rollback` only appears once something was applied.
 *
 * This file is the proof that the ABI is plain C: it includes turnstile_plugin.h and nothing
 * from Rust. The manifest is a static JSON string; outputs are small JSON texts built with
 * snprintf. Its instance holds one setting, read by init and never written again, and it mutates
 * no globals, so `call` is trivially thread-safe. It touches no database: this is an example.
 *
 * `migration.apply` runs only as an MCP task ("task": "required"): it works `apply_ms` (3 s
 * unless configured), stopping early, having changed nothing, when the call is cancelled.
 *
 * Built by plugins/migration/build.rs into target/<profile>/libturnstile_plugin_migration.so.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep, under -std=c11 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "turnstile_plugin.h"

static const char MANIFEST[] =
    "{\"name\":\"migration\",\"version\":\"0.1.0\","
    "\"workflows\":[{\"id\":\"migration\",\"initial\":\"planned\",\"states\":{"
    "\"planned\":{\"on\":{\"DRY_RUN\":\"dry_run_ok\"}},"
    "\"dry_run_ok\":{\"on\":{\"BACKUP\":\"backed_up\"}},"
    "\"backed_up\":{\"on\":{\"APPLY\":\"applied\"}},"
    "\"applied\":{\"on\":{\"VERIFY\":\"verified\",\"ROLLBACK\":\"backed_up\"}},"
    "\"verified\":{\"type\":\"final\"}}}],"
    "\"tools\":["
    "{\"name\":\"migration.dry_run\","
    "\"description\":\"Dry-run the planned schema migration against a scratch copy of the "
    "database and report what would change. Changes nothing in the real database. Must pass "
    "before a backup can be taken.\","
    "\"compact_description\":\"Dry-run the planned migration.\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{}},"
    "\"workflow\":\"migration\",\"states\":[\"planned\"],\"transition\":\"DRY_RUN\"},"
    "{\"name\":\"migration.backup\","
    "\"description\":\"Take a full backup of the database after a successful dry run. "
    "Required before the migration can be applied; a rollback restores this backup.\","
    "\"compact_description\":\"Back up the database.\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{}},"
    "\"workflow\":\"migration\",\"states\":[\"dry_run_ok\"],\"transition\":\"BACKUP\"},"
    "{\"name\":\"migration.apply\","
    "\"description\":\"Apply the migration to the real database. DESTRUCTIVE: pass "
    "confirm=true. Afterwards verify it, or roll back to the backup.\","
    "\"compact_description\":\"Apply the migration (destructive; confirm=true).\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{\"confirm\":{\"const\":true,"
    "\"description\":\"Must be true: acknowledges the change is destructive.\"}},"
    "\"required\":[\"confirm\"]},"
    "\"workflow\":\"migration\",\"states\":[\"backed_up\"],\"transition\":\"APPLY\","
    "\"task\":\"required\"},"
    "{\"name\":\"migration.verify\","
    "\"description\":\"Verify the applied migration (schema checks, row counts) and close "
    "the migration as done. Final.\","
    "\"compact_description\":\"Verify and finish the migration.\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{}},"
    "\"workflow\":\"migration\",\"states\":[\"applied\"],\"transition\":\"VERIFY\"},"
    "{\"name\":\"migration.rollback\","
    "\"description\":\"Roll the applied migration back by restoring the backup; the "
    "migration returns to backed_up and can be applied again.\","
    "\"compact_description\":\"Restore the backup.\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{\"reason\":{\"type\":\"string\"}}},"
    "\"workflow\":\"migration\",\"states\":[\"applied\"],\"transition\":\"ROLLBACK\"},"
    "{\"name\":\"migration.status\","
    "\"description\":\"Report the migration's current step (planned, dry_run_ok, backed_up, "
    "applied or verified). Changes nothing.\","
    "\"compact_description\":\"Show the migration's step.\","
    "\"input_schema\":{\"type\":\"object\",\"properties\":{}},"
    "\"workflow\":\"migration\"}"
    "]}";

/* A transition tool: its name, the event it fires, the state it leads to, what to say. */
struct step {
    const char *tool;
    const char *event;
    const char *status;
    const char *message;
};

static const struct step STEPS[] = {
    {"migration.dry_run", "DRY_RUN", "dry_run_ok",
     "Dry run passed on a scratch copy; nothing was changed. Next: take a backup."},
    {"migration.backup", "BACKUP", "backed_up",
     "Backup taken. Next: apply the migration (destructive)."},
    {"migration.apply", "APPLY", "applied",
     "Migration applied. Next: verify it, or roll back to the backup."},
    {"migration.verify", "VERIFY", "verified",
     "Migration verified. The migration is complete."},
    {"migration.rollback", "ROLLBACK", "backed_up",
     "Migration rolled back; the backup was restored. It can be applied again."},
};

/* Writes a malloc'd copy of the formatted text to out. Returns 0, or -1 if out of memory. */
static int put(TurnstileBuffer *out, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int len = vsnprintf(NULL, 0, format, args);
    va_end(args);
    if (len < 0 || out == NULL || out->struct_size < sizeof(TurnstileBuffer)) {
        return -1;
    }
    char *data = malloc((size_t)len + 1); /* +1: vsnprintf writes a NUL we do not hand over */
    if (data == NULL) {
        return -1;
    }
    va_start(args, format);
    vsnprintf(data, (size_t)len + 1, format, args);
    va_end(args);
    out->data = (uint8_t *)data;
    out->len = (size_t)len;
    return 0;
}

/* A malloc'd JSON string body (without quotes) for text: escapes quotes, backslashes and
 * control characters. NULL text reads as "". Returns NULL if out of memory. */
static char *json_escape(const char *text) {
    if (text == NULL) {
        text = "";
    }
    size_t len = strlen(text);
    char *escaped = malloc(len * 6 + 1); /* worst case: every byte becomes \u00XX */
    if (escaped == NULL) {
        return NULL;
    }
    char *p = escaped;
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') {
            *p++ = '\\';
            *p++ = (char)*c;
        } else if (*c < 0x20) {
            p += sprintf(p, "\\u%04x", *c);
        } else {
            *p++ = (char)*c;
        }
    }
    *p = '\0';
    return escaped;
}

/* Whether the input JSON sets "confirm" to true. A tolerant scan rather than a JSON parser (the
 * host already validated the input against the schema); it fails closed: anything it does not
 * recognise counts as "not confirmed". */
static int confirmed(const char *input_json) {
    const char *key = input_json ? strstr(input_json, "\"confirm\"") : NULL;
    if (key == NULL) {
        return 0;
    }
    const char *p = key + strlen("\"confirm\"");
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p++ != ':') {
        return 0;
    }
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return strncmp(p, "true", 4) == 0;
}

/* The plugin's settings, read once by init. */
struct settings {
    /* How long migration.apply works, in milliseconds (`apply_ms` in the configuration, or
     * TURNSTILE_PLUGIN_MIGRATION_APPLY_MS): a real migration takes a while, which is what makes
     * it a step to run as an MCP task. 3000 by default. */
    long apply_ms;
};

/* The whole number after "key": in config_json, or fallback. A tolerant scan, like confirmed();
 * the host hands the configuration as a JSON object whose values may be numbers or strings. */
static long config_ms(const char *config_json, const char *key, long fallback) {
    const char *found = config_json ? strstr(config_json, key) : NULL;
    if (found == NULL) {
        return fallback;
    }
    const char *p = found + strlen(key);
    while (*p == ' ' || *p == ':' || *p == '"' || *p == '\t') p++;
    char *end = NULL;
    long value = strtol(p, &end, 10);
    return (end == p || value < 0) ? -1 : value;
}

static TurnstileStatus migration_init(const TurnstileInitParams *params, void **out_instance,
                                      TurnstileBuffer *out_error) {
    if (params == NULL || params->struct_size < TURNSTILE_INIT_PARAMS_V1_0_SIZE ||
        out_instance == NULL) {
        put(out_error, "{\"message\":\"init: bad arguments\"}");
        return TURNSTILE_INTERNAL;
    }
    const char *config =
        TURNSTILE_HAS_FIELD(params, TurnstileInitParams, config_json) ? params->config_json : NULL;
    long apply_ms = config_ms(config, "\"apply_ms\"", 3000);
    if (apply_ms < 0) {
        put(out_error, "{\"message\":\"apply_ms must be a whole number of milliseconds, 0 or more\"}");
        return TURNSTILE_INTERNAL;
    }
    struct settings *settings = malloc(sizeof *settings);
    if (settings == NULL) {
        return TURNSTILE_INTERNAL;
    }
    settings->apply_ms = apply_ms;
    *out_instance = settings;
    return TURNSTILE_OK;
}

static void migration_destroy(void *instance) { free(instance); }

/* Whether the host says the call was cancelled (ABI 1.1; a host without it never cancels). */
static int cancelled(const TurnstileCallContext *ctx) {
    const TurnstileHostServices *host =
        TURNSTILE_HAS_FIELD(ctx, TurnstileCallContext, host) ? ctx->host : NULL;
    return host != NULL && host->is_cancelled != NULL && host->is_cancelled(host->call) != 0;
}

/* Works for ms milliseconds, looking every 50 ms whether the call was cancelled. Returns 0 when
 * it worked the whole time, -1 when it stopped because the call was cancelled. */
static int work_for(long ms, const TurnstileCallContext *ctx) {
    while (ms > 0) {
        if (cancelled(ctx)) {
            return -1;
        }
        long step = ms < 50 ? ms : 50;
        struct timespec pause = {step / 1000, (step % 1000) * 1000000L};
        nanosleep(&pause, NULL);
        ms -= step;
    }
    return 0;
}

static TurnstileStatus migration_manifest(void *instance, TurnstileBuffer *out) {
    (void)instance;
    return put(out, "%s", MANIFEST) == 0 ? TURNSTILE_OK : TURNSTILE_INTERNAL;
}

static TurnstileStatus migration_call(void *instance, const char *tool, const char *input_json,
                                      const TurnstileCallContext *ctx, TurnstileBuffer *out) {
    const struct settings *settings = instance;
    if (tool == NULL || ctx == NULL || ctx->struct_size < TURNSTILE_CALL_CONTEXT_V1_0_SIZE) {
        put(out, "{\"message\":\"bad call arguments\"}");
        return TURNSTILE_INTERNAL;
    }
    char *handle = json_escape(ctx->handle);
    char *call_id = json_escape(ctx->call_id);
    TurnstileStatus status = TURNSTILE_INTERNAL;
    if (handle == NULL || call_id == NULL) {
        goto done; /* out of memory: no message either */
    }

    if (strcmp(tool, "migration.status") == 0) {
        /* The state is JSON already (a string, or an object for nested states): embed as is. */
        const char *state =
            (ctx->state_json != NULL && ctx->state_json[0] != '\0') ? ctx->state_json : "null";
        /* For the message, a plain string state "x" is shown without its quotes. */
        size_t len = strlen(state);
        int plain = len >= 2 && state[0] == '"' && state[len - 1] == '"' &&
                    strchr(state + 1, '\\') == NULL && strchr(state + 1, '"') == state + len - 1;
        status = put(out,
                     "{\"migration\":\"%s\",\"state\":%s,"
                     "\"message\":\"The migration is at step %.*s.\"}",
                     handle, state, plain ? (int)len - 2 : 7, plain ? state + 1 : "unknown") == 0
                     ? TURNSTILE_OK
                     : TURNSTILE_INTERNAL;
        goto done;
    }

    if (strcmp(tool, "migration.apply") == 0 && !confirmed(input_json)) {
        put(out, "{\"message\":\"migration.apply is destructive: pass {\\\"confirm\\\": true}\"}");
        status = TURNSTILE_BAD_INPUT;
        goto done;
    }

    if (strcmp(tool, "migration.apply") == 0 && settings != NULL &&
        work_for(settings->apply_ms, ctx) != 0) {
        /* Stopped before the change was made: a tool error, which fires nothing. */
        put(out, "{\"message\":\"migration.apply was cancelled before it changed anything\"}");
        status = TURNSTILE_TOOL_ERROR;
        goto done;
    }

    for (size_t i = 0; i < sizeof STEPS / sizeof STEPS[0]; i++) {
        const struct step *step = &STEPS[i];
        if (strcmp(tool, step->tool) == 0) {
            status = put(out,
                         "{\"migration\":\"%s\",\"call_id\":\"%s\",\"event\":\"%s\","
                         "\"status\":\"%s\",\"message\":\"%s\"}",
                         handle, call_id, step->event, step->status, step->message) == 0
                         ? TURNSTILE_OK
                         : TURNSTILE_INTERNAL;
            goto done;
        }
    }

    char *name = json_escape(tool);
    if (name != NULL) {
        put(out, "{\"message\":\"unknown tool %s\"}", name);
        free(name);
    }
    status = TURNSTILE_UNKNOWN_TOOL;

done:
    free(handle);
    free(call_id);
    return status;
}

static void migration_free(uint8_t *data, size_t len) {
    (void)len; /* malloc knows the size */
    free(data);
}

static const TurnstilePluginV1 TABLE = {
    .struct_size = sizeof(TurnstilePluginV1),
    .abi_version = TURNSTILE_PLUGIN_ABI_VERSION,
    .init = migration_init,
    .destroy = migration_destroy,
    .manifest = migration_manifest,
    .call = migration_call,
    .free_buffer = migration_free,
};

TURNSTILE_PLUGIN_EXPORT uint32_t turnstile_plugin_abi_version(void) {
    return TURNSTILE_PLUGIN_ABI_VERSION;
}

TURNSTILE_PLUGIN_EXPORT const TurnstilePluginV1 *turnstile_plugin_v1(void) { return &TABLE; }
