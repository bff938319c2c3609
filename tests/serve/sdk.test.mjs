// The E2B JS SDK (tests/fixtures/e2b-sdk, pinned) against sbx-serve, as an
// agent written for E2B runs it: only E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY set (tests/t2000-serve.t starts the service).  Run with
// node --test; E2B_SDK is the SDK's module, SBX_TEMPLATE a template with
// bash (the SDK runs every command with /bin/bash -l -c).
import { test } from 'node:test'
import assert from 'node:assert/strict'

const { Sandbox, CommandExitError, AuthenticationError, SandboxNotFoundError } = await import(process.env.E2B_SDK)
const T = process.env.SBX_TEMPLATE

test('create, run, kill', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000, metadata: { job: 'sdk-test' } })
	try {
		assert.match(sbx.sandboxId, /^s-[0-9a-f]{12}$/)
		const r = await sbx.commands.run('echo hi; echo oops >&2')
		assert.equal(r.exitCode, 0)
		assert.equal(r.stdout, 'hi\n')
		assert.equal(r.stderr, 'oops\n')
		const e = await sbx.commands.run('exit 7').catch((x) => x)
		assert.ok(e instanceof CommandExitError, `a failing command throws CommandExitError (${e})`)
		assert.equal(e.exitCode, 7)
		const env = await sbx.commands.run('echo "$FOO"; pwd', { envs: { FOO: 'bar baz' }, cwd: '/tmp' })
		assert.equal(env.stdout, 'bar baz\n/tmp\n')
		const big = await sbx.commands.run('head -c 3000000 /dev/zero | tr "\\0" x')
		assert.equal(big.stdout.length, 3000000, 'three megabytes of output, streamed whole')
		const info = await sbx.getInfo()
		assert.equal(info.sandboxId, sbx.sandboxId)
		assert.equal(info.templateId, T)
		assert.deepEqual(info.metadata, { job: 'sdk-test' })
		assert.equal(info.state, 'running')
		const listed = await Sandbox.list().nextItems()
		assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId), 'list has it')
		const mine = await Sandbox.list({ query: { metadata: { job: 'sdk-test' }, state: ['running'] } }).nextItems()
		assert.deepEqual(mine.map((s) => s.sandboxId), [sbx.sandboxId], 'a metadata filter finds it alone')
		const none = await Sandbox.list({ query: { metadata: { job: 'other & more' } } }).nextItems()
		assert.equal(none.length, 0, 'and another value finds nothing')
		assert.equal((await Sandbox.list({ query: { state: ['paused'] } }).nextItems()).length, 0, 'nor a paused filter')
		assert.equal(await sbx.isRunning(), true)
	} finally {
		await sbx.kill()
	}
	await assert.rejects(sbx.getInfo(), SandboxNotFoundError, 'gone once killed')
	assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a second kill says it was not there')
})

test('connect to a running sandbox by its ID', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000 })
	try {
		const again = await Sandbox.connect(sbx.sandboxId)
		const r = await again.commands.run('echo again')
		assert.equal(r.stdout, 'again\n')
	} finally {
		await sbx.kill()
	}
})

test('a wrong API key is refused', async () => {
	await assert.rejects(
		Sandbox.create(T, { apiKey: 'e2b_' + '0'.repeat(40) }),
		AuthenticationError
	)
})

