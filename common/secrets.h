/* Session secrets on the host (sbx-create(1) --secret, sbx-policy(5)
 * secrets:).  sbx-create reads the values and hands them to the monitor as
 * one SBX_F_SECRETS frame over an inherited socket; the monitor forwards the
 * same frame to the guest and keeps the values, in locked memory, only to
 * scrub them out of the exec output it stores.  Values never go to argv,
 * the environment, a host file or the audit trail. */
#ifndef SBX_SECRETS_H
#define SBX_SECRETS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "proto.h"

struct sbx_policy;

struct sbx_secrets {
	struct sbx_secret_ref s[SBX_SECRETS_MAX]; /* values point into frame */
	unsigned n;
	size_t pat[SBX_SECRETS_MAX]; /* bytes scrubbed: the value less a trailing newline */
	size_t patmax;
	uint8_t first[256]; /* bytes a pattern starts with */
	uint8_t *frame;     /* the SBX_F_SECRETS frame, mlocked, zeroed on free */
	size_t frame_len, map_len;
};

/* The secrets' memory is wiped in a forked child (MADV_WIPEONFORK), so no
 * helper the monitor forks ever holds them.  For the one child that must
 * (the monitor's unprivileged half): keep 1 just before the fork, then 0
 * in both processes just after (wiped on fork again, and locked). */
void sbx_secrets_fork_keep(struct sbx_secrets *s, int keep);

/* Add --secret NAME=@FILE (NAME=@- for stdin) to p, replacing a policy
 * secret of the same name.  Errors are SBX_EXIT_USAGE. */
int sbx_secrets_args(struct sbx_policy *p, const char *const *specs, unsigned n, struct sbx_err *err);
/* Read every secret p names (from_env, from_file; "-" is stdin) for tenant
 * (NULL: the operator), through hostpath.h's rules: a file only where
 * sbx.yaml lets the tenant read, an environment variable only one it lists,
 * never sbx's own state.  A secret that cannot be read, or may not be, is
 * SBX_EXIT_INVALID naming it and the key it came from. */
int sbx_secrets_load(const struct sbx_policy *p, const char *tenant, struct sbx_secrets *s, struct sbx_err *err);
/* The monitor's side: one frame from fd (blocking, bounded). */
int sbx_secrets_read_fd(int fd, struct sbx_secrets *s, struct sbx_err *err);
void sbx_secrets_free(struct sbx_secrets *s);
static inline void sbx_secrets_freep(struct sbx_secrets *s)
{
	sbx_secrets_free(s);
}
#define _cleanup_secrets_ __attribute__((cleanup(sbx_secrets_freep)))

/* Streaming scrub: every occurrence of a secret's value becomes
 * "[secret:NAME]", also across calls.  Bytes that may begin a value are held
 * back (at most the longest value less one) until the next call decides
 * them, or sbx_scrub_end releases them. */
struct sbx_scrub {
	uint8_t *carry;
	size_t n;
};
int sbx_scrub(const struct sbx_secrets *s, struct sbx_scrub *st, const uint8_t *p, size_t n, struct sbx_buf *out);
void sbx_scrub_end(struct sbx_scrub *st, struct sbx_buf *out);
/* A NUL-terminated copy of str with the values replaced; NULL when out of
 * memory.  Without secrets, a plain copy. */
char *sbx_scrub_str(const struct sbx_secrets *s, const char *str);

#endif
