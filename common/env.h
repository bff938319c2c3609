/* A session's environment (sbx-create -e, --env-file, -w; a template's
 * manifest "env", "workdir" and "user" beneath them): what every exec of
 * the session inherits unless it says otherwise (sbx-exec -e, -w, -u).
 *
 * Kept in the session record and applied by the exec client, host-side, at
 * each exec: nothing of it lives in the guest, so a session restored from
 * a snapshot or claimed from the warm pool has exactly its own record's
 * environment, with nothing to re-send or to forget.  A value that is one
 * of the session's secrets is never kept: the record holds the secret's
 * name, and the guest agent fills the value in from /run/secrets. */
#ifndef SBX_ENV_H
#define SBX_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define SBX_ENV_MAX 64          /* variables */
#define SBX_ENV_KEY_MAX 128     /* bytes of a name */
#define SBX_ENV_VALUE_MAX 4096  /* bytes of a value */
#define SBX_ENV_BYTES_MAX 16384 /* NAME=VALUE\0 over all of them */
#define SBX_ENV_FILE_MAX (256u << 10)
#define SBX_WORKDIR_MAX 256 /* bytes of -w, NUL included */

struct sbx_env {
	char buf[SBX_ENV_BYTES_MAX]; /* NAME=VALUE\0, one after the other */
	size_t len;
	unsigned n;
	/* bit i: entry i's VALUE is the name of a session secret */
	uint64_t secret;
};

struct sbx_secrets;

/* 1 when s[0..n) is a variable name: [A-Za-z_][A-Za-z0-9_]*, bounded. */
int sbx_env_name_ok(const char *s, size_t n);
/* Set NAME=VALUE (replacing an earlier NAME); key says where it came from
 * in messages.  Bad names, control bytes and the bounds are 3. */
int sbx_env_set(struct sbx_env *e, const char *kv, int secret, const char *key, struct sbx_err *err);
/* Entry i: its name (up to '=') and value. */
const char *sbx_env_entry(const struct sbx_env *e, unsigned i, size_t *namelen, const char **value);
/* KEY=VALUE lines, '#' comments and blank lines; nothing else (no quotes,
 * no "export", no bare names): a bad line is 3 naming FILE:LINE.  Read
 * through hostpath.h's rules for tenant. */
int sbx_env_file_load(struct sbx_env *e, const char *path, const char *tenant, struct sbx_err *err);
/* A working directory: absolute, no control bytes, bounded (3). */
int sbx_workdir_check(const char *dir, const char *key, struct sbx_err *err);
/* A user as sbx-exec -u takes it (root, user, a uid 0..65534); -1 when not. */
int sbx_user_parse(const char *u, uint32_t *uid);
/* Values equal to a secret become a reference to it; a value that holds
 * one inside it is 3 (it could not be shown, nor kept, without it). */
int sbx_env_bind_secrets(struct sbx_env *e, const struct sbx_secrets *sec, struct sbx_err *err);

struct json_t;
/* The record's members: "env" {NAME: VALUE}, "env_secrets" {NAME: SECRET}. */
void sbx_env_to_json(const struct sbx_env *e, struct json_t *record);
/* ... and back; -1 when they are not valid (the record is then corrupt). */
int sbx_env_from_json(struct sbx_env *e, struct json_t *record);
/* For display (sbx-ps --json): {NAME: VALUE}, a secret's as "[secret:NAME]". */
struct json_t *sbx_env_show(const struct sbx_env *e);

#endif
