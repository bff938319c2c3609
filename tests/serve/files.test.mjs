// The E2B JS SDK's filesystem API (sbx.files) against sbx-serve, with only
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set (tests/t2010-serve-files.t
// starts the service).  Run with node --test; E2B_SDK is the SDK's module,
// SBX_TEMPLATE a template whose user is "user" with its home /home/user.
// What a session's policy lets cross (files.writable, files.exportable) is
// /tmp and /workspace by default, so the files written here are under /tmp.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'

const { Sandbox, FileNotFoundError, NotFoundError, InvalidArgumentError, SandboxError } = await import(process.env.E2B_SDK)
const T = process.env.SBX_TEMPLATE
let sbx

before(async () => {
	sbx = await Sandbox.create(T, { timeoutMs: 600_000 })
})
after(async () => {
	await sbx?.kill()
})

test('write, read, exists, getInfo', async () => {
	const w = await sbx.files.write('/tmp/e2b/hello.txt', 'hello from the SDK\n')
	assert.equal(w.path, '/tmp/e2b/hello.txt')
	assert.equal(w.name, 'hello.txt')
	assert.equal(await sbx.files.read('/tmp/e2b/hello.txt'), 'hello from the SDK\n', 'read gives back what was written')
	const bytes = await sbx.files.read('/tmp/e2b/hello.txt', { format: 'bytes' })
	assert.equal(Buffer.from(bytes).toString(), 'hello from the SDK\n')
	assert.equal(await sbx.files.exists('/tmp/e2b/hello.txt'), true)
	assert.equal(await sbx.files.exists('/tmp/e2b/nothing-here'), false)
	const info = await sbx.files.getInfo('/tmp/e2b/hello.txt')
	assert.equal(info.type, 'file')
	assert.equal(info.name, 'hello.txt')
	assert.equal(info.path, '/tmp/e2b/hello.txt')
	assert.equal(info.size, 19)
	assert.equal(info.owner, 'user', 'written as the sandbox user')
	assert.match(info.permissions, /^-rw-/)
	assert.ok(info.modifiedTime instanceof Date && Math.abs(info.modifiedTime - Date.now()) < 3600_000,
		`modifiedTime is now-ish (${info.modifiedTime})`)
	const dir = await sbx.files.getInfo('/tmp/e2b')
	assert.equal(dir.type, 'dir')
	// The command API sees the same file: it is in the guest, nowhere else.
	const r = await sbx.commands.run('cat /tmp/e2b/hello.txt')
	assert.equal(r.stdout, 'hello from the SDK\n')
})

test('a relative path is under the user\'s home', async () => {
	const info = await sbx.files.getInfo('.bashrc')
	assert.equal(info.path, '/home/user/.bashrc')
	assert.equal(info.type, 'file')
	// where E2B code writes: the home is writable and exportable for the
	// service's sandboxes
	await sbx.files.write('notes.txt', 'in the home\n')
	assert.equal(await sbx.files.read('/home/user/notes.txt'), 'in the home\n')
	assert.equal((await sbx.commands.run('cat ~/notes.txt')).stdout, 'in the home\n')
})

test('makeDir, list with depth, rename, remove', async () => {
	assert.equal(await sbx.files.makeDir('/tmp/e2b/d/e'), true, 'makeDir makes the parents too')
	assert.equal(await sbx.files.makeDir('/tmp/e2b/d/e'), false, 'a second makeDir says it was there')
	await sbx.files.write('/tmp/e2b/d/e/f.txt', 'f')
	const one = await sbx.files.list('/tmp/e2b/d')
	assert.deepEqual(one.map((e) => [e.name, e.type]), [['e', 'dir']])
	const two = await sbx.files.list('/tmp/e2b/d', { depth: 2 })
	assert.deepEqual(two.map((e) => e.path).sort(), ['/tmp/e2b/d/e', '/tmp/e2b/d/e/f.txt'])
	const moved = await sbx.files.rename('/tmp/e2b/d/e/f.txt', '/tmp/e2b/moved/g.txt')
	assert.equal(moved.path, '/tmp/e2b/moved/g.txt')
	assert.equal(moved.type, 'file')
	assert.equal(await sbx.files.read('/tmp/e2b/moved/g.txt'), 'f')
	assert.equal(await sbx.files.exists('/tmp/e2b/d/e/f.txt'), false, 'gone from where it was')
	await sbx.files.remove('/tmp/e2b/d')
	assert.equal(await sbx.files.exists('/tmp/e2b/d'), false, 'remove takes a whole tree')
	await sbx.files.remove('/tmp/e2b/d') // as envd: removing what is not there is no error
})

test('several files in one write', async () => {
	const res = await sbx.files.write([
		{ path: '/tmp/e2b/many/a.txt', data: 'A' },
		{ path: '/tmp/e2b/many/b.txt', data: 'B' },
	])
	assert.deepEqual(res.map((e) => e.path), ['/tmp/e2b/many/a.txt', '/tmp/e2b/many/b.txt'])
	assert.equal(await sbx.files.read('/tmp/e2b/many/b.txt'), 'B')
})

test('a few megabytes, whole', async () => {
	const data = randomBytes(4 << 20)
	await sbx.files.write('/tmp/e2b/big.bin', new Blob([data]))
	const back = Buffer.from(await sbx.files.read('/tmp/e2b/big.bin', { format: 'bytes' }))
	assert.equal(back.length, data.length)
	assert.equal(createHash('sha256').update(back).digest('hex'), createHash('sha256').update(data).digest('hex'))
	assert.equal((await sbx.files.getInfo('/tmp/e2b/big.bin')).size, 4 << 20)
})

test('what is not there, and what may not be', async () => {
	const e = await sbx.files.read('/tmp/e2b/missing').catch((x) => x)
	assert.ok(e instanceof FileNotFoundError && e instanceof NotFoundError, `read of a missing file: NotFoundError (${e})`)
	await assert.rejects(sbx.files.getInfo('/tmp/e2b/missing'), FileNotFoundError)
	await assert.rejects(sbx.files.list('/tmp/e2b/missing'), FileNotFoundError)
	await assert.rejects(sbx.files.list('/tmp/e2b/hello.txt'), InvalidArgumentError, 'list of a file')
	// The guest's own permissions: the user cannot write /root; root can.
	await assert.rejects(sbx.files.makeDir('/root/x'), SandboxError)
	assert.equal(await sbx.files.makeDir('/root/x', { user: 'root' }), true)
	assert.equal((await sbx.files.getInfo('/root/x', { user: 'root' })).owner, 'root')
	// The session's files: rules: /etc is not writable through /files.
	await assert.rejects(sbx.files.write('/etc/e2b.txt', 'x', { user: 'root' }), SandboxError)
	await assert.rejects(sbx.files.read('/etc/passwd'), SandboxError, 'nor exportable')
})

test('watchDir: a write seen, and what is not there or may not be refused', async () => {
	await sbx.files.makeDir('/tmp/watched')
	const seen = []
	const h = await sbx.files.watchDir('/tmp/watched', (e) => { seen.push(`${e.type} ${e.name}`) })
	try {
		await sbx.files.write('/tmp/watched/w.txt', 'x')
		for (let i = 0; i < 300 && !seen.includes('create w.txt'); i++) await new Promise((r) => setTimeout(r, 100))
		assert.ok(seen.includes('create w.txt'), `the write's create (saw ${seen})`)
	} finally {
		await h.stop()
	}
	await assert.rejects(sbx.files.watchDir('/tmp/no-such-dir', () => {}), FileNotFoundError)
	await assert.rejects(sbx.files.watchDir('/root', () => {}), SandboxError, 'the user cannot read /root')
})
