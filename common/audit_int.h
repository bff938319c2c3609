/* The audit trail's parts (audit.h), shared among its files and private
 * to them: audit.c (appending, repairs, group commit, rotation's trigger),
 * audit_read.c (the record format, verify, read, chain, times),
 * audit_seg.c (segments, the trail as one read sees it, rotation,
 * retention).  Nothing else includes this header. */
#ifndef SBX_AUDIT_INT_H
#define SBX_AUDIT_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <sha2.h>

#include "err.h"
#include "state.h"

#define HASH_LEN SHA256_DIGEST_LENGTH
#define SRC_CAP (SBX_AUDIT_RECORD_MAX + 1) /* a line and its newline */

#define SEG_PREFIX "audit.log."
#define SEG_DIGITS 20
#define SEG_NAME_MAX (sizeof SEG_PREFIX + SEG_DIGITS)

struct segs {
	size_t n;
	char (*name)[SEG_NAME_MAX];
};

/* The trail as it is under a shared lock: every file open with its size,
 * and the head that goes with them, so a concurrent append (or rotation,
 * or retention) is neither half-read nor anchored before it is seen. */
struct trail {
	size_t n;
	int *fd;
	uint64_t *size;
	struct segs segs; /* names of fd[0..n-2], or of all when there is no audit.log */
	int have_log;
	char *head;
	size_t head_n;
};

/* audit_read.c: the record format */
void aud_hash_bytes(const char *p, size_t n, uint8_t out[HASH_LEN]);
void aud_hex_of(const uint8_t h[HASH_LEN], char out[2 * HASH_LEN + 1]);
int aud_all_digits(const char *s, size_t n);
/* The fields the chain depends on (*why: what is wrong when NULL). */
json_t *aud_parse_rec(const char *p, size_t n, uint64_t *seq, uint8_t prev[HASH_LEN], const char **why);
/* audit.head's content: "SEQ HEX CHECK\n", CHECK the first AUD_HEAD_CHECK
 * hex digits of the SHA-256 of "SEQ HEX".  It is written in place
 * (aud_write_head), so a reader racing a write can see a mix of two heads,
 * which the check rejects.  The older form "SEQ HEX\n" (always replaced by
 * a rename, never mixed) is still read. */
#define AUD_HEAD_CHECK 16
#define AUD_HEAD_MAX (20 + 1 + 2 * HASH_LEN + 1 + AUD_HEAD_CHECK + 1)
size_t aud_format_head(uint64_t seq, const uint8_t hash[HASH_LEN], char out[AUD_HEAD_MAX + 1]);
/* 1: the checked form, 0: the older form, -1: not a head (or a mix). */
int aud_parse_head(const char *h, size_t n, uint64_t *seq, uint8_t hash[HASH_LEN]);
/* audit.head's bytes (NULL: none), read again while they do not parse, a
 * few times: a write in place takes microseconds. */
char *aud_read_head(struct sbx_state *st, size_t *n);

/* audit_seg.c */
int aud_trail_open(struct sbx_state *st, struct trail *t, int want_head, struct sbx_err *err);
void aud_trail_close(struct trail *t);
const char *aud_trail_name(const struct trail *t, size_t i);
int aud_seg_tail(struct sbx_state *st, uint64_t *seq, uint8_t hash[HASH_LEN], char *name, struct sbx_err *err);
int aud_write_segment_rec(int fd, uint64_t *size, uint64_t *seq, uint8_t prev[HASH_LEN], const char *name,
			  struct sbx_err *err);
int aud_rotate(struct sbx_state *st, int *fd, uint64_t *size, uint64_t *seq, uint8_t prev[HASH_LEN],
	       struct sbx_err *err);

/* audit.c */
int aud_write_rec(int fd, uint64_t *size, uint64_t *seq, uint8_t prev[HASH_LEN], const char *type, json_t *fields,
		  struct sbx_err *err);
int aud_read_tail(int fd, uint64_t size, uint64_t *seq, uint8_t hash[HASH_LEN], uint64_t *torn, char **frag,
		  size_t *frag_n, struct sbx_err *err);
int aud_datasync(int fd, struct sbx_err *err);
int aud_lock(int fd, int how, struct sbx_err *err);
int aud_open_log(struct sbx_state *st, struct sbx_err *err);
int aud_begin_locked(struct sbx_state *st, int *fdp, uint64_t *sizep, uint64_t *seqp, uint8_t prev[HASH_LEN],
		     struct sbx_err *err);
void aud_write_head(struct sbx_state *st, uint64_t seq, const uint8_t hash[HASH_LEN]);

#endif
