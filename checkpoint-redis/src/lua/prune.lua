-- `prune` of one thread: keeps the newest `keep` checkpoints of each namespace, and what
-- those need for their delta channels. Arguments: `PruneArgs` in scripts.rs.
local ethread, keep = ARGV[1], tonumber(ARGV[2])
if keep == 0 then
  wipe(ethread)
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
    local kept, rest = {}, {}
    for _, m in ipairs(redis.call('ZREVRANGEBYLEX', MI, hi, lo)) do
      local tref = string.sub(m, #p + 1) .. nsp
      if #kept < keep then
        if redis.call('HEXISTS', CP, tref) == 1 then
          kept[#kept + 1] = tref
        else
          redis.call('ZREM', MI, m, BYID .. tref)
        end
      else
        rest[#rest + 1] = {m, tref}
      end
    end
    local needed = delta_needed(kept, nsp)
    for _, e in ipairs(rest) do
      local m, tref = e[1], e[2]
      if not needed[tref] then
        local rec = redis.call('HGET', CP, tref)
        if rec then
          delete_checkpoint(tref, rec, ethread, candidates)
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
