/* sbx-serve's API keys: E2B's format ("e2b_" and 40 hex digits), one
 * tenant each, stored hashed under LIB/serve/keys (a file per key, named by
 * its ID: the first 12 hex digits of the key's SHA-256), shown once. */
#ifndef SBX_SERVE_KEYS_H
#define SBX_SERVE_KEYS_H

#include <jansson.h>

#include "err.h"
#include "state.h"

#define SERVE_KEY_LEN 44 /* "e2b_" + 40 hex */
#define SERVE_KEY_ID_LEN 12

/* A new key for tenant ("" or NULL: the operator): its text into
 * key[SERVE_KEY_LEN + 1], its ID into id[SERVE_KEY_ID_LEN + 1]. */
int serve_key_add(struct sbx_state *st, const char *tenant, char *key, char *id, struct sbx_err *err);
/* Every key's record (id, tenant, created), sorted by ID. */
int serve_key_list(struct sbx_state *st, json_t **out, struct sbx_err *err);
/* 4 when there is no such key. */
int serve_key_rm(struct sbx_state *st, const char *id, struct sbx_err *err);
/* The key presented with a request: 1 with its tenant ("" for the
 * operator) and ID when it is valid, 0 when not (any malformed text
 * included), -1 on a failure to read the store.  The hash is compared in
 * constant time. */
int serve_key_check(int keys_fd, const char *key, char *tenant, size_t tn, char *id, struct sbx_err *err);
/* LIB/serve/keys, made (0700) when missing. */
int serve_keys_dir(struct sbx_state *st, struct sbx_err *err);

#endif
