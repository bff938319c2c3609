/* guest-init agent: what the host says about the VM itself: secrets, quiesce
 * before a snapshot, the identity a claim or restore gives, the clock
 * (agent.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include <linux/random.h>

#include "agent.h"
#include "init.h"

/* ---- secrets ------------------------------------------------------------ */

/* /run/secrets/NAME on the /run tmpfs (never on disk): files 0400, the
 * directory 0500, both the unprivileged user's; root reads them anyway.
 * Delivered once per boot, before the host reports the session ready. */
static int secrets_write(struct agent *a, const struct sbx_secret_ref *s, int n, const char **why)
{
	const char *dir = a->is_pid1 ? "/run/secrets" : getenv("SBX_AGENT_SECRETS_DIR");
	int dfd, fd;

	if (!dir || !*dir) {
		*why = "no secrets directory (SBX_AGENT_SECRETS_DIR)";
		return -1;
	}
	if (mkdir(dir, 0700) < 0) {
		*why = errno == EEXIST ? "secrets were already delivered" : "cannot create the secrets directory";
		return -1;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		*why = "cannot open the secrets directory";
		return -1;
	}
	for (int i = 0; i < n; i++) {
		size_t off = 0;
		fd = openat(dfd, s[i].name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
		if (fd < 0) {
			*why = "cannot create a secret file";
			goto fail;
		}
		while (off < s[i].len) {
			ssize_t w = write(fd, s[i].value + off, s[i].len - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				close(fd);
				*why = "cannot write a secret file";
				goto fail;
			}
			off += (size_t)w;
		}
		if (fchmod(fd, 0400) < 0 || (a->is_pid1 && fchown(fd, SBX_GUEST_USER_UID, SBX_GUEST_USER_GID) < 0)) {
			close(fd);
			*why = "cannot set a secret file's owner";
			goto fail;
		}
		close(fd);
	}
	if ((a->is_pid1 && fchown(dfd, SBX_GUEST_USER_UID, SBX_GUEST_USER_GID) < 0) || fchmod(dfd, 0500) < 0) {
		*why = "cannot set the secrets directory's owner";
		goto fail;
	}
	close(dfd);
	return 0;
fail:
	close(dfd);
	return -1;
}

void on_secrets(struct agent *a, const struct sbx_frame *f)
{
	struct sbx_secret_ref s[SBX_SECRETS_MAX];
	const char *why = "bad secrets frame";
	int n = f->stream ? -1 : sbx_secrets_decode(f->payload, f->len, s, &why);

	if (n < 0 || secrets_write(a, s, n, &why) < 0) {
		sbx_guest_log("agent: secrets: %s", why);
		send_error(a, 0, ERR_INTERNAL, why);
	} else {
		sbx_frame_raw(&a->out, SBX_F_SECRETS, 0, NULL, 0);
	}
	/* The tmpfs files are now the only copy in the guest. */
	explicit_bzero((void *)f->payload, f->len);
}

void shutdown_all(struct agent *a)
{
	for (unsigned i = 0; i < MAX_EXECS; i++)
		if (a->ex[i].used && !a->ex[i].reaped)
			exec_kill(a, &a->ex[i], SBX_R_KILLED);
}

/* ---- snapshots ---------------------------------------------------------- */

/* Overwrite, then remove, every secret file: a snapshot holds the guest's
 * memory, and a tmpfs page keeps its bytes after the unlink that frees
 * it.  The directory goes too, so the source can be given them again. */
static int secrets_wipe(struct agent *a, const char **why)
{
	static const uint8_t zero[4096];
	const char *dir = a->is_pid1 ? "/run/secrets" : getenv("SBX_AGENT_SECRETS_DIR");
	struct dirent *de;
	DIR *d;
	int dfd;

	if (!dir || !*dir)
		return 0;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		*why = "cannot open the secrets directory";
		return errno == ENOENT ? 0 : -1;
	}
	fchmod(dfd, 0700); /* 0500 as delivered: no unlink without w */
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		*why = "cannot read the secrets directory";
		return -1;
	}
	while ((de = readdir(d)) != NULL) {
		struct stat st;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		fchmodat(dfd, de->d_name, 0600, 0);
		fd = openat(dfd, de->d_name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
			for (off_t off = 0; off < st.st_size; off += (off_t)sizeof(zero))
				if (pwrite(fd, zero,
					   st.st_size - off < (off_t)sizeof(zero) ? (size_t)(st.st_size - off)
										  : sizeof(zero),
					   off) < 0)
					break;
		if (fd >= 0)
			close(fd);
		if (unlinkat(dfd, de->d_name, 0) < 0) {
			closedir(d);
			*why = "cannot remove a secret file";
			return -1;
		}
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT) {
		*why = "cannot remove the secrets directory";
		return -1;
	}
	return 0;
}

