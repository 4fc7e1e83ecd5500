//! The server-side Lua scripts. Every operation on a thread is one script touching only that
//! thread's keys (one Cluster slot), so it is atomic and one round trip. On a single node the
//! same scripts also maintain the global indexes (passed as extra keys); on a Cluster the
//! global indexes live in their own slot and are maintained by [`GINDEX`] around the thread
//! script (see the crate README, "Cluster").

use std::sync::LazyLock;

use redis::Script;

/// A script body and its SHA1, invoked with `EVALSHA` and, when the server does not have it
/// cached yet, `EVAL` (which caches it; this also works on every Cluster node).
#[derive(Debug)]
pub(crate) struct Lua {
    pub(crate) code: String,
    pub(crate) hash: String,
}

impl Lua {
    fn new(code: String) -> Self {
        let hash = Script::new(&code).get_hash().to_owned();
        Self { code, hash }
    }
}

/// Key bindings of thread scripts: `KEYS[1..7]` are the thread's keys, `KEYS[8]` the
/// global index key when the script maintains it inline (single node). [`TOUCH`] gets
/// only `KEYS[1..6]` (`CP` … `OPT`).
///
/// The thread's sorted index `MI` holds three kinds of members, told apart by their first
/// byte (metadata tokens are printable, so they never start with `\1` or `\2`):
/// `\1 tref` (every checkpoint by id), `\2 esc(ns) esc(id)` (by namespace, then id) and
/// `token \0 tref` (metadata). The global `GMI` likewise holds `\1 gref pack(tokens)` and
/// `token \0 gref`. One `ZADD` per index keeps a put cheap.
const THREAD_HEADER: &str = r#"
local CP, BL, WI, WV, MI, OPT, LEASE =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local GMI = KEYS[8]
local INLINE = GMI ~= nil
local DATA = {CP, BL, WI, WV, MI}
"#;

/// Key bindings of global-index scripts.
const GLOBAL_HEADER: &str = r#"
local CP, BL, WI, WV, MI, OPT, LEASE
local GMI = KEYS[1]
local INLINE = true
local DATA = {}
"#;

// The helpers are split so each script defines only the closures it uses: defining all of
// them costs a few microseconds on every call.
/// Helpers every script uses (encodings, packing, index member lists).
const BASE: &str = r#"
local HI = '\255'
local BYID, BYNS = '\1', '\2'
-- Field prefixes of chunks and manifests in BL (see the `chunk` module).
local CHUNK, MANIFEST = '\1\3', '\1\4'
local ESC = {['\0'] = '\1\1', ['\1'] = '\1\2'}
local function esc(s) return (string.gsub(s, '[%z\1]', ESC)) .. '\0' end
local function comp_end(s, from) return string.find(s, '\0', from, true) end
local function netstr(s, i)
  local c = string.find(s, ':', i, true)
  local n = tonumber(string.sub(s, i, c - 1))
  return string.sub(s, c + 1, c + n), c + n + 1
