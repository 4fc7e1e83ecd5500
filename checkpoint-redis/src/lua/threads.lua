-- One page of thread ids from the global index's thread entries (`\3 esc(thread) cp_key`),
-- in order from `lo` (a `ZRANGEBYLEX` start). With `check` (single node), an entry whose
-- `cp_key` is gone (the thread expired, or lost its last checkpoint) is removed, atomically
-- with the check (where this client may write), and not returned; without it (Cluster,
-- where those keys live in other slots) every entry is returned and the client checks. At
-- most `budget` entries are examined. Returns {entries, last entry examined, 1 when the
-- index has no more}.
-- Arguments: `ThreadsArgs` in scripts.rs.
local lo, want, budget, check = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local HI_ENTRY = '(\4'
local out, last, seen = {}, '', 0
while #out < want and seen < budget do
  local n = math.min(want - #out, budget - seen)
  local ms = redis.call('ZRANGEBYLEX', GMI, lo, HI_ENTRY, 'LIMIT', 0, n)
  for _, m in ipairs(ms) do
    seen = seen + 1
    last = m
    local z = comp_end(m, 2)
    if not check then
      out[#out + 1] = m
    elseif z and redis.call('EXISTS', string.sub(m, z + 1)) == 1 then
      out[#out + 1] = m
    elseif z then
      -- `pcall`: a client that may not write (a replica, a read-only ACL) still lists.
      redis.pcall('ZREM', GMI, m)
    end
  end
  if #ms < n then return {out, last, 1} end
  lo = '(' .. last
end
return {out, last, 0}