/* QUIESCE's FLAGS (SBX_QUIESCE_*); none when the payload is not TLVs (an
 * older monitor's padding). */
static uint32_t quiesce_flags(const struct sbx_frame *f)
{
	struct sbx_tlv_it it;
	const uint8_t *val;
	uint16_t tag;
	uint32_t n, flags = 0, v;

	sbx_tlv_init(&it, f->payload, f->len);
	while (sbx_tlv_next(&it, &tag, &val, &n) == 1)
		if (tag == SBX_T_FLAGS && sbx_tlv_as_u32(val, n, &v) == 0)
			flags = v;
	return flags;
}

/* The host is about to save this VM, and no secret may be in it.  Without
 * SBX_QUIESCE_KEEP nothing may be running either (an older monitor).
 * With it, execs run on: after our answer nothing more leaves until the
 * host releases us (hold_release), so the answer is the last thing the
 * host hears before the VM stops, and what the execs say meanwhile stays
 * in the queue, in the image: the source sends it after the save, every
 * restored copy after its IDENTITY, each once.  (The port's receive
 * buffers, the last place in the kernel where the secrets frame lay, the
 * host rinses with padding before this frame.) */
void on_quiesce(struct agent *a, const struct sbx_frame *f)
{
	const char *why = "cannot wipe the secrets";
	uint32_t flags = quiesce_flags(f);

	if (f->stream) {
		send_error(a, f->stream, ERR_INVALID, "malformed quiesce");
		return;
	}
	if (flags & SBX_QUIESCE_RELEASE) {
		hold_release(a);
		return;
	}
	if (a->nlive && !(flags & SBX_QUIESCE_KEEP)) {
		send_error(a, 0, ERR_CONFLICT, "execs are still running");
		return;
	}
	if (secrets_wipe(a, &why) < 0) {
		sbx_guest_log("agent: quiesce: %s", why);
		send_error(a, 0, ERR_INTERNAL, why);
		return;
	}
	/* Last, so a refusal leaves it mounted; the next frame, whatever it
	 * is, comes after the save and mounts it again (dispatch). */
	if (a->is_pid1 && sbx_guest_ws_down() < 0) {
		sbx_guest_log("agent: quiesce: unmount the workspace: %s", strerror(errno));
		send_error(a, 0, ERR_CONFLICT,
			   errno == EBUSY ? "the workspace is in use (a process keeps files open in it)"
					  : "cannot unmount the workspace");
		return;
	}
	sbx_frame_raw(&a->out, SBX_F_QUIESCE, 0, NULL, 0);
	if (flags & SBX_QUIESCE_KEEP) {
		a->held = 1;
		a->hold_end = a->out.len;
	}
}

/* What IDENTITY says; pkg only in a warm-pool claim's. */
struct identity {
	char host[64];
	const uint8_t *seed;
	uint32_t seed_len;
	uint64_t t_ns;
	char pkg[512]; /* sbx.pkg* parameters, "": none */
	uint32_t next; /* NEXT_STREAM: keep the execs; 0: end them */
};

