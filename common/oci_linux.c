/* config.json's linux.resources and mounts, as a session can honour them
 * (oci_spec.h).  A container is a VM: its memory and CPUs are the VM's,
 * its /proc, /sys and /dev the guest kernel's.  What has no meaning for a
 * VM, or that sbx cannot do, is refused naming the field, never dropped. */
#include <errno.h>
#include <string.h>

#include "oci_spec.h"

/* resources.memory, vcpus, cpu_limit and pids.per_session's ranges
 * (sbx-policy(5)), so a container gets no shape a policy file could not
 * give. */
#define MEM_MIN (64ull << 20)
#define MEM_MAX (64ull << 30)
#define VCPUS_MAX 64u
#define CPU_MILLI_MIN 50u
#define CPU_MILLI_MAX 64000u
#define PIDS_MAX 1048576u

#define BAD(...) sbx_err_set(err, SBX_EXIT_INVALID, 0, "invalid config.json: " __VA_ARGS__)

/* An integer field: *out, *have 1 when present; 3 when of another type. */
static int int_field(json_t *o, const char *obj, const char *k, json_int_t *out, int *have, struct sbx_err *err)
{
	json_t *v = json_object_get(o, k);
	*have = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v))
		return BAD("linux.resources.%s.%s must be an integer", obj, k);
	*out = json_integer_value(v);
	*have = 1;
	return 0;
}

/* Keys of o outside allowed (a NULL-terminated list) are refused, unless
 * their value is null, zero, false, "" or empty: an engine fills some in. */
static int only_keys(json_t *o, const char *obj, const char *const *allowed, const char *why, struct sbx_err *err)
{
	const char *k;
	json_t *v;
	json_object_foreach (o, k, v) {
		int ok = 0;
		for (const char *const *a = allowed; *a && !ok; a++)
			ok = !strcmp(*a, k);
		int empty = json_is_null(v) || json_is_false(v) || (json_is_integer(v) && !json_integer_value(v)) ||
			    (json_is_string(v) && !json_string_length(v)) ||
			    (json_is_array(v) && !json_array_size(v)) || (json_is_object(v) && !json_object_size(v));
		if (!ok && !empty)
			return BAD("linux.resources.%s%s%.64s is not supported by sbx-oci (%s)", obj, *obj ? "." : "",
				   k, why);
	}
	return 0;
}

static int memory(json_t *m, struct sbx_oci_resources *res, struct sbx_err *err)
{
	if (!json_is_object(m))
		return BAD("linux.resources.memory must be an object");
	/* swap: the guest has none, so memory and swap together are the
	 * limit alone, which is within whatever swap allows. */
	static const char *const keys[] = { "limit", "swap", NULL };
	if (only_keys(m, "memory", keys, "a container's memory is its VM's: give limit", err) < 0)
		return -1;
	json_int_t limit, swap;
	int have, have_swap;
	if (int_field(m, "memory", "limit", &limit, &have, err) < 0 ||
	    int_field(m, "memory", "swap", &swap, &have_swap, err) < 0)
		return -1;
	if (!have || limit == -1)
		return 0; /* no limit: the policy's memory */
	if (limit < (json_int_t)MEM_MIN || (uint64_t)limit > MEM_MAX)
		return BAD("linux.resources.memory.limit %lld is out of range: a session's memory is 64M to 64G",
			   (long long)limit);
	/* Up to a whole MiB, as a VM's memory is: the guest gets at least
	 * what was asked for, never less. */
	res->memory = ((uint64_t)limit + (1u << 20) - 1) & ~((uint64_t)(1u << 20) - 1);
	return 0;
}