end
local function list_of(s)
  local out, i = {}, 1
  while i <= #s do
    local v
    v, i = netstr(s, i)
    out[#out + 1] = v
  end
  return out
end
local function pack(list)
  local parts = {}
  for i, v in ipairs(list) do parts[i] = #v .. ':' .. v end
  return table.concat(parts)
end
local function record_parts(rec)
  local cv, i = netstr(rec, 1)
  local tk
  tk, i = netstr(rec, i)
  local parent
  parent, i = netstr(rec, i)
  return list_of(cv), list_of(tk), parent
end
local function split_tref(tref)
  local z = comp_end(tref, 1)
  return string.sub(tref, 1, z), string.sub(tref, z + 1)
end
local function chunked(cmd, key, items)
  local out = {}
  for i = 1, #items, 1000 do
    local part = redis.call(cmd, key, unpack(items, i, math.min(i + 999, #items)))
    if type(part) == 'table' then
      for _, v in ipairs(part) do out[#out + 1] = v end
    end
  end
  return out
end
-- ZADD (score 0) of `extra` members and of `tok .. suffix` for each token.
local function zadd_all(key, extra, toks, suffix)
  local args = {}
  for _, m in ipairs(extra) do
    args[#args + 1] = 0
    args[#args + 1] = m
  end
  for _, t in ipairs(toks) do
    args[#args + 1] = 0
    args[#args + 1] = t .. suffix
  end
  for i = 1, #args, 1000 do
    redis.call('ZADD', key, unpack(args, i, math.min(i + 999, #args)))
  end
end
-- ZADD of the (score, member) pairs ARGV[from..to], as the client built them.
local function zadd_argv(key, from, to)
  for i = from, to, 1000 do
    redis.call('ZADD', key, unpack(ARGV, i, math.min(i + 999, to)))
  end
end
-- ZREM of `extra` members and of `tok .. suffix` for each token.
local function zrem_all(key, extra, toks, suffix)
  local args = {}
  for _, m in ipairs(extra) do args[#args + 1] = m end
  for _, t in ipairs(toks) do args[#args + 1] = t .. suffix end
  for i = 1, #args, 1000 do
    redis.call('ZREM', key, unpack(args, i, math.min(i + 999, #args)))
  end
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fmt(n) return string.format('%d', n) end

"#;

/// Global index maintenance.
const GLOBAL_FNS: &str = r#"
-- Global index (inline on a single node; through GINDEX on a Cluster). A checkpoint has
-- `\1 gref pack(tokens)` (its tokens ride along, so no separate token table is needed) and
-- `token \0 gref` per token. Normally one `\1` member per gref; a second one can only come
-- from a put over an expired thread's left-over entry, and every reader tolerates it.
local GREM = {}
local function g_lookup(gref)
  local p = BYID .. gref
  local ms = redis.call('ZRANGEBYLEX', GMI, '[' .. p, '(' .. p .. HI)
  local toks = {}
  for _, m in ipairs(ms) do
    for _, t in ipairs(list_of(string.sub(m, #p + 1))) do toks[#toks + 1] = t end
  end
  return ms, toks
end
local function g_remove(gref)
  if INLINE then
    local ms, toks = g_lookup(gref)
    if #ms > 0 then zrem_all(GMI, ms, toks, '\0' .. gref) end
  else
    GREM[#GREM + 1] = gref
  end
end
-- A new checkpoint's entries (no lookup: used when its record did not exist).
local function g_new(gref, tokens)
  zadd_all(GMI, {BYID .. gref .. pack(tokens)}, tokens, '\0' .. gref)
end
-- Replaces a checkpoint's entries (`union`: keep the old tokens too).
local function g_put(gref, tokens, union)
  local ms, old = g_lookup(gref)
  local all, seen = {}, {}
  for _, t in ipairs(tokens) do
    if not seen[t] then seen[t] = true; all[#all + 1] = t end
  end
  local stale = {}
  for _, t in ipairs(old) do
    if not seen[t] then
      seen[t] = true
      if union then all[#all + 1] = t else stale[#stale + 1] = t end
    end
  end
  local member = BYID .. gref .. pack(all)
  local gone = {}
  for _, m in ipairs(ms) do
    if m ~= member then gone[#gone + 1] = m end
  end
  if #gone + #stale > 0 then zrem_all(GMI, gone, stale, '\0' .. gref) end
  zadd_all(GMI, {member}, tokens, '\0' .. gref)
end
local function g_set(gref, tokens) g_put(gref, tokens, false) end
local function g_add(gref, tokens) g_put(gref, tokens, true) end

"#;

/// Thread guards every writing script needs: TTL and fence. Kept apart from the other
/// helpers so the hot paths (`put` of a new checkpoint, `put_writes`) define nothing else:
/// every closure a script defines costs time on every call.
const GUARD_FNS: &str = r#"
-- Thread TTL: the per-thread override (0 = pinned) or the saver's default.
local function touch(default)
  local o = redis.call('HGET', OPT, 't')
  local ms = tonumber(o or default)
  if ms and ms > 0 then
    for _, k in ipairs(DATA) do redis.call('PEXPIRE', k, ms) end
    redis.call('PEXPIRE', OPT, ms)
  end
end

local function check_fence(fence)
  if fence == '' then return nil end
  local cur = redis.call('HGET', LEASE, 't') or '0'
  if tonumber(cur) ~= tonumber(fence) then return {'FENCE', cur} end
  return nil
end

"#;

/// Thread helpers: heads, tuple summaries.
const THREAD_FNS: &str = r#"

-- The newest checkpoint of a namespace. Index entries without a record are skipped: puts
-- write a record in the same transaction as its entries, but a record removed by hand, or
-- a put of an earlier release whose script met `NOSCRIPT`, leaves such a ghost, and a ghost
-- must never become the head.
local function head_idp(nsp)
  local p = BYNS .. nsp
  local max = '(' .. p .. HI
  while true do
    local h = redis.call('ZREVRANGEBYLEX', MI, max, '[' .. p, 'LIMIT', 0, 8)
    for _, m in ipairs(h) do
      local idp = string.sub(m, #p + 1)
      if redis.call('HEXISTS', CP, idp .. nsp) == 1 then return idp end
    end
    if #h < 8 then return nil end
    max = '(' .. h[#h]
  end
end

local function write_uniqs(tref, members)
  local uniqs = {}
  for i, m in ipairs(members) do
    local z = comp_end(m, #tref + 1)
    uniqs[i] = tref .. string.sub(m, z + 1)
  end
  return uniqs
end

-- The small part of a tuple: large values are fetched by the client with plain HMGETs
-- (moving large strings through Lua costs far more than a second pipelined step).
local function load_meta(tref)
  local rec = redis.call('HGET', CP, tref)
  if not rec then return nil end
  local ws = redis.call('ZRANGEBYLEX', WI, '[' .. tref, '(' .. tref .. HI)
  return {tref, rec, ws}
end

"#;

/// Chunked values (see the `chunk` module): reading manifests, in records and in `BL`.
const CHUNK_FNS: &str = r#"
-- The chunk fields a manifest (`C netstr(tag) netstr(header) id...`) names, in order.
local function manifest_ids(m)
  local _, i = netstr(m, 2)
  _, i = netstr(m, i)
  local ids = {}
  for k = i, #m, 16 do ids[#ids + 1] = CHUNK .. string.sub(m, k, k + 15) end
  return ids
end

-- The (field, manifest, ...) list a record carries for the values its put chunked.
local function record_manifests(rec)
  local _, i = netstr(rec, 1)
  _, i = netstr(rec, i)
  _, i = netstr(rec, i)
  return list_of((netstr(rec, i)))
end

"#;

/// Loading a whole tuple, chunked values reassembled (needs the thread and chunk helpers).
const LOAD_FNS: &str = r#"
-- The stored form of a chunked value: its manifest's header and chunks joined, or false
-- when a chunk is missing.
local function assemble(m)
  local tag, i = netstr(m, 2)
  local hdr = netstr(m, i)
  local ids = manifest_ids(m)
  local parts = {}
  if #ids > 0 then parts = chunked('HMGET', BL, ids) end
  for _, p in ipairs(parts) do
    if not p then return false end
  end
  return 'V' .. #tag .. ':' .. tag .. hdr .. table.concat(parts)
end

local function load_tuple(tref)
  local rec = redis.call('HGET', CP, tref)
  if not rec then return nil end
  local cv = record_parts(rec)
  local vals = {}
  if #cv > 0 then vals = chunked('HMGET', BL, cv) end
  local inline = {}
  local ms = record_manifests(rec)
  for i = 1, #ms, 2 do inline[ms[i]] = ms[i + 1] end
  for i, f in ipairs(cv) do
    if not vals[i] then
      -- The record's own manifest first (what its put wrote), then the stored one.
      if inline[f] then vals[i] = assemble(inline[f]) end
      if not vals[i] then
        local m = redis.call('HGET', BL, MANIFEST .. f)
        if m then vals[i] = assemble(m) end
      end
    end
  end
  local ws = redis.call('ZRANGEBYLEX', WI, '[' .. tref, '(' .. tref .. HI)
  local wv = {}
  if #ws > 0 then wv = chunked('HMGET', WV, write_uniqs(tref, ws)) end
  return {tref, rec, vals, ws, wv}
end
"#;

/// Mark-and-sweep of values (needs the base, thread and chunk helpers).
const SWEEP_FNS: &str = r#"
-- Deletes the values among `candidates` (fields of `BL`) that no checkpoint of the thread
-- names any more. Values carry no reference counts, so a put never pays for bookkeeping;
-- the ones that lose a checkpoint (prune, delete_for_runs, a re-put that changes a
-- checkpoint) are checked here against every remaining record, read in HSCAN pages.
-- Candidates may also be manifest or chunk fields (a refused put's own writes); a chunk is
-- deleted when no remaining manifest names it.
-- Marks (sets to nil) the chunks in `set` that manifest `m` names; returns how many.
local function unmark(set, m)
  local n = 0
  for _, c in ipairs(manifest_ids(m)) do
    if set[c] then set[c] = nil; n = n + 1 end
  end
  return n
end

local function sweep(candidates)
  local want, n, chunks, nc = {}, 0, {}, 0
  for _, f in ipairs(candidates) do
    local pre = string.sub(f, 1, 2)
    if pre == CHUNK then
      if not chunks[f] then chunks[f] = true; nc = nc + 1 end
    else
      if pre == MANIFEST then f = string.sub(f, 3) end
      if not want[f] then want[f] = true; n = n + 1 end
    end
  end
  local cursor = '0'
  while n > 0 do
    local page = redis.call('HSCAN', CP, cursor, 'COUNT', 500)
    cursor = page[1]
    local kv = page[2]
    for i = 2, #kv, 2 do
      for _, f in ipairs(list_of((netstr(kv[i], 1)))) do
        if want[f] then want[f] = nil; n = n - 1 end
      end
    end
    if cursor == '0' then break end
  end
  local dead, mdead = {}, {}
  for f in pairs(want) do
    dead[#dead + 1] = f
    mdead[#mdead + 1] = MANIFEST .. f
  end
  if #dead > 0 then
    for _, m in ipairs(chunked('HMGET', BL, mdead)) do
      if m then
        for _, c in ipairs(manifest_ids(m)) do
          if not chunks[c] then chunks[c] = true; nc = nc + 1 end
        end
      end
    end
    chunked('HDEL', BL, dead)
    chunked('HDEL', BL, mdead)
  end
  if nc == 0 then return end
  -- A chunk lives while a stored manifest or a record's own manifest names it.
  cursor = '0'
  repeat
    local page = redis.call('HSCAN', BL, cursor, 'MATCH', MANIFEST .. '*', 'COUNT', 1000)
    cursor = page[1]
    local kv = page[2]
    for i = 2, #kv, 2 do nc = nc - unmark(chunks, kv[i]) end
  until cursor == '0' or nc == 0
  if nc == 0 then return end
  cursor = '0'
  repeat
    local page = redis.call('HSCAN', CP, cursor, 'COUNT', 500)
    cursor = page[1]
    local kv = page[2]
    for i = 2, #kv, 2 do
      local ms = record_manifests(kv[i])
      for j = 2, #ms, 2 do nc = nc - unmark(chunks, ms[j]) end
    end
  until cursor == '0' or nc == 0
  if nc == 0 then return end
  local gone = {}
  for c in pairs(chunks) do gone[#gone + 1] = c end
  chunked('HDEL', BL, gone)
end

"#;

/// Deleting checkpoints and threads (needs the global helpers).
const DELETE_FNS: &str = r#"
-- Deletes a checkpoint; the values it named become candidates for `sweep`.
local function delete_checkpoint(tref, rec, ethread, candidates)
  local cv, toks = record_parts(rec)
  for _, f in ipairs(cv) do candidates[#candidates + 1] = f end
  local idp, nsp = split_tref(tref)
  redis.call('HDEL', CP, tref)
  zrem_all(MI, {BYID .. tref, BYNS .. nsp .. idp}, toks, '\0' .. tref)
  local lo, hi = '[' .. tref, '(' .. tref .. HI
  local ws = redis.call('ZRANGEBYLEX', WI, lo, hi)
  if #ws > 0 then
    chunked('HDEL', WV, write_uniqs(tref, ws))
    redis.call('ZREMRANGEBYLEX', WI, lo, hi)
  end
  g_remove(idp .. ethread .. nsp)
end

local function wipe(ethread)
  local trefs = redis.call('ZRANGEBYLEX', MI, '[' .. BYID, '(' .. BYNS)
  for _, m in ipairs(trefs) do
    local idp, nsp = split_tref(string.sub(m, 2))
    g_remove(idp .. ethread .. nsp)
  end
  redis.call('DEL', unpack(DATA))
end

"#;

/// Lexicographic range scans with an index-intersection filter.
const SCAN_FNS: &str = r#"
-- Lexicographic range scans, newest first, with an index-intersection filter.
local function bound_min(prefix, lo)
  if lo == '-' then return '[' .. prefix end
  return string.sub(lo, 1, 1) .. prefix .. string.sub(lo, 2)
end
local function bound_max(prefix, hi)
  if hi == '+' then
    if prefix == '' then return '+' end
    return '(' .. prefix .. HI
  end
  return string.sub(hi, 1, 1) .. prefix .. string.sub(hi, 2)
end
local function ns_of(ref, skip)
  local pos = 1
  for _ = 1, skip do pos = comp_end(ref, pos) + 1 end
  return string.sub(ref, pos)
end
local function scan(cands, lo, hi, nscheck, nsskip, want, budget)
  local best, bestn = 1, nil
  if #cands > 1 then
    for i, c in ipairs(cands) do
      local n = redis.call('ZLEXCOUNT', c[1], bound_min(c[2], lo), bound_max(c[2], hi))
      if bestn == nil or n < bestn then best, bestn = i, n end
    end
  end
  local d = cands[best]
  local checks = {}
  for i, c in ipairs(cands) do
    if i ~= best then checks[#checks + 1] = c end
  end
  local min, max = bound_min(d[2], lo), bound_max(d[2], hi)
  local out, examined, last, done = {}, 0, false, false
  while #out < want do
    local batch = math.min(256, budget - examined)
    if batch <= 0 then break end
    local ms = redis.call('ZREVRANGEBYLEX', d[1], max, min, 'LIMIT', 0, batch)
    -- The batch's references, and which of them pass the namespace check.
    local refs, pass, prev = {}, {}, last
    for i, m in ipairs(ms) do
      local ref = string.sub(m, #d[2] + 1)
      if d[3] then
        -- Keep the first d[3] components (`\1 gref pack(tokens)` members of the global
        -- index); a repeated gref (see g_lookup) is listed once.
        local pos = 0
        for _ = 1, d[3] do pos = comp_end(ref, pos + 1) end
        ref = string.sub(ref, 1, pos)
      end
      refs[i] = ref
      pass[i] = ref ~= prev and (nscheck == '' or ns_of(ref, nsskip) == nscheck)
      prev = ref
    end
    -- The other lists of the intersection: one ZMSCORE per list for the whole batch (one
    -- ZSCORE per candidate costs several times more in calls from Lua).
    for _, c in ipairs(checks) do
      local at, members = {}, {}
      for i = 1, #refs do
        if pass[i] then
          at[#at + 1] = i
          members[#members + 1] = c[2] .. refs[i]
        end
      end
      if #members == 0 then break end
      local scores = redis.call('ZMSCORE', c[1], unpack(members))
      for k, i in ipairs(at) do
        if not scores[k] then pass[i] = false end
      end
    end
    local full = false
    for i = 1, #refs do
      examined = examined + 1
      last = refs[i]
      if pass[i] then
        out[#out + 1] = refs[i]
        if #out >= want then full = true; break end
      end
    end
    if full then break end
    if #ms < batch then done = true; break end
    max = '(' .. d[2] .. last
  end
  return out, last, done
end
"#;

/// `put`. ARGV: default ttl ms, esc(thread), fence or '', cas '1'/'0', esc(ns), esc(id),
/// esc(parent) or '', record, then a mode:
/// - `P` (single node, unconditional put): nothing more. The client wrote the values, the
///   chunks and the index entries (`ZADD`s) with plain commands in the same `MULTI`/`EXEC`
///   ahead of this script, which stores the record, or replaces it and drops what the old
///   one named alone. A new checkpoint never gets here: the client stores its record with
///   a plain `HSETNX` and runs only [`TOUCH`]; this mode is its re-put, sent when that
///   `HSETNX` found the id taken. It parses the fields and tokens it needs from the record.
/// - `F` (single node, compare-and-set or fenced put, which the script may refuse): k, the
///   k arguments of the thread index `ZADD` (score, member pairs), g, the g arguments of the
///   global index `ZADD`, then the fields of the values and chunks the client wrote in the
///   same `MULTI`/`EXEC` (swept again if the put is refused).
/// - `V` (Cluster): k and the thread index arguments, 0 (the global index is kept by
///   [`GINDEX`]), then (field, value) pairs to write here (chunks first).
///
/// The index members are built by the client: building them from the tokens in Lua cost
/// more than half of the script's time.
const PUT: &str = r#"
local nsp, idp, par, rec = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local mode = ARGV[9]
-- 'P': the client wrote the values and the index entries itself in the same MULTI (an
-- unconditional put, which nothing can refuse); 'F': it wrote the values, the index
-- entries follow, then the value fields to remove if the put is refused; 'V' (Cluster):
-- the index entries follow, then the (field, value) pairs to write here.
local nmi, ngm, tail = 0, 0, 10
if mode ~= 'P' then
  nmi = tonumber(ARGV[10])
  ngm = tonumber(ARGV[11 + nmi])
  tail = 12 + nmi + ngm
end
local function refuse(reply)
  if mode == 'P' then
    return redis.error_reply('checkpoint-redis: a prewritten put cannot be refused')
  end
  if mode == 'F' and #ARGV >= tail then
    local fields = {}
    for i = tail, #ARGV do fields[#fields + 1] = ARGV[i] end
    sweep(fields)
  end
  return reply
end
local stale = check_fence(ARGV[3])
if stale then return refuse(stale) end
local tref = idp .. nsp
-- `old`: the record this put replaces (false: none), read only when needed.
local old, known = false, false
if ARGV[4] == '1' then
  local head = head_idp(nsp)
  local ok = (head == nil and par == '') or (head ~= nil and head == par)
  if not ok and head == idp then
    old, known = redis.call('HGET', CP, tref), true
    if old then
      local _, _, oldpar = record_parts(old)
      ok = (oldpar == par)
    end
  end
  if not ok then return refuse({'CONFLICT', head or false}) end
end
if mode == 'V' then
  for i = tail, #ARGV, 2 do redis.call('HSETNX', BL, ARGV[i], ARGV[i + 1]) end
end
-- A new checkpoint is stored with one HSETNX; a re-put replaces. (In mode P the client
-- stored a new record itself: this is a re-put, or a put whose id vanished in between.)
if not known and redis.call('HSETNX', CP, tref, rec) == 0 then
  old, known = redis.call('HGET', CP, tref), true
end
-- The new record's fields and tokens matter only to a re-put (parsed from the record).
local toks, oldtoks, gone = {}, {}, {}
if known then
  local cv
  cv, toks = record_parts(rec)
  if old then
    local ocv
    ocv, oldtoks = record_parts(old)
    local named = {}
    for _, f in ipairs(cv) do named[f] = true end
    for _, f in ipairs(ocv) do
      if not named[f] then gone[#gone + 1] = f end
    end
    local keep, dropped = {}, {}
    for _, t in ipairs(toks) do keep[t] = true end
    for _, t in ipairs(oldtoks) do
      if not keep[t] then dropped[#dropped + 1] = t end
    end
    if #dropped > 0 then zrem_all(MI, {}, dropped, '\0' .. tref) end
  end
  redis.call('HSET', CP, tref, rec)
end
-- Values only the replaced record named (after the HSET, so it no longer counts).
if #gone > 0 then sweep(gone) end
if nmi > 0 then zadd_argv(MI, 11, 10 + nmi) end
if INLINE then
  if known then g_set(idp .. ARGV[2] .. nsp, toks) elseif ngm > 0 then zadd_argv(GMI, 12 + nmi, 11 + nmi + ngm) end
end
touch(ARGV[1])
if old then return {'OK', pack(oldtoks)} end
return {'OK', false}
"#;

/// The TTL refresh of a single-node unconditional put, which writes everything else with
/// plain commands in the same `MULTI`/`EXEC`. KEYS: the thread's data keys and `OPT`
/// (`CP` … `OPT`). ARGV: default ttl ms.
const TOUCH: &str = r#"
touch(ARGV[1])
return 1
"#;

/// `put_writes`. ARGV: default ttl ms, esc(thread), fence or '', tref, replace '1'/'0',
/// esc(task_path), then (esc(task_id) idx8, netstr(esc(task_path)) payload) pairs (stored
/// as given). Without `replace`, the first write of a (task, index) wins (`HSETNX`).
const PUT_WRITES: &str = r#"
local stale = check_fence(ARGV[3])
if stale then return stale end
local tref, path = ARGV[4], ARGV[6]
local replace = ARGV[5] == '1'
for i = 7, #ARGV, 2 do
  local tail = ARGV[i]
  local uniq = tref .. tail
  if replace then
    local old = redis.call('HGET', WV, uniq)
    if old then
      -- The stored write starts with netstr(task path).
      local c = string.find(old, ':', 1, true)
      local oldpath = string.sub(old, c + 1, c + tonumber(string.sub(old, 1, c - 1)))
      redis.call('ZREM', WI, tref .. oldpath .. tail)
    end
    redis.call('HSET', WV, uniq, ARGV[i + 1])
    redis.call('ZADD', WI, 0, tref .. path .. tail)
  elseif redis.call('HSETNX', WV, uniq, ARGV[i + 1]) == 1 then
    redis.call('ZADD', WI, 0, tref .. path .. tail)
  end
end
touch(ARGV[1])
return {'OK'}
"#;

/// `get_tuple`. ARGV: default ttl ms, refresh '1'/'0', esc(ns), esc(id) or '' for latest,
/// '1' for the small part only (see `load_meta`).
const GET: &str = r#"
local nsp, idp = ARGV[3], ARGV[4]
if idp == '' then
  idp = head_idp(nsp)
  if not idp then return false end
end
local t
if ARGV[5] == '1' then t = load_meta(idp .. nsp) else t = load_tuple(idp .. nsp) end
if t and ARGV[2] == '1' then touch(ARGV[1]) end
return t or false
"#;

/// One page of a thread-scoped `list`, with the small part of each tuple. ARGV: default ttl ms, refresh, want,
/// budget, lo, hi, ns check, mode ('byns' | 'byid' | 'mi'), esc(ns) (byns), tokens (mi)...
const LIST: &str = r#"
local mode = ARGV[8]
local cands, suffix = {}, ''
if mode == 'byns' then
  cands = {{MI, BYNS .. ARGV[9]}}
  suffix = ARGV[9]
elseif mode == 'byid' then
  cands = {{MI, BYID}}
else
  for i = 10, #ARGV do cands[#cands + 1] = {MI, ARGV[i] .. '\0'} end
end
local refs, last, done = scan(cands, ARGV[5], ARGV[6], ARGV[7], 1, tonumber(ARGV[3]), tonumber(ARGV[4]))
local tuples = {}
for _, r in ipairs(refs) do
  local t = load_meta(r .. suffix)
  if t then tuples[#tuples + 1] = t end
end
if ARGV[2] == '1' and #tuples > 0 then touch(ARGV[1]) end
return {tuples, last, done and 1 or 0}
"#;

/// One page of global references. ARGV: want, budget, lo, hi, ns check, mode ('all' | 'mi'),
/// tokens...
const GSCAN: &str = r#"
local cands = {}
if ARGV[6] == 'all' then
  cands = {{GMI, BYID, 3}}
else
  for i = 7, #ARGV do cands[#cands + 1] = {GMI, ARGV[i] .. '\0'} end
end
local refs, last, done = scan(cands, ARGV[3], ARGV[4], ARGV[5], 2, tonumber(ARGV[1]), tonumber(ARGV[2]))
return {refs, last, done and 1 or 0}
"#;

/// Global index maintenance (Cluster, and repair). ARGV: ops 'A' gref tokens | 'S' gref
/// tokens | 'R' gref | 'X' gref cp-key tref (remove only if the checkpoint is gone).
const GINDEX: &str = r#"
local i = 1
while i <= #ARGV do
  local op = ARGV[i]
  if op == 'A' then
    g_add(ARGV[i + 1], list_of(ARGV[i + 2]))
    i = i + 3
  elseif op == 'S' then
    g_set(ARGV[i + 1], list_of(ARGV[i + 2]))
    i = i + 3
  elseif op == 'R' then
    g_remove(ARGV[i + 1])
    i = i + 2
  elseif op == 'X' then
    if redis.call('HEXISTS', ARGV[i + 2], ARGV[i + 3]) == 0 then g_remove(ARGV[i + 1]) end
    i = i + 4
  else
    return redis.error_reply('checkpoint-redis: unknown index op')
  end
end
return {'OK'}
"#;

/// `delete_thread`. ARGV: unused, esc(thread).
const DELETE_THREAD: &str = r#"
wipe(ARGV[2])
redis.call('DEL', OPT)
return {'OK', GREM}
"#;

/// `prune` of one thread. ARGV: unused, esc(thread), keep.
const PRUNE: &str = r#"
local keep = tonumber(ARGV[3])
if keep == 0 then
  wipe(ARGV[2])
  return {'OK', GREM}
end
local nsmin = '[' .. BYNS
local candidates = {}
while true do
  local f = redis.call('ZRANGEBYLEX', MI, nsmin, '(' .. BYNS .. HI, 'LIMIT', 0, 1)
  if not f[1] then break end
  local z = comp_end(f[1], 2)
  local nsp = string.sub(f[1], 2, z)
  local p = BYNS .. nsp
  local lo, hi = '[' .. p, '(' .. p .. HI
  if redis.call('ZLEXCOUNT', MI, lo, hi) > keep then
    -- Newest first; index entries without a record (see head_idp) are dropped and never
    -- count toward `keep`.
    local kept = 0
    for _, m in ipairs(redis.call('ZREVRANGEBYLEX', MI, hi, lo)) do
      local tref = string.sub(m, #p + 1) .. nsp
      if kept < keep then
        if redis.call('HEXISTS', CP, tref) == 1 then
          kept = kept + 1
        else
          redis.call('ZREM', MI, m, BYID .. tref)
        end
      else
        local rec = redis.call('HGET', CP, tref)
        if rec then
          delete_checkpoint(tref, rec, ARGV[2], candidates)
        else
          redis.call('ZREM', MI, m, BYID .. tref)
        end
      end
    end
  end
  nsmin = '(' .. p .. HI
end
sweep(candidates)
return {'OK', GREM}
"#;

/// `delete_for_runs` in one thread. ARGV: unused, esc(thread), run token, trefs...
const DELETE_RUNS: &str = r#"
local n, candidates = 0, {}
for i = 4, #ARGV do
  local rec = redis.call('HGET', CP, ARGV[i])
  if rec then
    local _, toks = record_parts(rec)
    for _, t in ipairs(toks) do
      if t == ARGV[3] then
        delete_checkpoint(ARGV[i], rec, ARGV[2], candidates)
        n = n + 1
        break
      end
    end
  end
end
sweep(candidates)
return {'OK', GREM, n}
"#;

/// Snapshot of a thread for `copy_thread`: checkpoints, values, writes.
const COPY_READ: &str = r#"
local cp = redis.call('HGETALL', CP)
local bl = redis.call('HGETALL', BL)
local ws = redis.call('ZRANGE', WI, 0, -1)
local wv = {}
for i, m in ipairs(ws) do
  local z1 = comp_end(m, 1)
  local z2 = comp_end(m, z1 + 1)
  local z3 = comp_end(m, z2 + 1)
  wv[i] = redis.call('HGET', WV, string.sub(m, 1, z2) .. string.sub(m, z3 + 1))
end
return {cp, bl, ws, wv}
"#;

/// The write half of `copy_thread`: inserts what the target lacks. ARGV: default ttl ms,
/// esc(target), n, n (tref, record) pairs, m, m (field, value) pairs, then (member, value)
/// write pairs.
const COPY_WRITE: &str = r#"
local i = 4
local added = 0
for _ = 1, tonumber(ARGV[3]) do
  local tref, rec = ARGV[i], ARGV[i + 1]
  i = i + 2
  if redis.call('HSETNX', CP, tref, rec) == 1 then
    added = added + 1
    local _, toks = record_parts(rec)
    local idp, nsp = split_tref(tref)
    zadd_all(MI, {BYID .. tref, BYNS .. nsp .. idp}, toks, '\0' .. tref)
    if INLINE then g_set(idp .. ARGV[2] .. nsp, toks) end
  end
end
local nb = tonumber(ARGV[i])
i = i + 1
for _ = 1, nb do
  redis.call('HSETNX', BL, ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i <= #ARGV do
  local m, v = ARGV[i], ARGV[i + 1]
  i = i + 2
  local z1 = comp_end(m, 1)
  local z2 = comp_end(m, z1 + 1)
  local z3 = comp_end(m, z2 + 1)
  if redis.call('HSETNX', WV, string.sub(m, 1, z2) .. string.sub(m, z3 + 1), v) == 1 then
    redis.call('ZADD', WI, 0, m)
  end
end
touch(ARGV[1])
return {'OK', added}
"#;

/// Per-thread TTL. ARGV: mode ('pin' | 'ms' | 'default'), ms, default ttl ms.
const SET_TTL: &str = r#"
local mode, ms, default = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if mode == 'pin' then
  redis.call('HSET', OPT, 't', '0')
  for _, k in ipairs(DATA) do redis.call('PERSIST', k) end
  redis.call('PERSIST', OPT)
elseif mode == 'ms' then
  redis.call('HSET', OPT, 't', fmt(ms))
  for _, k in ipairs(DATA) do redis.call('PEXPIRE', k, ms) end
  redis.call('PEXPIRE', OPT, ms)
else
  redis.call('DEL', OPT)
  for _, k in ipairs(DATA) do
    if default > 0 then redis.call('PEXPIRE', k, default) else redis.call('PERSIST', k) end
  end
end
return {'OK'}
"#;

/// Lease acquisition. KEYS: the thread's lease key. ARGV: holder, ttl ms.
const LEASE_ACQUIRE: &str = r#"
local now = now_ms()
local h = redis.call('HMGET', KEYS[1], 'h', 't', 'e')
local holder, tok, exp = h[1], tonumber(h[2]), tonumber(h[3])
local token
if tok and exp and exp > now then
  if holder ~= ARGV[1] then return false end
  token = tok
elseif tok then
  token = tok + 1
else
  token = 1
end
redis.call('HSET', KEYS[1], 'h', ARGV[1], 't', fmt(token), 'e', fmt(now + tonumber(ARGV[2])))
return fmt(token)
"#;

/// Lease renewal. KEYS: lease key. ARGV: holder, token, ttl ms.
const LEASE_RENEW: &str = r#"
local now = now_ms()
local h = redis.call('HMGET', KEYS[1], 'h', 't')
local tok = tonumber(h[2])
if tok and tok == tonumber(ARGV[2]) and h[1] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'e', fmt(now + tonumber(ARGV[3])))
  return {'OK'}
end
return {'FENCE', fmt(tok or 0)}
"#;

/// Lease release. KEYS: lease key. ARGV: holder, token.
const LEASE_RELEASE: &str = r#"
local now = now_ms()
local h = redis.call('HMGET', KEYS[1], 'h', 't')
local tok = tonumber(h[2])
if tok and tok == tonumber(ARGV[2]) and h[1] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'e', fmt(now), 'h', '')
end
return {'OK'}
"#;

/// Ledger claim. KEYS: claim key. ARGV: ttl ms.
const CLAIM: &str = r#"
local now = now_ms()
local s = redis.call('HMGET', KEYS[1], 't', 's', 'e', 'o')
local tok, st, exp = tonumber(s[1]), s[2], tonumber(s[3])
if st == 'c' then return {'C', s[4]} end
if st == 'p' and exp and exp > now then return {'P', fmt(exp - now)} end
local token = (tok or 0) + 1
redis.call('HSET', KEYS[1], 't', fmt(token), 's', 'p', 'e', fmt(now + tonumber(ARGV[1])))
redis.call('HDEL', KEYS[1], 'o')
return {'A', fmt(token)}
"#;

/// Ledger completion. KEYS: claim key. ARGV: token, outcome.
const CLAIM_COMPLETE: &str = r#"
local s = redis.call('HMGET', KEYS[1], 't', 's')
local tok, st = tonumber(s[1]), s[2]
if tok and tok == tonumber(ARGV[1]) then
  if st == 'p' then
    redis.call('HSET', KEYS[1], 's', 'c', 'o', ARGV[2])
    redis.call('HDEL', KEYS[1], 'e')
    return {'OK'}
  elseif st == 'c' then
    return {'OK'}
  end
  return {'ABANDONED', fmt(tok)}
end
return {'FENCE', fmt(tok or 0)}
"#;

/// Ledger abandon. KEYS: claim key. ARGV: token.
const CLAIM_ABANDON: &str = r#"
local s = redis.call('HMGET', KEYS[1], 't', 's')
if tonumber(s[1]) == tonumber(ARGV[1]) and s[2] == 'p' then
  redis.call('HSET', KEYS[1], 's', 'a')
end
return {'OK'}
"#;

/// Every script, compiled once (the SHA1 is computed here; the server caches the body the
/// first time `EVAL` falls back from `EVALSHA`).
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) put: Lua,
    pub(crate) touch: Lua,
    pub(crate) put_writes: Lua,
    pub(crate) get: Lua,
    pub(crate) list: Lua,
    pub(crate) gscan: Lua,
    pub(crate) gindex: Lua,
    pub(crate) delete_thread: Lua,
    pub(crate) prune: Lua,
    pub(crate) delete_runs: Lua,
    pub(crate) copy_read: Lua,
    pub(crate) copy_write: Lua,
    pub(crate) set_ttl: Lua,
    pub(crate) lease_acquire: Lua,
    pub(crate) lease_renew: Lua,
    pub(crate) lease_release: Lua,
    pub(crate) claim: Lua,
    pub(crate) claim_complete: Lua,
    pub(crate) claim_abandon: Lua,
}

/// Every helper, for the maintenance scripts.
const ALL_FNS: [&str; 9] = [
    GUARD_FNS, BASE, GLOBAL_FNS, THREAD_FNS, CHUNK_FNS, LOAD_FNS, SWEEP_FNS, DELETE_FNS, SCAN_FNS,
];

fn script(header: &str, helpers: &[&str], body: &str) -> Lua {
    Lua::new(format!("{header}{}{body}", helpers.concat()))
}

fn thread(body: &str) -> Lua {
    script(THREAD_HEADER, &ALL_FNS, body)
}

fn global(body: &str) -> Lua {
    script(GLOBAL_HEADER, &ALL_FNS, body)
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    put: script(
        THREAD_HEADER,
        &[
            GUARD_FNS, BASE, GLOBAL_FNS, THREAD_FNS, CHUNK_FNS, SWEEP_FNS,
        ],
        PUT,
    ),
    put_writes: script(THREAD_HEADER, &[GUARD_FNS], PUT_WRITES),
    touch: script(THREAD_HEADER, &[GUARD_FNS], TOUCH),
    get: script(
        THREAD_HEADER,
        &[GUARD_FNS, BASE, THREAD_FNS, CHUNK_FNS, LOAD_FNS],
        GET,
    ),
    list: script(
        THREAD_HEADER,
        &[GUARD_FNS, BASE, THREAD_FNS, SCAN_FNS],
        LIST,
    ),
    gscan: script(GLOBAL_HEADER, &[BASE, SCAN_FNS], GSCAN),
    gindex: script(GLOBAL_HEADER, &[BASE, GLOBAL_FNS], GINDEX),
    delete_thread: thread(DELETE_THREAD),
    prune: thread(PRUNE),
    delete_runs: thread(DELETE_RUNS),
    copy_read: thread(COPY_READ),
    copy_write: thread(COPY_WRITE),
    set_ttl: thread(SET_TTL),
    lease_acquire: global(LEASE_ACQUIRE),
    lease_renew: global(LEASE_RENEW),
    lease_release: global(LEASE_RELEASE),
    claim: global(CLAIM),
    claim_complete: global(CLAIM_COMPLETE),
    claim_abandon: global(CLAIM_ABANDON),
});

impl Scripts {
    /// Every script, for preloading with `SCRIPT LOAD`.
    pub(crate) fn all(&self) -> [&Lua; 19] {
        [
            &self.put,
            &self.touch,
            &self.put_writes,
            &self.get,
            &self.list,
            &self.gscan,
            &self.gindex,
            &self.delete_thread,
            &self.prune,
            &self.delete_runs,
            &self.copy_read,
            &self.copy_write,
            &self.set_ttl,
            &self.lease_acquire,
            &self.lease_renew,
            &self.lease_release,
            &self.claim,
            &self.claim_complete,
            &self.claim_abandon,
        ]
    }
}
