-- `put`: stores a checkpoint's record, or replaces it (a re-put), and its index entries.
-- Arguments: `PutArgs` in scripts.rs. Its mode says what the client already wrote:
-- - `P` (single node, unconditional put): the values, chunks and index entries were written
--   with plain commands in the same `MULTI`/`EXEC` ahead of this script. A new checkpoint
--   never gets here (the client stores its record with a plain `HSETNX` and runs only
--   `touch.lua`): this is its re-put, sent when that `HSETNX` found the id taken. The fields
--   and tokens it needs are parsed from the record.
-- - `F` (single node, compare-and-set or fenced put, which this script may refuse): the
--   values were written ahead; the index entries follow as ZADD arguments, then the value
--   and chunk fields to sweep again if the put is refused.
-- - `V` (Cluster): the index entries follow, then the (field, value) pairs to write here
--   (the global index is kept by `gindex.lua`).
-- The index members are built by the client: building them from the tokens in Lua cost
-- more than half of the script's time.
local ttl, ethread, fence, cas, nsp, idp, par, rec, mode =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
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
local stale = check_fence(fence)
if stale then return refuse(stale) end
local tref = idp .. nsp
-- `old`: the record this put replaces (false: none), read only when needed.
local old, known = false, false
if cas == '1' then
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
  if known then g_set(idp .. ethread .. nsp, toks) elseif ngm > 0 then zadd_argv(GMI, 12 + nmi, 11 + nmi + ngm) end
end
touch(ttl)
if old then return {'OK', pack(oldtoks)} end
return {'OK', false}
