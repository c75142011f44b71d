// kv_server's RedisBloom commands through node-redis (v4)'s `client.bf`: reserve, add, mAdd,
// exists, mExists, insert with its options, info, and RedisBloom's errors. Run by
// tests/kv_server_bloom.rs: `node bloom.js PORT`; a failed check rejects, and the exit
// status is not 0.
'use strict';
const assert = require('assert/strict');
const { createClient } = require('redis');

const port = Number(process.argv[2]);

(async () => {
  const c = createClient({ socket: { host: '127.0.0.1', port } });
  c.on('error', (e) => { throw e; });
  await c.connect();
  assert.equal(await c.bf.reserve('ids', 0.01, 500, { EXPANSION: 4 }), 'OK');
  await assert.rejects(c.bf.reserve('ids', 0.01, 500), /item exists/);
  assert.equal(await c.bf.add('ids', 'u1'), true);
  assert.equal(await c.bf.add('ids', 'u1'), false);
  assert.deepEqual(await c.bf.mAdd('ids', ['u2', 'u1', 'u3']), [true, false, true]);
  assert.equal(await c.bf.exists('ids', 'u2'), true);
  assert.equal(await c.bf.exists('ids', 'nope'), false);
  assert.deepEqual(await c.bf.mExists('ids', ['u3', 'nope']), [true, false]);
  const info = await c.bf.info('ids');
  assert.equal(info.capacity, 500);
  assert.equal(info.numberOfInsertedItems, 3);
  assert.equal(info.expansionRate, 4);
  assert.deepEqual(
    await c.bf.insert('fixed', ['a', 'b'], { CAPACITY: 2, ERROR: 0.001, NONSCALING: true }),
    [true, true],
  );
  await assert.rejects(c.bf.add('fixed', 'c'), /non scaling filter is full/);
  await assert.rejects(c.bf.insert('none', ['a'], { NOCREATE: true }), /not found/);
  assert.equal(await c.type('ids'), 'MBbloom--');
  await c.set('s', 'v');
  await assert.rejects(c.bf.add('s', 'x'), /WRONGTYPE/);
  assert.equal(await c.del('ids'), 1);
  assert.equal(await c.bf.exists('ids', 'u1'), false);
  await c.quit();
  console.log('node-redis: client.bf reserve, add, mAdd, exists, mExists, insert, info');
})().catch((e) => { console.error(e); process.exit(1); });