test('background commands: list, connect, stdin, kill', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000 })
	try {
		let seen
		const started = new Promise((resolve) => { seen = resolve })
		const bg = await sbx.commands.run('echo started; sleep 600', {
			background: true,
			onStdout: (d) => d.includes('started') && seen(),
		})
		assert.ok(bg.pid > 0, `a pid (${bg.pid})`)
		await started // its output is there before anyone connects to it
		const listed = await sbx.commands.list()
		const me = listed.find((p) => p.pid === bg.pid)
		assert.ok(me, 'listed while it runs')
		assert.equal(me.cmd, '/bin/bash')
		assert.deepEqual(me.args.slice(0, 2), ['-l', '-c'])
		const again = await sbx.commands.connect(bg.pid)
		assert.equal(await sbx.commands.kill(bg.pid), true, 'kill says it was there')
		const res = await again.wait().catch((e) => e)
		assert.notEqual(res.exitCode, 0, `ended by the kill (${res.exitCode})`)
		assert.match(again.stdout, /^started\n/, 'the connected handle has its output')
		assert.equal((await sbx.commands.list()).some((p) => p.pid === bg.pid), false, 'and it is no longer listed')
		assert.equal(await sbx.commands.kill(bg.pid), false, 'a second kill says it was not there')
		const cat = await sbx.commands.run('cat; echo done', { background: true, stdin: true })
		await sbx.commands.sendStdin(cat.pid, 'hello stdin\n')
		await sbx.commands.closeStdin(cat.pid)
		const out = await cat.wait()
		assert.equal(out.stdout, 'hello stdin\ndone\n')
	} finally {
		await sbx.kill()
	}
})

test('pause, then connect resumes', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000 })
	try {
		await sbx.commands.run('echo kept > /tmp/k')
		await sbx.pause()
		assert.equal((await sbx.getInfo()).state, 'paused')
		const back = await Sandbox.connect(sbx.sandboxId)
		assert.equal((await back.getInfo()).state, 'running')
		assert.equal((await back.commands.run('cat /tmp/k')).stdout, 'kept\n')
	} finally {
		await sbx.kill()
	}
})

test('onTimeout: pause (autoPause): paused at its timeout, connect resumes it', async () => {
	// A long timeout while it is set up, then a short one: the timeout
	// never comes in the middle of the command, however slow the host.
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000, lifecycle: { onTimeout: 'pause' } })
	try {
		assert.equal((await sbx.getInfo()).lifecycle?.onTimeout, 'pause', 'getInfo says what it does at its timeout')
		await sbx.commands.run('echo kept > /tmp/k')
		await sbx.setTimeout(3_000)
		let state = 'running'
		for (let i = 0; i < 600 && state !== 'paused'; i++) { // at most 120 s
			state = (await Sandbox.getInfo(sbx.sandboxId)).state
			if (state !== 'paused') await new Promise((r) => setTimeout(r, 200))
		}
		assert.equal(state, 'paused', 'past its timeout it is paused, not killed')
		const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
		const info = await back.getInfo()
		assert.equal(info.state, 'running', 'connect resumes it')
		assert.ok(info.endAt.getTime() - Date.now() > 200_000, `with the connect's timeout (ends ${info.endAt.toISOString()})`)
		assert.equal((await back.commands.run('cat /tmp/k')).stdout, 'kept\n', 'its files as they were')
	} finally {
		await sbx.kill()
	}
})

test('a command past its timeout is ended by sbx', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000 })
	try {
		const t0 = Date.now()
		const e = await sbx.commands.run('sleep 120', { timeoutMs: 3000 }).catch((x) => x)
		assert.ok(e instanceof Error, `it fails (${e})`)
		assert.ok(Date.now() - t0 < 60_000, 'at its deadline, not the command\'s end')
		let left = true
		for (let i = 0; i < 150 && left; i++) { // its end, at most 30 s after its deadline
			left = (await sbx.commands.list()).some((p) => p.cmd === '/bin/bash')
			if (left) await new Promise((r) => setTimeout(r, 200))
		}
		assert.equal(left, false, 'and it does not run on in the sandbox')
	} finally {
		await sbx.kill()
	}
})

test('setTimeout moves the end, and the sandbox ends then', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000 })
	try {
		const before = (await sbx.getInfo()).endAt.getTime()
		await sbx.setTimeout(600_000)
		const later = (await sbx.getInfo()).endAt.getTime()
		assert.ok(later > before + 200_000, `the end moved later (${before} -> ${later})`)
		await sbx.setTimeout(4_000)
		const soon = (await sbx.getInfo()).endAt.getTime()
		assert.ok(soon < before, 'and earlier')
		let running = true
		for (let i = 0; i < 120 && running; i++) {
			await new Promise((r) => setTimeout(r, 500))
			running = await sbx.isRunning()
		}
		assert.equal(running, false, 'it ended at its new time')
	} finally {
		await sbx.kill().catch(() => {})
	}
})

