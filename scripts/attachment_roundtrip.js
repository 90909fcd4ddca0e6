'use strict';
/*
 * The PouchDB half of scripts/attachment_roundtrip.py (run by it; not on its own).
 *
 *   node scripts/attachment_roundtrip.js CONFIG.json
 *
 * CONFIG names the settee and pouchdb-server URLs, the database names, the
 * replication options and where to write the result. Needs `pouchdb` and
 * `pouchdb-adapter-memory` on NODE_PATH (the .py sets it).
 *
 * Legs, each a one-shot replication driven from this process:
 *   1  settee/src          -> PouchDB 'local' (memory adapter, in this process)
 *   2  PouchDB 'local'     -> pouchdb-server/mid
 *   3  pouchdb-server/mid  -> settee/back
 *   3b the same as 3 again (must write nothing: checkpoints on settee)
 * Every HTTP request is logged (leg, server, method, URL, status, body size;
 * the body of any 4xx/5xx answer), and the local database is dumped (winners and
 * every leaf, attachments reduced to sha256) for the .py to compare.
 */

const fs = require('fs');
const crypto = require('crypto');
const PouchDB = require('pouchdb');
PouchDB.plugin(require('pouchdb-adapter-memory'));

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const requests = [];
let currentLeg = 'setup';

function bodySize(body) {
  if (body === undefined || body === null) return 0;
  if (typeof body === 'string') return Buffer.byteLength(body);
  if (Buffer.isBuffer(body)) return body.length;
  if (body.size !== undefined) return body.size;
  return -1;
}

function loggingFetch(server) {
  return async (url, opts) => {
    const started = Date.now();
    const entry = {
      leg: currentLeg,
      server,
      method: (opts && opts.method) || 'GET',
      url: String(url),
      request_bytes: bodySize(opts && opts.body),
    };
    requests.push(entry);
    // a hang is reported where it happens: every 30 s a request stays unanswered
    const slow = setInterval(() => {
      process.stdout.write(`  still waiting after ${Math.round((Date.now() - started) / 1000)} s: `
        + `${entry.method} ${entry.url} (${server}, leg ${entry.leg})\n`);
    }, 30000);
    try {
      const res = await PouchDB.fetch(url, opts);
      entry.status = res.status;
      entry.ms = Date.now() - started;
      if (res.status >= 400) {
        entry.response = (await res.clone().text()).slice(0, 2000);
      }
      return res;
    } catch (err) {
      entry.status = null;
      entry.ms = Date.now() - started;
      entry.error = String(err && err.stack || err);
      throw err;
    } finally {
      clearInterval(slow);
    }
  };
}

function plainError(err) {
  if (!err) return err;
  const out = {};
  for (const key of ['status', 'name', 'message', 'reason', 'error', 'id', 'docId']) {
    if (err[key] !== undefined) out[key] = err[key];
  }
  if (err.result) out.result = summarize(err.result);
  if (Object.keys(out).length === 0) out.text = String(err);
  return out;
}

function summarize(result) {
  if (!result) return result;
  const keys = ['ok', 'status', 'docs_read', 'docs_written', 'doc_write_failures',
    'last_seq', 'start_time', 'end_time'];
  const out = {};
  for (const key of keys) if (result[key] !== undefined) out[key] = result[key];
  out.errors = (result.errors || []).map(plainError);
  return out;
}

async function leg(name, fn) {
  currentLeg = name;
  const started = Date.now();
  process.stdout.write(`  leg ${name} ...\n`);
  let result;
  let error = null;
  try {
    result = summarize(await fn());
  } catch (err) {
    error = plainError(err);
  }
  const ms = Date.now() - started;
  process.stdout.write(`  leg ${name}: ${ms} ms ${error ? 'FAILED ' + JSON.stringify(error)
    : JSON.stringify({docs_read: result.docs_read, docs_written: result.docs_written,
      doc_write_failures: result.doc_write_failures, errors: result.errors.length})}\n`);
  return {name, ms, result, error};
}

function normAttachments(atts) {
  if (!atts) return atts;
  const out = {};
  for (const name of Object.keys(atts)) {
    const att = Object.assign({}, atts[name]);
    if (att.data !== undefined) {
      const data = Buffer.isBuffer(att.data) ? att.data : Buffer.from(att.data, 'base64');
      att.sha256 = crypto.createHash('sha256').update(data).digest('hex');
      att.bytes = data.length;
      delete att.data;
    }
    out[name] = att;
  }
  return out;
}

function normDoc(doc) {
  const out = Object.assign({}, doc);
  if (out._attachments) out._attachments = normAttachments(out._attachments);
  return out;
}

async function dumpLocal(db) {
  const changes = await db.changes({since: 0, style: 'all_docs'});
  const docs = {};
  for (const change of changes.results) {
    const id = change.id;
    const entry = {leaves: [], winner: null};
    const leaves = await db.get(id, {open_revs: 'all', revs: true, attachments: true, binary: true});
    for (const leaf of leaves) {
      entry.leaves.push(leaf.ok ? normDoc(leaf.ok) : leaf);
    }
    try {
      entry.winner = normDoc(await db.get(id, {
        revs: true, conflicts: true, deleted_conflicts: true, attachments: true, binary: true,
      }));
    } catch (err) {
      entry.winner = {status: err.status, error: err.name, reason: err.reason || err.message};
    }
    docs[id] = entry;
  }
  const info = await db.info();
  return {info: {doc_count: info.doc_count, update_seq: info.update_seq}, docs};
}

async function main() {
  const opts = {};
  if (cfg.batch_size) opts.batch_size = cfg.batch_size;
  if (cfg.batches_limit) opts.batches_limit = cfg.batches_limit;
  const src = new PouchDB(`${cfg.settee}/${cfg.src}`, {fetch: loggingFetch('settee'), skip_setup: true});
  const local = new PouchDB('rt-local', {adapter: 'memory'});
  const mid = new PouchDB(`${cfg.pserver}/${cfg.mid}`, {fetch: loggingFetch('pouchdb-server')});
  const back = new PouchDB(`${cfg.settee}/${cfg.back}`, {fetch: loggingFetch('settee')});

  const legs = [];
  legs.push(await leg('1 settee/src -> PouchDB(memory)', () => local.replicate.from(src, opts)));
  legs.push(await leg('2 PouchDB(memory) -> pouchdb-server/mid', () => local.replicate.to(mid, opts)));
  legs.push(await leg('3 pouchdb-server/mid -> settee/back', () => PouchDB.replicate(mid, back, opts)));
  legs.push(await leg('3b pouchdb-server/mid -> settee/back (again, no-op)',
    () => PouchDB.replicate(mid, back, opts)));

  currentLeg = 'dump';
  const dump = await dumpLocal(local);
  const out = {
    versions: {
      pouchdb: PouchDB.version,
      node: process.version,
    },
    options: opts,
    legs,
    requests,
    local: dump,
  };
  fs.writeFileSync(cfg.result, JSON.stringify(out));
}

main().catch((err) => {
  process.stderr.write(`attachment_roundtrip.js: ${err && err.stack || err}\n`);
  process.exit(2);
});
