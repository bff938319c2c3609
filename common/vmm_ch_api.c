/* Cloud Hypervisor's REST API as sbx speaks it (vmm_ch.h): the request
 * bodies and the response parsers, pure functions of their input, unit-
 * tested against the OpenAPI schema and the documented responses
 * (t0020) and fuzzed (fuzz-ch).  The transport and the process are
 * vmm_ch.c. */
#include "vmm_ch.h"
#include "jail.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

/* ---- request bodies ---------------------------------------------------- */

/* A RateLimiterConfig: token buckets refilled each second, so size is the
 * rate; absent buckets are unlimited. */
static json_t *rate_limiter(uint64_t bps, unsigned ops)
{
	json_t *r = json_object();
	if (r && bps)
		json_object_set_new(r, "bandwidth",
				    json_pack("{s:I, s:i}", "size", (json_int_t)bps, "refill_time", 1000));
	if (r && ops)
		json_object_set_new(r, "ops", json_pack("{s:i, s:i}", "size", (int)ops, "refill_time", 1000));
	return r;
}

static int add_disk(json_t *disks, const char *path, const char *id, int readonly, int throttled)
{
	/* image_type pinned to Raw: the scratch disk and workspaces hold
	 * guest-written bytes, and a guest must not make them look like a
	 * qcow2 image (with a backing file) to the next VMM that opens them.
	 * serial: guest-init finds its disks by virtio-blk serial. */
	char serial[32];
	snprintf(serial, sizeof serial, "sbx-%s", id);
	json_t *d = json_pack("{s:s, s:b, s:s, s:s, s:s}", "path", path, "readonly", readonly, "serial", serial, "id",
			      id, "image_type", "Raw");
	/* The session's writable disks share one group, as QEMU's throttle
	 * group (vmm_qemu.c): together they get the policy's rate. */
	if (d && throttled && !readonly && json_object_set_new(d, "rate_limit_group", json_string("sbx")) < 0) {
		json_decref(d);
		return -1;
	}
	return json_array_append_new(disks, d);
}

