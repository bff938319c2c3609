/* The warm pool: per template, sessions booted ahead (state "pooled", ID
 * pool-<hex>, paused where the VMM can pause) that sbx-create claims
 * instead of booting when the request fits one.  Sizes come from the host
 * configuration (hostconf.h); sbx-gc keeps the pool at them (its upkeep,
 * sbx_gc_pool, is in gc.c), and every claim starts a background refill.
 *
 * A claim (client side here, monitor side in monitor/claim.c): under the
 * global lock sbx-create picks a fitting member and sends its monitor
 * CLAIM with the new ID, record and policy (then the secrets, when the
 * monitor asks); the monitor resumes the VM and sends the guest its new
 * identity (so that the guest works while the commit runs), then renames
 * its directories and host cgroups to the new ID, saves the record and
 * acknowledges (the commit point).  sbx-create releases the global lock,
 * and the monitor gives the guest the secrets, arms the TTL and answers
 * CLAIMED once the guest has answered.
 * A claim refused before the VM is resumed leaves the member as it was;
 * a failure after that but before the commit destroys the member (its
 * guest has another identity) and sbx-create tries another or boots
 * cold; after the commit the session is completed even if sbx-create is
 * gone, or, when it cannot be, destroyed, and sbx-create boots the
 * session cold. */
#ifndef SBX_POOL_H
#define SBX_POOL_H

#include "err.h"
#include "state.h"

#define SBX_POOL_PREFIX "pool-"
/* Monitor side: resume, identity and secrets must be done by then. */
#define SBX_CLAIM_TIMEOUT_MS 15000u
/* A claim resumes the member's VM before its commit, while sbx-create
 * holds the global lock: a VMM that does not answer within this is taken
 * for wedged (the member is destroyed, the create tries another or boots
 * cold), so it holds up other creates for no longer. */
#define SBX_CLAIM_RESUME_MS 2000u

struct sbx_session;
struct sbx_create_opts;
struct sbx_policy;
struct sbx_secrets;

/* IDs of pool members: "pool-" + 12 hex digits; users cannot take them. */
int sbx_pool_member_id(const char *id);
void sbx_pool_id_new(char *buf, size_t n);

/* Could a member serve this request at all?  Not with volumes or a
 * workspace: a member has none.  Egress and the package cache a member
 * with a NIC serves (sbx.yaml's network: N; sbx_pool_member_fits). */
int sbx_pool_request_fits(const struct sbx_create_opts *o, const struct sbx_policy *p);
/* Does member m fit the session s is to be (template name@version, vCPUs,
 * memory, disk quota, accel and VMM; a NIC exactly if s has one)?  Not
 * one with a NIC for a session without: its VM would keep the device (a
 * suspend, a snapshot and their restores describe the VM by its record). */
int sbx_pool_member_fits(const struct sbx_session *m, const struct sbx_session *s);

/* sbx-create: claim a member for s (its record, ID chosen and free, p its
 * effective policy), with
 * the global lock held in *g.  1: claimed, s is the session's record, *g
 * released.  0: no member was claimed; *g held and the ID still free, boot
 * cold.  SBX_POOL_UNDO: a claim committed, then failed: the session under
 * s->id exists and is the caller's to destroy before it boots cold (*g
 * released).  -1: err set.  A member taken out of the pool (claimed, or
 * destroyed by a claim that failed) is replaced: sbx_pool_refill, started
 * once the claim is over. */
#define SBX_POOL_UNDO 2
int sbx_pool_claim(struct sbx_state *st, int *g, struct sbx_session *s, const struct sbx_policy *p,
		   const struct sbx_secrets *sec, struct sbx_err *err);
/* Start `sbx-gc --pool-only` detached (posix_spawn, own session, stdio
 * on /dev/null), so a claim's member is replaced without delaying the
 * create.  p's from_env secrets stay behind. */
void sbx_pool_refill(const struct sbx_policy *p);

#endif
