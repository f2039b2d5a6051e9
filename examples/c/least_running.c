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

/* Whether every line of the config is blank, `{}`, or the `seed` key. The host hands over
 * a YAML mapping, one key a line, and adds `seed` to every plugin's config, so a plugin
 * with no settings must still accept that one key. */
static int only_seed(RlStr config) {
    uint64_t i = 0;
    while (i < config.len) {
        while (i < config.len && (config.ptr[i] == ' ' || config.ptr[i] == '\t')) i++;
        uint64_t start = i;
        while (i < config.len && config.ptr[i] != '\n') i++;
        uint64_t len = i - start;
        const char *line = (const char *)config.ptr + start;
        int blank = len == 0 || (len == 2 && memcmp(line, "{}", 2) == 0);
        int seed = len >= 5 && memcmp(line, "seed:", 5) == 0;
        if (!blank && !seed) return 0;
        i++;
    }
    return 1;
}

static RlStatus lr_create(RlStr name, RlStr config, void **out, const RlErrorSink *err) {
    (void)name;
    if (!only_seed(config)) {
        report(err, "least-running takes no config keys but `seed`");
        return RL_ERR_CONFIG;
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

static RlStatus lr_match(void *instance, const RlRequest *request, const RlEndpointList *endpoints,
                         const uint8_t *unavailable, uint32_t *out_index, const RlErrorSink *err) {
    (void)request, (void)err;
    const RlEndpointStatus *best = NULL;
    for (uint64_t pos = 0; pos < endpoints->len; pos++) {
        const RlEndpointStatus *e = endpoint_at(endpoints, pos);
        if (unavailable[pos]) continue;
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
    .create = lr_create,
    .destroy = lr_destroy,
    .add_endpoints = lr_add,
    .remove_endpoints = lr_remove,
    .match_request = lr_match,
    .update = lr_update,
    .on_complete = NULL, /* optional */
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