json_t *sbx_ch_vm_config(const struct sbx_vm_config *c, const char *cmdline)
{
	unsigned vcpus = c->vcpus ? c->vcpus : 1;
	json_t *o = json_pack("{s:{s:i, s:i}, s:{s:I}, s:{s:s, s:s}, s:{s:s}, s:{s:s}, s:b}", "cpus", "boot_vcpus",
			      (int)vcpus, "max_vcpus", (int)vcpus, "memory", "size",
			      (json_int_t)(c->memory_mib ? c->memory_mib : 256) << 20, "payload", "kernel",
			      c->kernel ? c->kernel : "", "cmdline", cmdline, "rng", "src", "/dev/urandom",
			      /* virtio-console off: the 8250 (ttyS0) is the console */
			      "console", "mode", "Off",
			      /* a panic reaches the event monitor as guest/panic */
			      "pvpanic", 1);
	if (!o)
		return NULL;
	int rc = 0;
	if (c->initrd)
		rc |= json_object_set_new(json_object_get(o, "payload"), "initramfs", json_string(c->initrd));
	rc |= json_object_set_new(o, "serial",
				  c->console_path ? json_pack("{s:s, s:s}", "mode", "File", "file", c->console_path)
						  : json_pack("{s:s}", "mode", "Tty"));
	int throttled = (c->disk_bps || c->disk_iops) && (c->scratch || c->vol_rw_mask);
	if (throttled)
		rc |= json_object_set_new(o, "rate_limit_groups",
					  json_pack("[{s:s, s:o}]", "id", "sbx", "rate_limiter_config",
						    rate_limiter(c->disk_bps, c->disk_iops)));
	if (c->rootfs || c->scratch || c->nvols) {
		json_t *d = json_array();
		rc |= json_object_set_new(o, "disks", d);
		if (c->rootfs)
			rc |= add_disk(d, c->rootfs, "root", 1, 0);
		if (c->scratch)
			rc |= add_disk(d, c->scratch, "scratch", 0, throttled);
		for (unsigned i = 0; i < c->nvols && i < 8; i++) {
			char id[8];
			snprintf(id, sizeof id, "vol%u", i);
			rc |= add_disk(d, c->vol_path[i], id, !(c->vol_rw_mask & (1u << i)), throttled);
		}
	}
	if (c->vsock_sock)
		rc |= json_object_set_new(
			o, "vsock",
			json_pack("{s:i, s:s, s:s}", "cid", SBX_CH_VSOCK_CID, "socket", c->vsock_sock, "id", "vsock0"));
	if (c->tap_name) {
		json_t *n = json_pack("{s:s, s:s}", "tap", c->tap_name, "id", "net0");
		if (n && c->mac)
			rc |= json_object_set_new(n, "mac", json_string(c->mac));
		/* Shaped here (the queue waits), where the namespace's nftables
		 * rules can only drop (netns.c). */
		if (n && c->net_rate)
			rc |= json_object_set_new(n, "rate_limiter_config", rate_limiter(c->net_rate, 0));
		rc |= json_object_set_new(o, "net", json_pack("[o]", n));
	}
	if (rc) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *sbx_ch_create_body(const struct sbx_vm_config *cfg, int jail, struct sbx_err *err)
{
	struct sbx_vm_config view;
	char cmdline[1024];
	if (jail)
		sbx_jail_view(cfg, &view);
	else
		view = *cfg;
	if (sbx_vm_cmdline(&view, cmdline, sizeof cmdline, err) < 0)
		return NULL;
	json_t *o = sbx_ch_vm_config(&view, cmdline);
	if (!o)
		sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot build the VM configuration");
	return o;
}

static json_t *url_body(const char *key, const char *dir)
{
	char url[PATH_MAX + 8];
	snprintf(url, sizeof url, "file://%s", dir);
	return json_pack("{s:s}", key, url);
}

json_t *sbx_ch_snapshot_config(const char *dir)
{
	return url_body("destination_url", dir);
}

json_t *sbx_ch_restore_config(const char *dir)
{
	json_t *o = url_body("source_url", dir);
	if (o && json_object_set_new(o, "resume", json_false()) < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* The element of array a whose "id" is id. */
static json_t *by_id(json_t *a, const char *id)
{
	size_t i;
	json_t *v;
	json_array_foreach (a, i, v) {
		const char *vid = json_string_value(json_object_get(v, "id"));
		if (vid && id && !strcmp(vid, id))
			return v;
	}
	return NULL;
}

/* Every device of kind in one config has its id in the other. */
static int same_ids(json_t *snap, const json_t *fresh, const char *kind, struct sbx_err *err)
{
	json_t *s = json_object_get(snap, kind), *f = json_object_get(fresh, kind), *v;
	size_t i;
	json_array_foreach (f, i, v)
		if (!by_id(s, json_string_value(json_object_get(v, "id"))))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "the snapshot has no %s device '%s' for this session", kind,
					   json_string_value(json_object_get(v, "id")));
	json_array_foreach (s, i, v)
		if (!by_id(json_object_get(fresh, kind), json_string_value(json_object_get(v, "id"))))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "the snapshot has a %s device '%s' this session lacks", kind,
					   json_string_value(json_object_get(v, "id")));
	return 0;
}

int sbx_ch_restore_patch(json_t *snap, const json_t *fresh, struct sbx_err *err)
{
	if (!json_is_object(snap) || !json_is_object(json_object_get(snap, "payload")))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "the snapshot's config.json is not a VmConfig");
	if (same_ids(snap, fresh, "disks", err) < 0 || same_ids(snap, fresh, "net", err) < 0)
		return -1;
	if (!json_object_get(snap, "vsock") != !json_object_get(fresh, "vsock"))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "the snapshot and the session differ in their vsock device");
	json_t *sp = json_object_get(snap, "payload"), *fp = json_object_get(fresh, "payload");
	static const char *const payload_paths[] = { "kernel", "initramfs" };
	int rc = 0;
	for (size_t i = 0; i < SBX_ARRAY_LEN(payload_paths); i++)
		if (json_object_get(fp, payload_paths[i]))
			rc |= json_object_set(sp, payload_paths[i], json_object_get(fp, payload_paths[i]));
	size_t i;
	json_t *v;
	json_array_foreach (json_object_get(fresh, "disks"), i, v) {
		json_t *d = by_id(json_object_get(snap, "disks"), json_string_value(json_object_get(v, "id")));
		rc |= json_object_set(d, "path", json_object_get(v, "path"));
		rc |= json_object_set(d, "readonly", json_object_get(v, "readonly"));
	}
	json_array_foreach (json_object_get(fresh, "net"), i, v)
		if (json_object_get(v, "tap"))
			rc |= json_object_set(
				by_id(json_object_get(snap, "net"), json_string_value(json_object_get(v, "id"))), "tap",
				json_object_get(v, "tap"));
	if (json_object_get(fresh, "vsock"))
		rc |= json_object_set(json_object_get(snap, "vsock"), "socket",
				      json_object_get(json_object_get(fresh, "vsock"), "socket"));
	if (json_object_get(fresh, "serial"))
		rc |= json_object_set(snap, "serial", json_object_get(fresh, "serial"));
	if (rc)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot re-point the snapshot's configuration");
	return 0;
}