static int identity_parse(const struct sbx_frame *f, struct identity *id)
{
	char *host = id->host;
	size_t cap = sizeof(id->host);
	const uint8_t **seed = &id->seed;
	uint32_t *seed_len = &id->seed_len;
	uint64_t *t_ns = &id->t_ns;
	struct sbx_tlv_it it;
	const uint8_t *val;
	uint16_t tag;
	uint32_t n;
	int rc;

	sbx_tlv_init(&it, f->payload, f->len);
	while ((rc = sbx_tlv_next(&it, &tag, &val, &n)) == 1) {
		if (tag == SBX_T_HOSTNAME) {
			if (sbx_tlv_as_str(val, n, host, cap) < 0 || n == 0 || n > 63)
				return -1;
			for (uint32_t i = 0; i < n; i++)
				if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
					    host[i]))
					return -1;
		} else if (tag == SBX_T_SEED && n >= 16 && n <= 512) {
			*seed = val;
			*seed_len = n;
		} else if (tag == SBX_T_PKG) {
			if (sbx_tlv_as_str(val, n, id->pkg, sizeof(id->pkg)) < 0)
				return -1;
		} else if (tag == SBX_T_NEXT_STREAM) {
			if (sbx_tlv_as_u32(val, n, &id->next) < 0 || !id->next || id->next >= SBX_WARM_STREAM)
				return -1;
		} else if (tag != SBX_T_TIME_NS || sbx_tlv_as_u64(val, n, t_ns) < 0) {
			return -1;
		}
	}
	return rc < 0 || !host[0] || !*seed || !*t_ns ? -1 : 0;
}

/* A claimed warm-pool member takes its session's package policy: the
 * files a boot writes from the kernel command line, written the same way. */
static int identity_claim(const struct identity *id, const char **why)
{
	if (id->pkg[0]) {
		struct sbx_guest_cfg cfg;
		memset(&cfg, 0, sizeof(cfg));
		if (sbx_guest_pkg_params(&cfg, id->pkg) < 0) {
			*why = "malformed package parameters";
			return -1;
		}
		sbx_guest_packages(&cfg);
	}
	return 0;
}

/* A restored VM (or a warm-pool member being claimed) becomes a session
 * of its own: the host's wall clock (ours stopped when the source was
 * saved), the new hostname, fresh randomness mixed in and the generator
 * reseeded (so two sessions from one snapshot never share a stream), and
 * no trace of the source's execs.  Only as PID 1: in --agent-fd mode this
 * is the host's own system. */
void on_identity(struct agent *a, const struct sbx_frame *f)
{
	struct identity id = { 0 };
	char *host = id.host;
	struct utsname u;
	size_t off;

	if (f->stream || identity_parse(f, &id) < 0) {
		send_error(a, f->stream, ERR_INVALID, "malformed identity");
		return;
	}
	if (a->is_pid1) {
		struct timespec ts = { .tv_sec = (time_t)(id.t_ns / 1000000000u),
				       .tv_nsec = (long)(id.t_ns % 1000000000u) };
		struct {
			struct rand_pool_info info;
			uint8_t buf[512];
		} rp;
		int fd;

		if (clock_settime(CLOCK_REALTIME, &ts) < 0)
			sbx_guest_log("agent: identity: clock: %s", strerror(errno));
		sbx_guest_set_hostname(host, 1);
		rp.info.entropy_count = (int)id.seed_len * 8;
		rp.info.buf_size = (int)id.seed_len;
		memcpy(rp.buf, id.seed, id.seed_len);
		if (a->urandom < 0)
			a->urandom = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
		fd = a->urandom;
		if (fd < 0 || ioctl(fd, RNDADDENTROPY, &rp) < 0 || ioctl(fd, RNDRESEEDCRNG) < 0) {
			sbx_guest_log("agent: identity: reseed: %s", strerror(errno));
			explicit_bzero(&rp, sizeof(rp));
			send_error(a, 0, ERR_INTERNAL, "cannot reseed the random number generator");
			return;
		}
		explicit_bzero(&rp, sizeof(rp));
		const char *why = NULL;
		if (identity_claim(&id, &why) < 0) {
			sbx_guest_log("agent: identity: %s", why);
			explicit_bzero((void *)id.seed, id.seed_len);
			send_error(a, 0, ERR_INTERNAL, why);
			return;
		}
	}
	explicit_bzero((void *)id.seed, id.seed_len);
	/* Whatever a save held back is this host's now (after a restore, or
	 * the source's own if it asks for a new identity). */
	hold_release(a);
	if (id.next) {
		/* The host keeps the running execs under their streams and
		 * numbers on from next: so do we, and the pool follows. */
		for (unsigned i = 0; i < a->npool; i++)
			a->pool[i].stream = id.next + i;
		a->pool_next = id.next + a->npool;
		goto answer;
	}
	/* The new host numbers its execs from 1 and may set other limits:
	 * nothing of the source's exec bookkeeping carries over. */
	shutdown_all(a);
	/* The new host numbers its streams from 1.  The cgroups made ahead
	 * (cg_idle) had nothing run in them, so they serve those streams
	 * as they are, renumbered in our books only: a cgroup's name is only
	 * a name (cg_create and cg_idle step around one that is taken).  A
	 * warm-pool member's pool is numbered from 1 already; a restored
	 * VM's was made for the source's next streams, and removing it and
	 * making it again cost every restore three rmdirs and three mkdirs
	 * in the guest kernel, each run for the first time since the restore
	 * (under TCG, translated afresh).  Cgroup limits are set at each
	 * exec, never in the pool, so no old limit carries over. */
	for (unsigned i = 0; i < a->npool; i++)
		a->pool[i].stream = i + 1;
	a->pool_next = 1 + a->npool;
	a->session_pids = 0;
answer:
	if (uname(&u) < 0)
		memset(&u, 0, sizeof(u));
	off = sbx_frame_begin(&a->out, SBX_F_IDENTITY, 0);
	sbx_tlv_str(&a->out, SBX_T_KERNEL, u.release);
	sbx_tlv_str(&a->out, SBX_T_HOSTNAME, u.nodename);
	sbx_tlv_u32(&a->out, SBX_T_FLAGS, SBX_GUEST_OUT_WINDOW | SBX_GUEST_KEEP_EXECS);
	sbx_frame_end(&a->out, off);
}

