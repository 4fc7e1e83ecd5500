-- Deleting checkpoints and threads (needs the global helpers).

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