/* ---- response parsers -------------------------------------------------- */

static void one_line(char *s)
{
	for (char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
}

void sbx_ch_error_text(const char *body, size_t n, char *out, size_t cap)
{
	if (!cap)
		return;
	out[0] = 0;
	json_t *j = n ? json_loadb(body, n, JSON_DECODE_ANY, NULL) : NULL;
	size_t len = 0;
	if (json_is_array(j)) {
		size_t i;
		json_t *v;
		json_array_foreach (j, i, v) {
			const char *m = json_string_value(v);
			if (m && *m && len < cap)
				len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ": " : "", m);
		}
	} else if (json_is_string(j)) {
		snprintf(out, cap, "%s", json_string_value(j));
	} else if (n) {
		snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), body);
	}
	json_decref(j);
	one_line(out);
	if (!out[0])
		snprintf(out, cap, "(no details)");
}

int sbx_ch_parse_info(const char *body, size_t n, char *state, size_t cap)
{
	json_t *j = json_loadb(body, n, 0, NULL);
	const char *s = json_string_value(json_object_get(j, "state"));
	int rc = s && json_is_object(json_object_get(j, "config")) ? 0 : -1;
	if (rc == 0)
		snprintf(state, cap, "%s", s);
	json_decref(j);
	return rc;
}

int sbx_ch_parse_counters(const char *body, size_t n, struct sbx_vm_counters *c)
{
	static const struct {
		const char *name;
		size_t off;
	} known[] = {
		{ "read_bytes", offsetof(struct sbx_vm_counters, disk_read_bytes) },
		{ "write_bytes", offsetof(struct sbx_vm_counters, disk_write_bytes) },
		{ "read_ops", offsetof(struct sbx_vm_counters, disk_read_ops) },
		{ "write_ops", offsetof(struct sbx_vm_counters, disk_write_ops) },
		{ "rx_bytes", offsetof(struct sbx_vm_counters, net_rx_bytes) },
		{ "tx_bytes", offsetof(struct sbx_vm_counters, net_tx_bytes) },
	};
	memset(c, 0, sizeof *c);
	json_t *j = json_loadb(body, n, 0, NULL), *dev, *v;
	const char *id, *name;
	int rc = json_is_object(j) ? 0 : -1;
	json_object_foreach (j, id, dev) {
		if (!json_is_object(dev)) {
			rc = -1;
			break;
		}
		json_object_foreach (dev, name, v) {
			if (!json_is_integer(v) || json_integer_value(v) < 0) {
				rc = -1;
				continue;
			}
			for (size_t k = 0; k < SBX_ARRAY_LEN(known); k++)
				if (!strcmp(name, known[k].name))
					*(uint64_t *)((char *)c + known[k].off) += (uint64_t)json_integer_value(v);
		}
	}
	json_decref(j);
	return rc;
}

