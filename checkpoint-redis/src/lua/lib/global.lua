-- Global index maintenance.

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