test('metrics: a host-measured sample', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000 })
	try {
		const m = await sbx.getMetrics()
		assert.equal(m.length, 1)
		assert.equal(m[0].cpuCount, 1)
		assert.ok(m[0].memTotal >= 64 << 20, `memTotal ${m[0].memTotal}`)
		assert.ok(m[0].memUsed > 0 && m[0].cpuUsedPct >= 0 && m[0].cpuUsedPct <= 100)
		assert.ok(m[0].diskTotal > 0, `diskTotal ${m[0].diskTotal}`)
		assert.ok(Math.abs(m[0].timestamp.getTime() - Date.now()) < 60_000)
	} finally {
		await sbx.kill()
	}
})

test('the default template is base: bash, node, /home/user', { skip: process.env.SBX_BASE !== '1' && 'no base template built' }, async () => {
	const sbx = await Sandbox.create({ timeoutMs: 300_000 })
	try {
		assert.equal((await sbx.getInfo()).templateId, 'base')
		const r = await sbx.commands.run('echo "$(whoami) $PWD"; node -e "console.log(6*7)"; git --version | cut -d" " -f1-2')
		assert.equal(r.stdout, 'user /home/user\n42\ngit version\n')
	} finally {
		await sbx.kill()
	}
})

test('fork: running copies with their running commands, each its own sandbox', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000 })
	try {
		await sbx.commands.run('echo original > /tmp/mark')
		const bg = await sbx.commands.run('while :; do echo tick; sleep 1; done', { background: true, timeoutMs: 0 })
		const forks = await sbx.fork({ count: 2 })
		assert.equal(forks.length, 2)
		for (const f of forks) {
			assert.ok(!(f instanceof Error), `a copy (${f})`)
			assert.notEqual(f.sandboxId, sbx.sandboxId)
			assert.equal((await f.commands.run('cat /tmp/mark')).stdout, 'original\n')
			assert.equal((await f.commands.run('hostname')).stdout.trim(), f.sandboxId, 'its own identity')
			const ps = await f.commands.list()
			assert.ok(ps.some((p) => p.pid === bg.pid), `the running command runs on in the copy (${JSON.stringify(ps)})`)
		}
		await forks[0].commands.run('echo changed > /tmp/mark')
		assert.equal((await sbx.commands.run('cat /tmp/mark')).stdout, 'original\n', 'the copies are apart')
		assert.equal(await sbx.commands.kill(bg.pid), true, 'and the source still has it')
		for (const f of forks) await f.kill()
	} finally {
		await sbx.kill()
	}
})

test('snapshots: createSnapshot, a sandbox from it, list, delete', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000 })
	let copy
	try {
		await sbx.commands.run('echo kept > /tmp/state')
		const bg = await sbx.commands.run('while :; do sleep 1; done', { background: true, timeoutMs: 0 })
		const snap = await sbx.createSnapshot({ name: 'sdk-snap' })
		assert.match(snap.snapshotId, /^sdk-snap@/)
		assert.deepEqual(snap.names, ['sdk-snap'])
		assert.ok((await sbx.commands.list()).some((p) => p.pid === bg.pid), 'the source runs on, its command too')
		const auto = await sbx.createSnapshot()
		assert.match(auto.snapshotId, /^snap-[0-9a-f]{8}@/, 'one the caller did not name is named for it')
		copy = await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000 })
		assert.notEqual(copy.sandboxId, sbx.sandboxId)
		assert.equal((await copy.commands.run('cat /tmp/state')).stdout, 'kept\n', 'a sandbox from it has its state')
		assert.ok((await copy.commands.list()).some((p) => p.pid === bg.pid), 'and its running command')
		const mine = (await sbx.listSnapshots().nextItems()).map((x) => x.snapshotId).sort()
		assert.deepEqual(mine, [auto.snapshotId, snap.snapshotId].sort(), 'listed as this sandbox\'s')
		const all = (await Sandbox.listSnapshots().nextItems()).map((x) => x.snapshotId)
		assert.ok(all.includes(snap.snapshotId), 'and among all of the key\'s')
		await copy.kill()
		copy = null
		assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
		assert.equal(await Sandbox.deleteSnapshot(auto.snapshotId), true)
		assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false, 'a deleted one is gone')
		const e = await Sandbox.create(snap.snapshotId).catch((x) => x)
		assert.ok(e instanceof Error, 'and no sandbox is made from it')
	} finally {
		if (copy) await copy.kill()
		await sbx.kill()
	}
})