static int cpu(json_t *c, struct sbx_oci_resources *res, struct sbx_err *err)
{
	if (!json_is_object(c))
		return BAD("linux.resources.cpu must be an object");
	/* Every session has the cgroup's default weight (cpu.weight 100,
	 * 1024 shares), and ctr asks for exactly that by default: it is
	 * what the container gets.  Any other weight it would not get. */
	json_t *sh = json_object_get(c, "shares");
	if (sh && !json_is_null(sh) &&
	    (!json_is_integer(sh) || (json_integer_value(sh) != 0 && json_integer_value(sh) != 1024)))
		return BAD("linux.resources.cpu.shares is not supported by sbx-oci but as 1024: every session has "
			   "the default CPU weight; give a quota");
	static const char *const keys[] = { "quota", "period", "shares", NULL };
	if (only_keys(c, "cpu", keys,
		      "a session has vCPUs and a host CPU limit, no weight, pinning or realtime: give quota and period",
		      err) < 0)
		return -1;
	json_int_t quota, period = 100000;
	int have_q, have_p;
	if (int_field(c, "cpu", "quota", &quota, &have_q, err) < 0 ||
	    int_field(c, "cpu", "period", &period, &have_p, err) < 0)
		return -1;
	if (!have_p || period == 0)
		period = 100000; /* the kernel's default, as runc takes it */
	if (period < 1000 || period > 1000000)
		return BAD("linux.resources.cpu.period %lld is out of range (1000 to 1000000 us)", (long long)period);
	if (!have_q || quota <= 0)
		return 0; /* -1 or none: no quota, the policy's CPUs */
	if (quota > (json_int_t)CPU_MILLI_MAX * 1000)
		return BAD("linux.resources.cpu.quota %lld is out of range", (long long)quota);
	/* CPUs in thousandths, rounded up so the limit is never below the
	 * quota; the VM gets as many vCPUs as that covers. */
	uint64_t milli = ((uint64_t)quota * 1000 + (uint64_t)period - 1) / (uint64_t)period;
	if (milli < CPU_MILLI_MIN || milli > CPU_MILLI_MAX)
		return BAD("linux.resources.cpu quota/period %lld/%lld is %.3f CPUs: a session's CPU limit is 0.05 "
			   "to 64",
			   (long long)quota, (long long)period, (double)milli / 1000);
	res->cpu_milli = (unsigned)milli;
	res->vcpus = (unsigned)((milli + 999) / 1000);
	return 0;
}

static int pids(json_t *p, struct sbx_oci_resources *res, struct sbx_err *err)
{
	if (!json_is_object(p))
		return BAD("linux.resources.pids must be an object");
	static const char *const keys[] = { "limit", NULL };
	if (only_keys(p, "pids", keys, "give limit", err) < 0)
		return -1;
	json_int_t limit;
	int have;
	if (int_field(p, "pids", "limit", &limit, &have, err) < 0)
		return -1;
	if (!have || limit <= 0)
		return 0; /* unlimited: the policy's limit stands, sbx has no "none" */
	if (limit > (json_int_t)PIDS_MAX)
		return BAD("linux.resources.pids.limit %lld is out of range: 1 to %u", (long long)limit, PIDS_MAX);
	res->pids = (unsigned)limit;
	return 0;
}

int sbx_oci_resources_parse(json_t *r, struct sbx_oci_resources *res, struct sbx_err *err)
{
	memset(res, 0, sizeof *res);
	if (!r || json_is_null(r))
		return 0;
	if (!json_is_object(r))
		return BAD("linux.resources must be an object");
	/* devices is the cgroup's list of host devices the container may
	 * open: a guest reaches no host device whatever it says. */
	static const char *const keys[] = { "devices", "memory", "cpu", "pids", NULL };
	if (only_keys(r, "", keys, "no block I/O, hugepage, network or unified cgroup limits in a session", err) < 0)
		return -1;
	json_t *d = json_object_get(r, "devices");
	if (d && !json_is_array(d) && !json_is_null(d))
		return BAD("linux.resources.devices must be an array");
	json_t *v;
	if ((v = json_object_get(r, "memory")) && !json_is_null(v) && memory(v, res, err) < 0)
		return -1;
	if ((v = json_object_get(r, "cpu")) && !json_is_null(v) && cpu(v, res, err) < 0)
		return -1;
	if ((v = json_object_get(r, "pids")) && !json_is_null(v) && pids(v, res, err) < 0)
		return -1;
	return 0;
}