int sbx_ch_parse_ping(const char *body, size_t n, char *version, size_t cap)
{
	json_t *j = json_loadb(body, n, 0, NULL);
	const char *v = json_string_value(json_object_get(j, "version"));
	int major = -1;
	if (v) {
		snprintf(version, cap, "%s", v);
		const char *p = v + (v[0] == 'v');
		if (isdigit((unsigned char)*p))
			major = (int)strtol(p, NULL, 10);
	}
	json_decref(j);
	return major;
}

static int event_kind(json_t *e)
{
	const char *src = json_string_value(json_object_get(e, "source"));
	const char *ev = json_string_value(json_object_get(e, "event"));
	if (!src || !ev)
		return SBX_VM_EV_NONE;
	if (!strcmp(src, "guest") && !strcmp(ev, "panic"))
		return SBX_VM_EV_PANIC;
	if (!strcmp(src, "vm") && (!strcmp(ev, "rebooting") || !strcmp(ev, "rebooted")))
		return SBX_VM_EV_REBOOT;
	if (!strcmp(src, "vm") && !strcmp(ev, "shutdown"))
		return SBX_VM_EV_SHUTDOWN;
	return SBX_VM_EV_NONE;
}

int sbx_ch_event_severity(int k)
{
	return k == SBX_VM_EV_PANIC ? 3 : k == SBX_VM_EV_REBOOT ? 2 : k == SBX_VM_EV_SHUTDOWN ? 1 : 0;
}

int sbx_ch_events_feed(struct sbx_ch_events *ev, const char *data, size_t n)
{
	int worst = SBX_VM_EV_NONE;
	while (n) {
		size_t take = n < sizeof ev->buf - ev->len ? n : sizeof ev->buf - ev->len;
		memcpy(ev->buf + ev->len, data, take);
		ev->len += take;
		data += take;
		n -= take;
		size_t off = 0;
		for (;;) {
			while (off < ev->len && ev->buf[off] != '{')
				off++; /* whitespace between objects, or garbage */
			if (off == ev->len)
				break;
			json_error_t je;
			json_t *e = json_loadb(ev->buf + off, ev->len - off, JSON_DISABLE_EOF_CHECK, &je);
			if (!e && json_error_code(&je) == json_error_premature_end_of_input)
				break; /* the rest of it has not arrived */
			if (!e) {
				off++; /* not an event: look for the next object */
				continue;
			}
			int k = event_kind(e);
			json_decref(e);
			if (sbx_ch_event_severity(k) > sbx_ch_event_severity(worst))
				worst = k;
			off += (size_t)je.position;
		}
		memmove(ev->buf, ev->buf + off, ev->len - off);
		ev->len -= off;
		if (ev->len == sizeof ev->buf)
			ev->len = 0; /* one object larger than we keep: drop it */
	}
	return worst;
}

int sbx_ch_vsock_reply(const char *buf, size_t n)
{
	static const char ok[] = "OK ";
	for (size_t i = 0; i < n && i < 3; i++)
		if (buf[i] != ok[i])
			return -1;
	if (n <= 3)
		return 0;
	size_t i = 3;
	while (i < n && i < 14 && isdigit((unsigned char)buf[i]))
		i++;
	if (i == n)
		return i < 14 ? 0 : -1;
	return buf[i] == '\n' && i > 3 && i == n - 1 ? 1 : -1;
}
