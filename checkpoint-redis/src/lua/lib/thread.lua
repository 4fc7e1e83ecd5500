-- Thread helpers: heads, tuple summaries.

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
