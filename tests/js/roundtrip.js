// PouchDB <-> settee serve round trip, driven by tests/test_http_clients.py.
//
// usage: node roundtrip.js http://127.0.0.1:PORT/DB
// Replicates DB into an in-memory PouchDB, edits it there (update, create,
// delete, and a conflict through new_edits=false), replicates back, and prints
// one JSON object: both replications' results and every revision leaf of every
// document on both sides, so the caller can check the two sides are identical.
'use strict';

const PouchDB = require('pouchdb-core')
  .plugin(require('pouchdb-adapter-memory'))
  .plugin(require('pouchdb-adapter-http'))
  .plugin(require('pouchdb-replication'));

async function leaves(db) {
  const changes = await db.changes({ since: 0, style: 'all_docs' });
  const ids = changes.results.map((row) => row.id).sort();
  const out = {};
  for (const id of ids) {
    const revs = await db.get(id, { open_revs: 'all', revs: true });
    out[id] = revs
      .filter((r) => r.ok)
      .map((r) => r.ok)
      .sort((a, b) => (a._rev < b._rev ? -1 : a._rev > b._rev ? 1 : 0));
  }
  return out;
}

function summary(result) {
  return {
    ok: result.ok,
    docs_read: result.docs_read,
    docs_written: result.docs_written,
    doc_write_failures: result.doc_write_failures,
    errors: result.errors,
  };
}

async function main() {
  const remote = new PouchDB(process.argv[2]);
  const mem = new PouchDB('roundtrip', { adapter: 'memory' });

  const there = await PouchDB.replicate(remote, mem);

  const d0 = await mem.get('d0');
  await mem.put({ ...d0, edited: 'in pouch' });
  await mem.put({ _id: 'from-pouch', n: 1 });
  const d2 = await mem.get('d2');
  await mem.remove(d2);
  const d1 = await mem.get('d1', { revs: true });
  await mem.put({ ...d1, _revisions: undefined, side: 'pouch-edit' });
  await mem.bulkDocs(
    [{ _id: 'd1', side: 'pouch', _revisions: { start: 2, ids: ['f'.repeat(32), d1._revisions.ids[0]] } }],
    { new_edits: false }
  );

  const back = await PouchDB.replicate(mem, remote);
  // A second pass must find nothing left to copy in either direction.
  const again = await PouchDB.replicate(remote, mem);

  console.log(
    JSON.stringify({
      there: summary(there),
      back: summary(back),
      again: summary(again),
      mem: await leaves(mem),
      remote: await leaves(remote),
    })
  );
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