/* A mount the guest has already: its kernel's file systems where a
 * container expects them, whatever options the engine asks for. */
static int guest_own(const char *type, const char *dst)
{
	static const char *const own[][2] = {
		{ "proc", "/proc" },
		{ "sysfs", "/sys" },
		{ "cgroup", "/sys/fs/cgroup" },
		{ "cgroup2", "/sys/fs/cgroup" },
		{ "devpts", "/dev/pts" },
		{ "mqueue", "/dev/mqueue" },
		{ "tmpfs", "/dev" },
		{ "tmpfs", "/dev/shm" },
		{ "tmpfs", "/run" },
	};
	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
		if (!strcmp(type, own[i][0]) && !strcmp(dst, own[i][1]))
			return 1;
	return 0;
}

/* A bind of a file the engine made for the container (Podman's hosts,
 * hostname, .containerenv and shm): the guest has its own, and the
 * engine's network and names are not the session's. */
static int engine_own(const char *dst)
{
	static const char *const own[] = { "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run/.containerenv",
					   "/dev/shm" };
	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
		if (!strcmp(dst, own[i]))
			return 1;
	return 0;
}

static int is_bind(json_t *m, const char *type)
{
	if (!strcmp(type, "bind"))
		return 1;
	json_t *o;
	size_t i;
	json_array_foreach (json_object_get(m, "options"), i, o)
		if (json_is_string(o) &&
		    (!strcmp(json_string_value(o), "bind") || !strcmp(json_string_value(o), "rbind")))
			return 1;
	return 0;
}

/* Printable ASCII, so a message can name it as it is. */
static int plain(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e)
			return 0;
	return 1;
}

static int one_mount(json_t *m, size_t i, struct sbx_err *err)
{
	if (!json_is_object(m))
		return BAD("mounts[%zu] must be an object", i);
	json_t *d = json_object_get(m, "destination"), *t = json_object_get(m, "type"),
	       *s = json_object_get(m, "source"), *o = json_object_get(m, "options");
	if (!json_is_string(d) || json_string_length(d) > SBX_OCI_PATH_MAX ||
	    strlen(json_string_value(d)) != json_string_length(d) || json_string_value(d)[0] != '/')
		return BAD("mounts[%zu].destination must be an absolute path of at most %u bytes", i, SBX_OCI_PATH_MAX);
	if ((t && !json_is_string(t)) || (s && !json_is_string(s)) || (o && !json_is_array(o)))
		return BAD("mounts[%zu]: type and source must be strings, options an array", i);
	const char *dst = json_string_value(d), *type = t ? json_string_value(t) : "";
	if (!plain(dst) || !plain(type) || strlen(type) != (t ? json_string_length(t) : 0))
		return BAD("mounts[%zu]: destination and type must be printable ASCII", i);
	if (is_bind(m, type))
		return engine_own(dst) ? 0
				       : BAD("mounts[%zu]: a bind mount on %.200s is not supported: sbx-oci puts no "
					     "host path in a guest (sbx-oci(1), MOUNTS)",
					     i, dst);
	if (guest_own(type, dst))
		return 0;
	return BAD("mounts[%zu]: a %.32s mount on %.200s is not supported: the guest's own file systems are its "
		   "kernel's (sbx-oci(1), MOUNTS)",
		   i, type[0] ? type : "typeless", dst);
}

int sbx_oci_mounts_check(json_t *m, struct sbx_err *err)
{
	if (!m || json_is_null(m))
		return 0;
	if (!json_is_array(m) || json_array_size(m) > SBX_OCI_MOUNTS_MAX)
		return BAD("mounts must be an array of at most %u", SBX_OCI_MOUNTS_MAX);
	json_t *e;
	size_t i;
	json_array_foreach (m, i, e)
		if (one_mount(e, i, err) < 0)
			return -1;
	return 0;
}