test('a PTY: an interactive shell at its size, input, a resize, kill', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000 })
	const enc = new TextEncoder(), dec = new TextDecoder()
	const until = async (what, f) => {
		for (let i = 0; i < 300 && !f(); i++) await new Promise((r) => setTimeout(r, 100))
		assert.ok(f(), `${what} (the terminal showed ${JSON.stringify(out.slice(-400))})`)
	}
	let out = ''
	try {
		const term = await sbx.pty.create({ cols: 100, rows: 30, timeoutMs: 120_000, onData: (d) => { out += dec.decode(d) } })
		assert.ok(term.pid > 0)
		await sbx.pty.sendInput(term.pid, enc.encode('stty size; tty; echo MARK-$((6*7))\n'))
		await until('the shell answers', () => /MARK-42/.test(out))
		assert.match(out, /30 100/, 'at the size asked for')
		assert.match(out, /\/dev\/pts\//, 'on a terminal')
		await sbx.pty.resize(term.pid, { cols: 120, rows: 40 })
		await sbx.pty.sendInput(term.pid, enc.encode('stty size\n'))
		await until('the new size shows', () => /40 120/.test(out))
		assert.equal(await sbx.pty.kill(term.pid), true)
		await term.wait().catch(() => {})
	} finally {
		await sbx.kill()
	}
})

test('watchDir: events from inotify in the guest, recursive or not, then stop', async () => {
	const sbx = await Sandbox.create(T, { timeoutMs: 300_000 })
	const until = async (what, f) => {
		for (let i = 0; i < 300 && !f(); i++) await new Promise((r) => setTimeout(r, 100))
		assert.ok(f(), what)
	}
	try {
		await sbx.files.makeDir('/tmp/wd/sub')
		const flat = [], deep = []
		const h1 = await sbx.files.watchDir('/tmp/wd', (e) => { flat.push(`${e.type} ${e.name}`) })
		const h2 = await sbx.files.watchDir('/tmp/wd', (e) => { deep.push(`${e.type} ${e.name}`) }, { recursive: true })
		await sbx.files.write('/tmp/wd/a.txt', 'one')
		await sbx.commands.run('cd /tmp/wd && echo more >>a.txt && mv a.txt b.txt && chmod 600 b.txt && touch sub/c && rm b.txt && touch end')
		await until(`the events came (${flat})`, () => flat.includes('create end') && deep.includes('create end'))
		for (const e of ['create a.txt', 'write a.txt', 'rename a.txt', 'create b.txt', 'chmod b.txt', 'remove b.txt'])
			assert.ok(flat.includes(e), `${e} (saw ${flat})`)
		assert.ok(!flat.some((e) => e.includes('sub/')), `not recursive: nothing of sub/ (${flat})`)
		assert.ok(deep.includes('create sub/c'), `recursive: sub/c (${deep})`)
		await h1.stop()
		await h2.stop()
		const seen = flat.length
		await sbx.files.write('/tmp/wd/after', 'x')
		await new Promise((r) => setTimeout(r, 2000))
		assert.equal(flat.length, seen, 'none after stop()')
		let left = 1
		for (let i = 0; i < 150 && left; i++) { // the guest's watchers end with their streams
			left = Number((await sbx.commands.run(
				'for p in /proc/[0-9]*; do tr "\\0" " " <$p/cmdline 2>/dev/null; echo; done | grep -c "^/run/sbx/guest-init --watch" || true')).stdout.trim())
			if (left) await new Promise((r) => setTimeout(r, 200))
		}
		assert.equal(left, 0, 'and no watcher runs on in the guest')
		await assert.rejects(sbx.files.watchDir('/tmp/nope', () => {}), (e) => /NotFound/.test(e.name),
			'a missing directory is refused')
	} finally {
		await sbx.kill()
	}
})
