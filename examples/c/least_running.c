/*
 * least-running: a routerlab matcher written in plain C against include/routerlab.h.
 *
 * Picks the available endpoint with the fewest running requests (ties: lowest list
 * position). It keeps no state, so create allocates a tiny instance only to show the
 * lifecycle. Build it outside the workspace:
 *
 *   cc -shared -fPIC -O2 -I include examples/c/least_running.c \
 *      -o "$DIR/librouterlab_least_running.so"
 *   ROUTERLAB_PLUGIN_PATH="$DIR" cargo xtask replay --matcher least-running --trace traces/chat.jsonl
 */
#include <stdlib.h>
#include <string.h>

#include "routerlab.h"

typedef struct {
    uint64_t decisions;
} Instance;

static void report(const RlErrorSink *err, const char *msg) {
    if (err != NULL && err->write != NULL) {
        RlStr text = {(const uint8_t *)msg, strlen(msg)};
        err->write(err->ctx, text);
    }
}

static const RlEndpointStatus *endpoint_at(const RlEndpointList *list, uint64_t pos) {
    return (const RlEndpointStatus *)((const char *)list->items + pos * list->stride);
}

/* ABI 1.2 `create_with`: the host passes the seed beside the config text, so a plugin with
 * no settings only checks that the text is empty (this one uses no randomness and ignores
 * info->seed). A host older than 1.2 calls `create` instead; this example targets 1.2 and
 * provides only `create_with`. */
static RlStatus lr_create(const RlCreateInfo *info, void **out, const RlErrorSink *err) {
    for (uint64_t i = 0; i < info->config.len; i++) {
        char c = (char)info->config.ptr[i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '{' && c != '}') {
            report(err, "least-running takes no config keys");
            return RL_ERR_CONFIG;
        }
    }
    Instance *instance = calloc(1, sizeof(Instance));
    if (instance == NULL) {
        report(err, "out of memory");
        return RL_ERR_INTERNAL;
    }
    *out = instance;
    return RL_OK;
}

static void lr_destroy(void *instance) { free(instance); }

static RlStatus lr_add(void *instance, const RlEndpointList *endpoints, const RlErrorSink *err) {
    (void)instance, (void)endpoints, (void)err;
    return RL_OK;
}

static RlStatus lr_remove(void *instance, const uint32_t *indices, uint64_t count,
                          const RlErrorSink *err) {
    (void)instance, (void)indices, (void)count, (void)err;
    return RL_OK;
}

/* ABI 1.3: in a fleet split into a prefill and a decode pool the host asks once per phase
 * (`request->phase`), with only that phase's pool available; each endpoint says its pool
 * (`role`). Read them only when `struct_size` covers them: a 1.2 host's request is whole. */
static uint32_t phase_of(const RlRequest *request) {
    return request->struct_size > RL_REQUEST_SIZE_V1_2 ? request->phase : RL_PHASE_WHOLE;
}

static uint32_t role_of(const RlEndpointStatus *e) {
    return e->struct_size > RL_ENDPOINT_STATUS_SIZE_V1_2 ? e->role : RL_ROLE_AGGREGATED;
}

static RlStatus lr_match(void *instance, const RlRequest *request, const RlEndpointList *endpoints,
                         const uint8_t *unavailable, uint32_t *out_index, const RlErrorSink *err) {
    (void)err;
    uint32_t phase = phase_of(request);
    const RlEndpointStatus *best = NULL;
    for (uint64_t pos = 0; pos < endpoints->len; pos++) {
        const RlEndpointStatus *e = endpoint_at(endpoints, pos);
        if (unavailable[pos]) continue;
        /* A decode leg never goes to a prefill endpoint, whatever the flags say. */
        if (phase == RL_PHASE_DECODE && role_of(e) == RL_ROLE_PREFILL) continue;
        if (best == NULL || e->running < best->running) best = e;
    }
    if (best == NULL) return RL_NO_ENDPOINT;
    ((Instance *)instance)->decisions++;
    *out_index = best->index;
    return RL_OK;
}

static RlStatus lr_update(void *instance, const RlRequest *request, uint32_t endpoint,
                          const RlErrorSink *err) {
    (void)instance, (void)request, (void)endpoint, (void)err;
    return RL_OK;
}

static const RlMatcherVtable VTABLE = {
    .struct_size = sizeof(RlMatcherVtable),
    .create_with = lr_create, /* 1.2; `.create` may stay NULL */
    .destroy = lr_destroy,
    .add_endpoints = lr_add,
    .remove_endpoints = lr_remove,
    .match_request = lr_match,
    .update = lr_update,
    .on_complete = NULL,    /* optional */
    .on_first_token = NULL, /* optional (1.2) */
    .match_update = NULL,   /* optional (1.2): the host then calls match, then update */
};

static const RlPluginDescriptor DESCRIPTOR = {
    .struct_size = sizeof(RlPluginDescriptor),
    .kind = RL_KIND_MATCHER,
    .name = "least-running",
    .version = "0.1.0",
    .description = "C example: the available endpoint with the fewest running requests",
    .vtable = &VTABLE,
};

static const RlPluginDescriptor *const PLUGINS[] = {&DESCRIPTOR};

static const RlModule MODULE = {
    .struct_size = sizeof(RlModule),
    .magic = RL_MAGIC,
    .abi_major = RL_ABI_MAJOR,
    .abi_minor = RL_ABI_MINOR,
    .plugin_count = 1,
    .plugins = PLUGINS,
};

const RlModule *routerlab_plugin_entry_v1(void) { return &MODULE; }