/* The clock follows the host's (the monitor's PINGs carry its
 * CLOCK_REALTIME; see monitor/agent.c).  With no exec running it is set;
 * while one runs, an offset is slewed (adjtime: at most 0.5 ms a second,
 * no jump a command could see) unless the guest is half a second or more
 * behind, which is stepped forward; it never steps backwards under a
 * command, which may time itself (make, timeouts).  The channel's latency
 * (a millisecond or so) is below what is corrected. */
#define CLOCK_SLEW_MIN_NS 2000000ll /* below this: leave it */
#define CLOCK_STEP_NS 500000000ll   /* from here: step */
static void clock_follow(struct agent *a, uint64_t host_ns)
{
	struct timespec now;
	if (!a->is_pid1 || !host_ns || clock_gettime(CLOCK_REALTIME, &now) < 0)
		return;
	int64_t off = (int64_t)(host_ns - ((uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec));
	int64_t mag = off < 0 ? -off : off;
	if (mag < CLOCK_SLEW_MIN_NS)
		return;
	if (!a->nlive || (mag >= CLOCK_STEP_NS && off > 0)) {
		struct timespec ts = { .tv_sec = (time_t)(host_ns / 1000000000u),
				       .tv_nsec = (long)(host_ns % 1000000000u) };
		if (clock_settime(CLOCK_REALTIME, &ts) < 0)
			sbx_guest_log("agent: clock: step: %s", strerror(errno));
		return;
	}
	if (mag > CLOCK_STEP_NS)
		off = off < 0 ? -CLOCK_STEP_NS : CLOCK_STEP_NS;
	struct timeval d = { .tv_sec = (time_t)(off / 1000000000), .tv_usec = (suseconds_t)(off % 1000000000 / 1000) };
	if (adjtime(&d, NULL) < 0)
		sbx_guest_log("agent: clock: slew: %s", strerror(errno));
}

void on_ping(struct agent *a, const struct sbx_frame *f)
{
	struct sbx_tlv_it it;
	const uint8_t *val;
	uint16_t tag;
	uint32_t n;
	uint64_t t = 0;
	sbx_tlv_init(&it, f->payload, f->len);
	while (sbx_tlv_next(&it, &tag, &val, &n) == 1)
		if (tag == SBX_T_TIME_NS && sbx_tlv_as_u64(val, n, &t) == 0)
			clock_follow(a, t);
	/* Echoed whatever it holds: the host matches PONGs by stream. */
	sbx_frame_raw(&a->out, SBX_F_PONG, f->stream, f->payload, f->len);
}
